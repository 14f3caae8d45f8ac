package proc

import "testing"

// FuzzParseStat: /proc/PID/stat carries comm, which any process sets to
// any 15 bytes (parentheses, spaces, newlines included). The parser must
// never panic, and a stat it accepts keeps the fields the scan uses.
//
//	go test ./internal/proc -run '^$' -fuzz FuzzParseStat -fuzztime 30s
func FuzzParseStat(f *testing.F) {
	for _, seed := range []string{
		"1234 (bash) S 1 1234 1234 34816 1234 4194304 1 0 0 0 0 0 0 0 20 0 1 0 5000 0 0\n",
		"1234 (a) b) (c) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20\n",
		"1234 (\n) Z 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1\n",
		"1234 () T",
		// Found by the fuzzer in CI: a negative pid was accepted.
		"-1()0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0",
		"(",
		")",
		"",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := ParseStat(b)
		if err == nil && st.PID < 1 {
			t.Fatalf("accepted %q with pid %d", b, st.PID)
		}
	})
}
