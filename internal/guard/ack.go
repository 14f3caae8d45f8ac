package guard

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"freeze/internal/safedir"
)

// acker writes the FIFO's answer file (AckName) beside the requests, not
// in their way: a request's "received" and "running" are written by a
// goroutine of their own while the run starts, and its "done" before the
// guard logs the request, so a reader who saw the log line finds it. A
// line is never written over a newer one, so a reader may find
// "running" without having seen "received". Under a churning chain the
// two answers before a run cost it 165 ms of its start in one request
// (their fsyncs, 68 and 97 ms, perf trace), where the run needs neither.
type acker struct {
	path  string
	write func(path string, b []byte) error // safedir.WriteStatus; a test's own
	seq   atomic.Uint64                     // the newest line's number
	mu    sync.Mutex                        // held while the file is written
	wrote uint64                            // the number of the line in the file (mu)
	wg    sync.WaitGroup                    // lines being written
}

func newAcker(runDir string) *acker {
	return &acker{path: filepath.Join(runDir, AckName), write: func(p string, b []byte) error {
		return safedir.WriteStatus(p, b, 0o600)
	}}
}

func ackLine(state, line string) []byte {
	return []byte(fmt.Sprintf("%d %s %s\n", time.Now().Unix(), state, strings.ReplaceAll(line, "\n", " ")))
}

// post has the line written, without waiting for it.
func (a *acker) post(state, line string) {
	b, n := ackLine(state, line), a.seq.Add(1)
	a.wg.Add(1)
	go func() { defer a.wg.Done(); a.put(n, b) }()
}

// now writes the line, and returns once it is in the file (or a newer
// one is).
func (a *acker) now(state, line string) {
	a.put(a.seq.Add(1), ackLine(state, line))
}

func (a *acker) put(n uint64, b []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n <= a.wrote {
		return // a newer line is there already
	}
	a.write(a.path, b)
	a.wrote = n
}

// wait returns once every posted line is written.
func (a *acker) wait() { a.wg.Wait() }
