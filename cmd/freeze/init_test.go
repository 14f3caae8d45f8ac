package main

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"freeze/internal/containtest"
)

// Every subcommand pays every package's init, an incident's freeze
// included (#51): freeze's own packages do no work there (no regexp
// compiled, no table built, no probe), only what costs nothing. Read from
// the real binary's GODEBUG=inittrace, whose byte counts do not depend on
// the machine's load.
func TestFreezesPackagesDoNoWorkAtInit(t *testing.T) {
	bin := containtest.GoBinary(t, ".", "freeze", "")
	cmd := exec.Command(bin, "--version")
	cmd.Env = append(cmd.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("freeze --version: %v\n%s", err, out)
	}
	// init freeze/internal/say @1.2 ms, 0.011 ms clock, 144 bytes, 4 allocs
	line := regexp.MustCompile(`(?m)^init (\S+) @.*, ([0-9]+) bytes, ([0-9]+) allocs$`)
	inits := line.FindAllStringSubmatch(string(out), -1)
	if len(inits) == 0 {
		t.Fatalf("no inittrace lines from freeze --version:\n%s", out)
	}
	var own []string
	for _, m := range inits {
		pkg := m[1]
		if pkg != "main" && !strings.HasPrefix(pkg, "freeze/") {
			continue
		}
		own = append(own, pkg)
		// 2 KiB: a few errors.New and small tables; one compiled regexp
		// is 5-16 KiB.
		if bytes, _ := strconv.Atoi(m[2]); bytes > 2048 {
			t.Errorf("package %s allocates %s bytes in %s allocations at init, where every subcommand pays it: compile or build it on first use (sync.OnceValue)", pkg, m[2], m[3])
		}
	}
	if len(own) == 0 {
		t.Fatalf("inittrace names none of freeze's packages (main at least has an init):\n%s", out)
	}
	t.Logf("freeze's packages with an init: %s", strings.Join(own, ", "))
}
