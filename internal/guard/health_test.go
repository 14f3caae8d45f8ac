package guard

import "testing"

// A port alone binds loopback, not every address.
func TestHealthAddrDefaultsToLoopback(t *testing.T) {
	for in, want := range map[string]string{"9479": "127.0.0.1:9479", ":9479": "127.0.0.1:9479", "0.0.0.0:9479": "0.0.0.0:9479", "10.1.2.3:9479": "10.1.2.3:9479"} {
		if got := HealthAddr(in); got != want {
			t.Errorf("HealthAddr(%q) = %q, want %q", in, got, want)
		}
	}
}
