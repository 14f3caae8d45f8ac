package guard

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A run directory others could write before the guard started is
// refused, not chmodded: the links planted in it while it was open
// would take the guard's writes (the third audit's S2: the ack's
// temporary file truncated a root 0600 file, and guard.log was appended
// to another). The victims stay as they were.
func TestArmRefusesARunDirectoryOthersCouldWrite(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "run")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	victims := map[string]string{}
	for _, name := range []string{LogName, AckName + ".new", AckName, lockName, stateName, HeartbeatName + ".tmp"} {
		v := filepath.Join(base, "victim-"+name)
		if err := os.WriteFile(v, []byte("secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(v, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		victims[name] = v
	}
	g, err := Arm(Config{RunDir: dir, Say: func(string) {}})
	if err == nil {
		g.Close()
		t.Fatal("a run directory of mode 0777 was armed")
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "remove it") {
		t.Errorf("the refusal does not name the directory and what to do: %v", err)
	}
	for name, v := range victims {
		b, rerr := os.ReadFile(v)
		st, _ := os.Stat(v)
		if rerr != nil || string(b) != "secret\n" || st.Mode().Perm() != 0o600 {
			t.Errorf("the file %s's link pointed to changed: %q, %v, %v", name, b, st.Mode(), rerr)
		}
	}
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o777 {
		t.Errorf("the refused directory was changed to %v", st.Mode().Perm())
	}
}

// A run directory of the guard's own that others could only read is
// made 0700 and armed.
func TestArmTightensARunDirectoryOthersCouldOnlyRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	g, err := Arm(Config{RunDir: dir, Say: func(string) {}})
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if st, _ := os.Stat(dir); st.Mode().Perm() != 0o700 {
		t.Errorf("the run directory is %v, want 0700", st.Mode().Perm())
	}
}
