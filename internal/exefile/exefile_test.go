package exefile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCopyMakesANewExecutableAndNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	if err := os.WriteFile(src, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Copy(src, dst); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dst)
	if err != nil || st.Mode().Perm() != 0o755 || st.Size() != 10 {
		t.Fatalf("copy: %v, %v", st, err)
	}
	if err := Copy(src, dst); err == nil {
		t.Fatal("a second copy over an existing file succeeded")
	}
}
