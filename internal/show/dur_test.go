package show

import (
	"math"
	"testing"
	"time"
)

func TestDurSaysOneUnitStyle(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{300 * time.Microsecond, "300µs"},
		{510*time.Microsecond + 400, "510µs"},
		{4*time.Millisecond + 251*time.Microsecond, "4.25ms"},
		{44*time.Millisecond + 881*time.Microsecond, "44.9ms"},
		{1196*time.Millisecond + 600*time.Microsecond, "1.2s"},
		{1174 * time.Millisecond, "1.17s"},
		{12345 * time.Millisecond, "12.3s"},
		{125*time.Second + 400*time.Millisecond, "2m5s"},
		{-2 * time.Millisecond, "-2ms"},
		{0, "0s"},
		{math.MinInt64, time.Duration(math.MinInt64).String()}, // found by FuzzParse: -d overflowed into endless recursion
	} {
		if got := Dur(c.d); got != c.want {
			t.Errorf("Dur(%v) = %q, want %q", c.d, got, c.want)
		}
	}
	if got := DurMS(54.58); got != "54.6ms" {
		t.Errorf("DurMS(54.58) = %q, want 54.6ms", got)
	}
}
