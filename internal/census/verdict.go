// Package census finds what is holding a machine: the load against the
// cores, the pid space, memory, the executables with the most processes
// over a short sample, the suspects among them with the reasons a person
// would give, and the ports held open. It is read-only.
//
// It must stay cheap while a chain is growing: for every process it reads
// the exe link and /proc/PID/stat and nothing else; command lines are read
// for the top rows only, and socket owners within a time budget.
package census

import (
	"freeze/internal/container"

	"fmt"
	"strings"
)

// Verdict words the load against the core count. The thresholds are on the
// ratio, never the raw load: a load of 8 is idle for 64 cores and a fire
// for 2.
func Verdict(load1 float64, cores int) (word, advice string) {
	if cores < 1 {
		cores = 1
	}
	r := load1 / float64(cores)
	switch {
	case r < 0.7:
		return "ok", "the CPU is not what is failing"
	case r < 1.5:
		return "busy", "work queues for the CPU; slow, not yet failing"
	case r < 4:
		return "overloaded", "expect timeouts and flaky tests; look for what holds the machine"
	default:
		return "OVERLOADED", "almost everything will fail or hang; find the chain below before debugging anything"
	}
}

// VerdictLine is the census's first line. running is how many tasks are
// runnable now (/proc/stat's procs_running, the census itself left out),
// -1 if unknown. The load average follows a minute behind: after the
// chain is gone it still says overloaded, so the verdict goes by what is
// runnable now, and says when the average lags.
func VerdictLine(load1, load5, load15 float64, cores, running int) string {
	word, advice := Verdict(load1, cores)
	if running < 0 {
		return fmt.Sprintf("load %.2f %.2f %.2f / %d cores -- %s -- %s", load1, load5, load15, cores, word, advice)
	}
	now, nowAdvice := Verdict(float64(running), cores)
	if (word == "overloaded" || word == "OVERLOADED") && (now == "ok" || now == "busy") {
		now, nowAdvice = "recovering", fmt.Sprintf("the 1-minute load average lags behind: only %d runnable now; if a chain was stopped, it is over", running)
	}
	return fmt.Sprintf("load %.2f %.2f %.2f / %d cores, %d runnable now -- %s -- %s", load1, load5, load15, cores, running, now, nowAdvice)
}

// procsRunning is /proc/stat's procs_running less the reader itself, or
// -1.
func procsRunning(statFile []byte) int {
	for _, l := range strings.Split(string(statFile), "\n") {
		var n int
		if _, err := fmt.Sscanf(l, "procs_running %d", &n); err == nil {
			return max(0, n-1)
		}
	}
	return -1
}

// Row is one executable's processes over the sample.
type Row struct {
	Exe        string  `json:"exe"`
	Count      int     `json:"count"`
	Orphaned   int     `json:"orphaned"`
	CPUPercent float64 `json:"cpu_percent"`
	Appeared   int     `json:"appeared"`
	Vanished   int     `json:"vanished"`
	OldestAgeS float64 `json:"oldest_age_s"`
	Groups     int     `json:"process_groups"`
	Sessions   int     `json:"sessions"`
	Suspect    bool    `json:"suspect"`
	Reasons    string  `json:"reasons,omitempty"`
	Command    string  `json:"command,omitempty"` // the freeze command, for a suspect whose path is its file
	// InTightest: some of its processes are in the tightest pids group,
	// which is at or near its cap.
	InTightest bool `json:"in_tightest_pids_cgroup,omitempty"`
	// Owners are the users whose processes these are, most first
	// ("1000 x340, 0 x2"): whose chain it is, and whether freeze, run by
	// that user, could see all of it.
	Owners string `json:"owners,omitempty"`
	Dev    uint64 `json:"dev,omitempty"` // the executable's identity, as stat(2) of /proc/PID/exe gives it
	Ino    uint64 `json:"ino,omitempty"`
	// Where its processes run: the host (all empty), or a container
	// (its runtime and full id) and the pod that holds it. Rows of one
	// path text in two places are two rows.
	Runtime   string `json:"runtime,omitempty"`
	Container string `json:"container,omitempty"`
	Pod       string `json:"pod,omitempty"`
}

// Place is where the row's processes run.
func (r Row) Place() container.Place {
	return container.Place{Runtime: r.Runtime, ID: r.Container, Pod: r.Pod}
}

// Thresholds of Suspect; named so the table test and the help agree.
const (
	manyCopies     = 200  // this many copies is a suspect by itself
	someCopies     = 20   // with one more sign (orphans, growth, churn, CPU)
	longRunHours   = 2.0  // a test-like executable running this long
	orphanShare    = 0.5  // half or more orphaned
	hotCPUPercent  = 50.0 // busy as a whole
	churnPerSecond = 10.0 // processes appearing and vanishing a second
	minTestCopies  = 2
	secondsPerHour = 3600
)

// Suspect decides whether a row looks like a runaway, and says why the
// way a person would. sample is the sample's length in seconds; testLike
// is whether the executable runs from a temporary or cache directory
// (where test binaries live). A long-running daemon with few copies is
// not a suspect for being orphaned: daemons are orphans by design.
func Suspect(r Row, sample float64, testLike bool) (bool, string) {
	if sample <= 0 {
		sample = 1
	}
	churn := float64(r.Appeared+r.Vanished) / sample
	signs := 0
	reasons := fmt.Sprintf("%d copies", r.Count)
	if r.Orphaned > 0 && float64(r.Orphaned) >= orphanShare*float64(r.Count) && r.Count >= someCopies {
		signs++
		reasons += fmt.Sprintf(", %d orphaned", r.Orphaned)
	}
	if r.Appeared > r.Vanished && r.Count >= someCopies {
		signs++
		reasons += fmt.Sprintf(", +%d in %.0f s", r.Appeared-r.Vanished, sample)
	} else if churn >= churnPerSecond {
		signs++
		reasons += fmt.Sprintf(", churning (%d started, %d ended in %.0f s)", r.Appeared, r.Vanished, sample)
	}
	if r.CPUPercent >= hotCPUPercent && r.Count >= someCopies {
		signs++
		reasons += fmt.Sprintf(", %.0f%% CPU", r.CPUPercent)
	}
	if testLike && r.OldestAgeS >= longRunHours*secondsPerHour && r.Count >= minTestCopies {
		signs++
		reasons += fmt.Sprintf(", a test-cache program running for %.1f h", r.OldestAgeS/secondsPerHour)
	}
	if r.Count >= manyCopies || (r.Count >= someCopies && signs > 0) || (testLike && signs > 0 && r.Count >= minTestCopies) {
		return true, reasons
	}
	return false, ""
}
