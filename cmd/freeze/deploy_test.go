package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The guard's systemd unit passes systemd's own check, runs the real
// binary's guard command, and keeps the settings that make it a guard
// (the list): a misspelt directive or a wrong ExecStart fails.
func TestSystemdUnitVerifies(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not found (apt-get install systemd): .ci/run installs it")
	}
	b, err := os.ReadFile("../../deploy/systemd/freeze-guard.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{
		"ExecStart=/usr/local/bin/freeze guard --run-dir /run/freeze",
		"Restart=always", "CPUSchedulingPolicy=rr", "OOMScoreAdjust=-1000",
		"TasksMax=", "MemoryMin=", "CAP_BPF", "RuntimeDirectoryMode=0700",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("the unit lacks %q", want)
		}
	}
	// systemd-analyze checks that ExecStart's program exists: point it at
	// a real build, and check that build takes the unit's arguments.
	bin := buildFreeze(t)
	if out, err := exec.Command(bin, "guard", "--run-dir", "/run/freeze", "--help").CombinedOutput(); err != nil {
		t.Fatalf("the unit's command line is not one freeze takes: %v\n%s", err, out)
	}
	path := filepath.Join(t.TempDir(), "freeze-guard.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(unit, "/usr/local/bin/freeze", bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("systemd-analyze", "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}
