package bench

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"freeze/internal/testenv"
)

var startupCost = flag.Bool("startup", false, "measure what freeze's start-up and freeze run cost against /bin/true and static programs (#51; about a minute)")

// What a start costs (#51): freeze --version and freeze run -- /bin/true
// against /bin/true, a trivial static C program, a static Go
// hello-world and two hello-worlds that link freeze's libraries (all of
// them, and all but the metrics stack), all in one run, interleaved round by round (each round in its
// own order), so that a busy or slow host moves them together and only
// the differences and ratios are read. freeze run is measured as it starts the command now
// (itself) and through its helper (FREEZE_RUN_START=helper), with the
// lineage on and off. Wall time and the CPU of the whole process tree
// (rusage), medians of 101 rounds.
func TestStartupCost(t *testing.T) {
	if !*startupCost {
		t.Skip("opt-in: -args -startup")
	}
	testenv.RequireLive(t, "freeze run's pids cgroups")
	bin := buildBench(t)
	hello := buildHello(t)
	libsAll, libsLean := buildLibStart(t, "all"), buildLibStart(t, "lean")
	type probe struct {
		name string
		argv []string
		env  []string
	}
	probes := []probe{
		{"/bin/true", []string{"/bin/true"}, nil},
		{"static C (trivial.c)", []string{trivialBin}, nil},
		{"static Go hello-world", []string{hello}, nil},
		{"Go hello-world linking freeze's libraries", []string{libsAll}, nil},
		{"the same less the metrics stack (client_golang, net/http)", []string{libsLean}, nil},
		{"freeze --version", []string{bin, "--version"}, nil},
		{"freeze --version (as packaged: stage, static)", []string{stageBin, "--version"}, nil},
		{"freeze run -- /bin/true", []string{bin, "run", "--", "/bin/true"}, nil},
		{"freeze run -- /bin/true, lineage off", []string{bin, "run", "--", "/bin/true"}, []string{"FREEZE_RUN_LINEAGE=off"}},
		{"freeze run -- /bin/true, through the helper", []string{bin, "run", "--", "/bin/true"}, []string{"FREEZE_RUN_START=helper"}},
	}
	const rounds = 101
	wall := make([][]time.Duration, len(probes))
	cpu := make([][]time.Duration, len(probes))
	order := rand.New(rand.NewPCG(51, 51))
	for r := 0; r < rounds; r++ {
		// Each round in an order of its own (seeded: the same every
		// run): in a fixed order, the freeze run that followed the
		// --version probes cost 7-8 ms more than the run after it,
		// whichever it was (the lineage on or off), so no probe may
		// keep one place.
		for _, i := range order.Perm(len(probes)) {
			p := probes[i]
			cmd := exec.Command(p.argv[0], p.argv[1:]...)
			cmd.Env = append(os.Environ(), p.env...)
			t0 := time.Now()
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", p.name, err, out)
			}
			wall[i] = append(wall[i], time.Since(t0))
			cpu[i] = append(cpu[i], cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
		}
	}
	var b strings.Builder
	b.WriteString("\n| what | wall | CPU | wall - /bin/true | wall / static Go |\n| --- | ---: | ---: | ---: | ---: |\n")
	base, goStatic := medianD(wall[0]), medianD(wall[2])
	for i, p := range probes {
		w, c := medianD(wall[i]), medianD(cpu[i])
		fmt.Fprintf(&b, "| %s | %s | %s | %+.1f ms | %.2fx |\n", p.name, msD(w), msD(c), float64(w-base)/1e6, float64(w)/float64(goStatic))
	}
	t.Logf("start-up, medians of %d interleaved rounds:%s", rounds, b.String())
}

func msD(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }

// buildLibStart builds testdata/libstart/NAME, a hello-world that links
// freeze's libraries (all) or all but the metrics stack (lean), as
// freeze is built (buildBench): what the libraries' package inits and
// size cost a start, apart from freeze's own code.
func buildLibStart(t *testing.T, name string) string {
	out := filepath.Join(t.TempDir(), "libstart-"+name)
	if b, err := exec.Command("go", "build", "-o", out, "./testdata/libstart/"+name).CombinedOutput(); err != nil {
		t.Fatalf("build testdata/libstart/%s: %v\n%s", name, err, b)
	}
	return out
}

// buildHello builds a static Go hello-world: what a Go binary's start
// costs with nothing linked beyond the runtime.
func buildHello(t *testing.T) string {
	dir := t.TempDir()
	src := "package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.WriteString(\"hello\\n\") }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "hello")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the Go hello-world: %v\n%s", err, b)
	}
	return out
}
