package show

import "time"

// Dur is a duration as freeze says it everywhere: in Go's notation,
// which is also what its flags take (500ms, 5s), to about three
// significant figures: 510µs, 4.25ms, 44.9ms, 196ms, 1.17s, 12.3s, 2m5s.
// A time under a millisecond stays in microseconds, never "0s".
func Dur(d time.Duration) string {
	if d < 0 {
		if -d < 0 { // the most negative duration has no positive twin
			return d.String()
		}
		return "-" + Dur(-d)
	}
	var unit time.Duration
	switch {
	case d < time.Microsecond:
		return d.String()
	case d < time.Millisecond:
		unit = time.Microsecond
	case d < 10*time.Millisecond:
		unit = 10 * time.Microsecond
	case d < 100*time.Millisecond:
		unit = 100 * time.Microsecond
	case d < time.Second:
		unit = time.Millisecond
	case d < 10*time.Second:
		unit = 10 * time.Millisecond
	case d < time.Minute:
		unit = 100 * time.Millisecond
	default:
		unit = time.Second
	}
	return d.Round(unit).String()
}

// DurMS is Dur of a count of milliseconds, as the records keep them.
func DurMS(ms float64) string { return Dur(time.Duration(ms * float64(time.Millisecond))) }
