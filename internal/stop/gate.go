package stop

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"freeze/internal/freeze"
	"freeze/internal/gate"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/timeline"
)

// wantsGate reports whether the run tries the kernel gate: --method bpf,
// and auto, where it comes first.
func (r *run) wantsGate() bool {
	return !r.c.DryRun && (r.c.Method == freeze.Bpf || r.c.Method == freeze.Auto)
}

// gate is the first part of step 2, taken before the first scan: the
// identity of a --path target is known from the file, so the chain stops
// growing before freeze reads a single process of it, and the scan then
// reads a set that can no longer change. With --arg the file is an
// interpreter that runs much else, so the gate knows no file: the scan's
// matches are marked one by one, and what they start is gated by lineage.
// Where the gate cannot load, the run falls back to the cgroup methods
// and says why.
func (r *run) gate() error {
	if !r.wantsGate() {
		return nil // a spare in r.c.Gate is closed at the end of Run
	}
	files, note := gateFiles(r.c.Spec)
	// The gate stops. FREEZE_GATE_ACTION=kill makes a run that is going
	// to kill the chain (not --hold) let the gate kill it instead, each
	// process at its next fork or exec. Measured against the stop in one
	// run (README, "The gate"): faster on churn-3000, the same on
	// bomb-2000, slower on tree-3000 (the scan then races thousands of
	// deaths), so stopping stays the default and the order stays freeze,
	// then kill.
	kill := !r.c.Hold && os.Getenv("FREEZE_GATE_ACTION") == "kill"
	// FREEZE_GATE_FORM picks the form (auto, lsm, fmod_ret, tp_btf): for
	// the benchmark and the VM matrix, which measure each form on one
	// kernel. Unset, auto: the refusing form where it loads.
	form, ferr := gate.ParseForm(envOr("FREEZE_GATE_FORM", "auto"))
	if ferr != nil {
		r.gateWhy = ferr.Error()
		r.rec.Record(timeline.StageFreeze, timeline.StepGateUnavailable, "the BPF gate is not available: FREEZE_GATE_FORM: "+r.gateWhy+"; falling back to the cgroup methods", timeline.F{"error": r.gateWhy, "method_asked": string(r.c.Method)})
		return nil
	}
	var g *gate.Gate
	var err error
	spare := r.c.Gate
	r.c.Gate = nil // taken: used below, or closed
	preloaded := spare != nil && spare.Kill == kill && r.c.BTF == "" && (form == gate.FormAuto || form == spare.Form)
	if preloaded {
		t0 := time.Now()
		g, err = spare, spare.Fill(files, gate.Exempt(r.c.FS))
		g.LoadTook = time.Since(t0) // preloaded: only the filling counts
		if err != nil {
			g.Close()
		}
	} else {
		if spare != nil {
			spare.Close()
		}
		g, err = gate.Load(gate.Config{Files: files, Exempt: gate.Exempt(r.c.FS), BTF: r.c.BTF, Kill: kill, Form: form})
	}
	if err == nil {
		if err = g.Attach(); err != nil {
			g.Close()
		}
	}
	if err == nil {
		// What only speeds things up loads once the chain is held: the
		// kill and scan iterators (a preloaded gate has them already).
		g.LoadExtras()
	}
	if err != nil {
		r.gateWhy = gate.Explain(err)
		r.rec.Record(timeline.StageFreeze, timeline.StepGateUnavailable, "the BPF gate is not available: "+r.gateWhy+"; falling back to the cgroup methods", timeline.F{"error": r.gateWhy, "method_asked": string(r.c.Method)})
		return nil
	}
	r.gateOn = g
	r.out.GatePrograms = g.ProgramIDs()
	// From now on every scan of the run reads the processes through the
	// gate's task iterator: milliseconds where /proc takes tens to
	// hundreds, and no contention with the chain's exits on /proc.
	if os.Getenv("FREEZE_SCAN") != "proc" && g.CanScan() {
		r.scanner.UseTasks(g.Tasks)
	}
	how := "load"
	if preloaded {
		how = "preloaded, filled in"
	}
	msg := fmt.Sprintf("gate attached, form %s (%s %v, attach %v, held after %v): no process of the chain can fork, clone or exec from now on; each that tries is %s", g.Form, how, g.LoadTook.Round(10e3), g.AttachTook.Round(10e3), g.HeldTook.Round(10e3), gateAction(g))
	if note != "" {
		msg += "; " + note
	}
	fields := timeline.F{"preloaded": preloaded, "load_ms": ms(g.LoadTook), "attach_ms": ms(g.AttachTook), "held_ms": ms(g.HeldTook), "extras_ms": ms(g.ExtrasTook), "files": g.Files, "by_file": g.Files > 0, "programs": g.ProgramIDs(), "action": gateAction(g), "form": g.Form.Word()}
	if len(g.Tried) > 0 {
		var tried []string
		for _, k := range g.Tried {
			tried = append(tried, k.Name+": "+k.Why)
		}
		fields["tried"] = tried
		msg += fmt.Sprintf("; %d stronger form(s) did not load here (the record's 'tried' says why)", len(tried))
	}
	var missing []string
	for _, k := range g.Missing {
		msg += "; without " + k.Name + ": " + k.Why
		missing = append(missing, k.Name+": "+k.Why)
	}
	if len(missing) > 0 {
		fields["missing"] = missing
	}
	r.rec.Record(timeline.StageFreeze, timeline.StepGateAttached, msg, fields)
	return nil
}

// gateAction is what the gate does to an attempt of the chain.
func gateAction(g *gate.Gate) string {
	if g.Form.Refuses() {
		return "refused and " + actionWord(g.Kill)
	}
	return actionWord(g.Kill)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// gateFiles are the files whose every process is the chain: the targets,
// and the executables under --under; none with --arg.
func gateFiles(spec match.Spec) ([]gate.File, string) {
	if len(spec.Args) > 0 {
		return nil, "with --arg the gate knows no file: it gates the scan's matches by pid and what they start by lineage"
	}
	var files []gate.File
	for _, t := range spec.Targets {
		files = append(files, gate.File{Path: t.Path, Stat: t.File})
	}
	more := 0
	for _, dir := range spec.Under {
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			info, err := d.Info()
			if err != nil || info.Mode().Perm()&0o111 == 0 {
				return nil
			}
			if len(files) >= gate.MaxFiles {
				more++
				return nil
			}
			if f, err := proc.StatFile(path); err == nil {
				files = append(files, gate.File{Path: path, Stat: f})
			}
			return nil
		})
	}
	if more > 0 {
		return files, fmt.Sprintf("%d more executables under --under than the gate holds: their processes are gated when the scan marks them", more)
	}
	return files, ""
}

// closeGate detaches the gate at the end of the run, whatever ended it,
// and records its counters.
func (r *run) closeGate() {
	g := r.gateOn
	if g == nil {
		return
	}
	c, cerr := g.Counters()
	err := g.Close()
	r.gateOn = nil
	fields := timeline.F{"action": gateAction(g), "form": g.Form.Word(), "forks_stopped": c.Forks(), "execs_stopped": c.Execs(), "forks_refused": c.ForksRefused, "execs_refused": c.ExecsRefused, "target_execs": c.TargetExecs, "lineage": c.Lineage}
	msg := fmt.Sprintf("gate detached: it %s %d fork and %d exec attempts of the chain and %d exec(s) of a target, and gated %d children by lineage", gateAction(g), c.Forks(), c.Execs(), c.TargetExecs, c.Lineage)
	if cerr != nil {
		msg += " (" + cerr.Error() + ")"
	}
	if err != nil {
		fields["error"] = err.Error()
		msg += "; detaching failed: " + err.Error()
	}
	r.rec.Record(timeline.StageFreeze, timeline.StepGateDetached, msg, fields)
}

func actionWord(kill bool) string {
	if kill {
		return "killed"
	}
	return "stopped"
}
