package postmortem

import (
	"bytes"
	"encoding/json"
	"freeze/internal/timeline"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fleetFixture writes timelines as collected from three hosts: one that
// reached zero, one with survivors, one whose run was cut off.
func fleetFixture(t *testing.T) string {
	dir := t.TempDir()
	files := map[string]string{
		"web-1/freeze-a.jsonl": `{"time":"2026-12-01T10:00:00Z","elapsed_ms":0,"step":"start","host":"web-1.example","machine_id":"m1","kernel":"6.1.0","command":["freeze","--path","/x"]}
{"time":"2026-12-01T10:00:00.1Z","elapsed_ms":100,"step":"match","matched":300,"msg":"300 live processes match"}
{"time":"2026-12-01T10:00:00.1Z","elapsed_ms":101,"step":"method","method":"cgroup2","group":"/g","why":"first"}
{"time":"2026-12-01T10:00:00.4Z","elapsed_ms":412.5,"step":"zero","msg":"zero remain"}
`,
		"web-2/freeze-b.jsonl": `{"time":"2026-12-01T10:00:01Z","elapsed_ms":0,"step":"start","host":"web-2.example","kernel":"6.1.0","command":["freeze","--path","/x"]}
{"time":"2026-12-01T10:00:01.1Z","elapsed_ms":100,"step":"match","matched":20}
{"time":"2026-12-01T10:00:01.1Z","elapsed_ms":100,"step":"method","method":"sigstop","group":"-","why":"no cgroup"}
{"time":"2026-12-01T10:00:03Z","elapsed_ms":2000,"step":"survivors","msg":"2 processes survive","survivors":[41,42]}
`,
		"db-1/freeze-c.jsonl": `{"time":"2026-12-01T10:00:02Z","elapsed_ms":0,"step":"start","host":"db-1.example"}
{"time":"2026-12-01T10:00:02.1Z","elapsed_ms":100,"step":"match","matched":5}
`,
		"stray.jsonl": `{"time":"2026-12-01T10:00:05Z","elapsed_ms":0,"step":"start","host":"lone.example"}
{"time":"2026-12-01T10:00:05.1Z","elapsed_ms":1,"step":"nothing-matched","msg":"nothing"}
`,
		"web-1/notes.txt": "not a timeline",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestFleetSumsUpEachHost(t *testing.T) {
	runs, err := LoadFleet([]string{fleetFixture(t)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]timeline.HostRun{}
	var order []string
	for _, r := range runs {
		got[r.Host] = r
		order = append(order, r.Host)
	}
	// Named by the directory collected into; a file at the top by the
	// hostname it recorded.
	if strings.Join(order, ",") != "db-1,lone.example,web-1,web-2" {
		t.Fatalf("rows %v", order)
	}
	w1 := got["web-1"]
	if w1.Outcome != "zero" || w1.Exit != 0 || w1.ZeroMS != 412.5 || w1.Matched != 300 || w1.Method != "cgroup2" ||
		w1.Hostname != "web-1.example" || w1.MachineID != "m1" || w1.Kernel != "6.1.0" || w1.Attention != "" {
		t.Errorf("web-1: %+v", w1)
	}
	w2 := got["web-2"]
	if w2.Outcome != "survivors" || w2.Exit != 1 || w2.Survivors != 2 || !strings.Contains(w2.Attention, "2 processes survived") {
		t.Errorf("web-2: %+v", w2)
	}
	d1 := got["db-1"]
	if d1.Outcome != "unfinished" || d1.Exit != -1 || !strings.Contains(d1.Attention, `after step "match"`) {
		t.Errorf("db-1: %+v", d1)
	}
	if l := got["lone.example"]; l.Outcome != "nothing-matched" || l.Exit != 0 || l.Attention != "" {
		t.Errorf("lone: %+v", l)
	}
	s := Fleet(runs)
	if s.Hosts != 4 || strings.Join(s.Attention, ",") != "db-1,web-2" || s.Outcomes["zero"] != 1 {
		t.Errorf("summary %+v", s)
	}
}

func TestRenderFleetMarkdownAndJSON(t *testing.T) {
	runs, err := LoadFleet([]string{fleetFixture(t)})
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	if err := RenderFleet(&md, runs, "markdown"); err != nil {
		t.Fatal(err)
	}
	out := md.String()
	for _, want := range []string{
		"# freeze fleet postmortem: 4 hosts, 4 runs",
		"| web-1 | zero | cgroup2 | 300 | host | 413ms | 0 | 0 | web-1.example | 6.1.0 |",
		"| web-2 | survivors | sigstop | 20 | host | - | 2 | 1 | web-2.example |",
		"| db-1 | unfinished | - | 5 | host | - | 0 | - |",
		"- **web-2**: 2 processes survived",
		"- **db-1**: the timeline stops early",
		"## web-1: zero",
		"Zero remain, confirmed 413ms after the run's start.",
		// Each host's timeline sits under its host's heading, one level
		// down: on 2e67e63 both were "##".
		"## web-1: zero\n\nFile: ",
		"\n### freeze timeline, ",
		"\n#### Outcome\n",
		// A bar per host that reached zero, of its time to zero.
		"## Time to zero, by host\n\n```\nweb-1                    413ms " + strings.Repeat("#", chartWidth) + "\n```",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
	// The attention list comes before the hosts' steps.
	if strings.Index(out, "Hosts that need attention") > strings.Index(out, "## db-1: unfinished") {
		t.Error("the attention list comes after the hosts' steps")
	}
	var js bytes.Buffer
	if err := RenderFleet(&js, runs, "json"); err != nil {
		t.Fatal(err)
	}
	var s FleetSummary
	if err := json.Unmarshal(js.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	if s.Hosts != 4 || len(s.Runs) != 4 || s.Runs[3].Host != "web-2" || s.Runs[3].Survivors != 2 {
		t.Errorf("json: %s", js.String())
	}
	if err := RenderFleet(&js, runs, "text"); err == nil {
		t.Error("text accepted for a fleet")
	}
}

func TestLoadFleetKeepsUnreadableFilesAsRows(t *testing.T) {
	dir := fleetFixture(t)
	os.MkdirAll(filepath.Join(dir, "web-3"), 0o755)
	os.WriteFile(filepath.Join(dir, "web-3", "x.jsonl"), []byte("garbage\n"), 0o644)
	runs, err := LoadFleet([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range runs {
		if r.Host == "web-3" {
			found = r.Outcome == "unreadable" && strings.Contains(r.Attention, "cannot be read")
		}
	}
	if !found || len(runs) != 5 {
		t.Fatalf("the unreadable file is not a row that says so: %+v", runs)
	}
	if _, err := LoadFleet([]string{t.TempDir()}); err == nil || !strings.Contains(err.Error(), "no timeline") {
		t.Fatalf("an empty directory: %v", err)
	}
}

func TestHostSaysWhereARunRan(t *testing.T) {
	h := timeline.Host()
	name, _ := os.Hostname()
	if h.Host != name || h.Kernel == "" {
		t.Fatalf("Host() = %v", h)
	}
}

// A summary of a run's events in memory (what the guard logs and exports
// after each request) says what the same events say read back from
// their file: the gate's counts were recorded as uint64 and read as
// float64, so in memory they were always 0 (#24, finding 11).
func TestSummaryInMemoryMatchesTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "run.jsonl")
	rec, err := timeline.New(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec.RecordOf(timeline.StageMatch, timeline.StepMatch, "m", timeline.Matched{Matched: 300})
	rec.RecordOf(timeline.StageFreeze, timeline.StepGateDetached, "d", timeline.GateDetached{ForksStopped: 1234, ExecsStopped: 5, TargetExecs: 2})
	// An untyped writer of the same step is read the same way.
	rec.Record(timeline.StageFreeze, timeline.StepGateDetached, "d", timeline.F{"forks_stopped": uint64(99)})
	rec.Record(timeline.StageRecord, timeline.StepZero, "z", nil)
	rec.Close()
	mem := timeline.Summarize("", p, rec.Events())
	events, err := timeline.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	file := timeline.Summarize("", p, events)
	if mem.GateForks != 99 || mem.GateExecs != 0 || mem.Matched != 300 {
		t.Errorf("in memory: forks %d, execs %d, matched %d; want the last detach's 99, 0, and 300", mem.GateForks, mem.GateExecs, mem.Matched)
	}
	if mem.GateForks != file.GateForks || mem.GateExecs != file.GateExecs || mem.Matched != file.Matched {
		t.Errorf("in memory %+v, from the file %+v", mem, file)
	}
}

// One host directory that cannot be read is a row that needs attention,
// and the other hosts are still summed up (#24, finding 10: on b1884f8
// it aborted the whole fleet report). Root reads any directory, so as
// root the test runs itself again as nobody.
func TestLoadFleetKeepsAnUnreadableHostAsARow(t *testing.T) {
	if os.Geteuid() == 0 {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Skip("as root no directory is unreadable, and setpriv (util-linux) is missing to run this as nobody")
		}
		out, err := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", os.Args[0],
			"-test.run=^TestLoadFleetKeepsAnUnreadableHostAsARow$", "-test.count=1", "-test.v").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("as nobody: %v\n%s", err, out)
		}
		return
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "host-a")
	os.Mkdir(good, 0o755)
	os.WriteFile(filepath.Join(good, "run.jsonl"), []byte(`{"time":"2026-12-01T10:00:00Z","elapsed_ms":0,"stage":4,"step":"zero","msg":"zero"}`+"\n"), 0o644)
	bad := filepath.Join(dir, "host-b")
	os.Mkdir(bad, 0o755)
	os.Mkdir(filepath.Join(bad, "sub"), 0o755)
	os.Chmod(bad, 0)
	defer os.Chmod(bad, 0o755)
	runs, err := LoadFleet([]string{dir})
	if err != nil {
		t.Fatalf("one unreadable host aborted the report: %v", err)
	}
	var sawA, sawB bool
	for _, r := range runs {
		sawA = sawA || (r.Host == "host-a" && r.Outcome == "zero")
		sawB = sawB || (r.Host == "host-b" && r.Attention != "")
	}
	if !sawA || !sawB {
		t.Fatalf("runs %+v: want host-a's run and host-b as needing attention", runs)
	}
}

// A typed record decodes the same from memory and from its file, and an
// inode number past 2^53 survives both (a float64 rounds it).
func TestTypedRecordRoundTrips(t *testing.T) {
	p := filepath.Join(t.TempDir(), "run.jsonl")
	rec, err := timeline.New(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := timeline.Revoked{Path: "/tmp/x/tool", Dev: 2049, Ino: 1<<60 + 1, Mode: "0755", NewMode: "0644", UID: 1000, GID: 1000, CtimeNS: "1764590000123456789"}
	rec.RecordOf(timeline.StageFreeze, timeline.StepRevoke, "r", want)
	rec.Close()
	events, err := timeline.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for where, e := range map[string]timeline.Event{"memory": rec.Events()[0], "file": events[0]} {
		var got timeline.Revoked
		if err := e.Decode(&got); err != nil || got != want {
			t.Errorf("from %s: %+v (%v), want %+v", where, got, err, want)
		}
	}
}

// A drill's time to zero counts from the run's own start, not from the
// drill's set-up; "matched" is the most the run held (the fixed set), not
// the first scan's count. On 2e67e63 this drill read 900 ms and 300.
func TestSummaryOfADrill(t *testing.T) {
	events, err := timeline.Parse([]byte(`{"time":"2026-12-01T10:00:00Z","elapsed_ms":0,"step":"drill","msg":"drill: started a chain"}
{"time":"2026-12-01T10:00:00.8Z","elapsed_ms":800,"step":"start","msg":"freeze run started"}
{"time":"2026-12-01T10:00:00.81Z","elapsed_ms":810,"step":"match","stage":1,"msg":"m","matched":300}
{"time":"2026-12-01T10:00:00.82Z","elapsed_ms":820,"step":"freeze-round","stage":2,"msg":"f1","round":1,"matched":340}
{"time":"2026-12-01T10:00:00.83Z","elapsed_ms":830,"step":"fixed","stage":2,"msg":"fixed","set":343}
{"time":"2026-12-01T10:00:00.9Z","elapsed_ms":900,"step":"zero","stage":4,"msg":"zero remain"}
`))
	if err != nil {
		t.Fatal(err)
	}
	h := timeline.Summarize("h", "f", events)
	if h.ZeroMS != 100 || h.Matched != 343 {
		t.Errorf("time to zero %v ms, matched %d; want 100 and 343", h.ZeroMS, h.Matched)
	}
}
