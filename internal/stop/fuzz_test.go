package stop

import (
	"testing"

	"freeze/internal/timeline"
)

// FuzzRevocations: restore turns a timeline's records into mode changes,
// as root. Whatever the records say, reading them must not panic, and no
// revocation it returns may ask for setuid or setgid without Restore
// refusing it (Restore's own checks are the guard; see freeze's tests).
//
//	go test ./internal/stop -run '^$' -fuzz FuzzRevocations -fuzztime 30s
func FuzzRevocations(f *testing.F) {
	f.Add([]byte(`{"time":"2026-12-01T10:00:00Z","step":"revoked","msg":"x","path":"/tmp/x/tool","dev":1,"ino":2,"mode":493,"new_mode":420,"uid":0,"gid":0,"ctime":5}`))
	f.Add([]byte(`{"time":"2026-12-01T10:00:00Z","step":"revoked","msg":"x","path":"/tmp/x","mode":2559,"new_mode":511}` + "\n" + `{"time":"2026-12-01T10:00:00Z","step":"revoked","revocations":[{"path":1}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		events, _ := timeline.Parse(b)
		Revocations(events)
	})
}
