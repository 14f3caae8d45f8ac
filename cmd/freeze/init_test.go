package main

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Every subcommand pays every package's init, an incident's freeze
// included (#51): freeze's own packages do no work there (no regexp
// compiled, no table built, no probe), only what costs nothing. Read from
// GODEBUG=inittrace, whose byte counts do not depend on the machine's
// load, of this test binary, which links every package of freeze's that
// the command links (and test helpers, left out), run to do nothing else.
// (It built the command first: 100 s of the suite under load.)
func TestFreezesPackagesDoNoWorkAtInit(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.count=1")
	cmd.Env = append(cmd.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s -test.run=^$: %v\n%s", os.Args[0], err, out)
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
		if !strings.HasPrefix(pkg, "freeze/") || testHelper(pkg) {
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
		t.Fatalf("inittrace names none of freeze's packages (cmd/freeze at least has an init):\n%s", out)
	}
	t.Logf("freeze's packages with an init: %s", strings.Join(own, ", "))
}

// testHelper reports a package of freeze's that only tests link.
func testHelper(pkg string) bool {
	for _, h := range []string{"containtest", "testenv", "proctest", "runtest", "vmtest"} {
		if strings.HasSuffix(pkg, "/"+h) {
			return true
		}
	}
	return false
}
