package timeline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Sync returns once what was recorded is in the file (fsynced), before
// Close: a revocation's original mode is on disk before freeze chmods
// (#24, finding 8; before, the record came after the chmod and could
// still sit in the writer's buffer at a crash).
func TestSyncPutsTheRecordInTheFileNow(t *testing.T) {
	p := filepath.Join(t.TempDir(), "t.jsonl")
	rec, err := New(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	rec.Record(StageFreeze, StepRevokeIntent, "revoking exec on /tmp/x (mode 0755 -> 0644)", F{"path": "/tmp/x", "mode": "0755"})
	if err := rec.Sync(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || !strings.Contains(string(b), `"revoke-intent"`) {
		t.Fatalf("after Sync the file holds %q (%v)", b, err)
	}
	mem, _ := New("", nil)
	if err := mem.Sync(); err == nil {
		t.Error("Sync of a recorder with no file succeeded")
	}
}
