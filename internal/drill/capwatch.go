package drill

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CapSample is what the cap saw while the stop order ran: the cap
// group's pids.max, the highest pids.current sampled, and the chain's
// total, its processes at the start and every one it made during the
// run (each pid seen in the cap's group or a group below it). A freeze
// that moves the chain out of its cap frees slots the chain refills: the
// total then runs far past the cap (1,157 under a cap of 300, Debian's
// 7.2 in the matrix, before cgroup2 froze in place).
type CapSample struct {
	Max   int `json:"max"`
	Peak  int `json:"peak"`
	Total int `json:"total"`
}

// String is the line the kernel matrix reads.
func (s CapSample) String() string {
	return fmt.Sprintf("cap: pids.max %d, peak %d, chain total %d", s.Max, s.Peak, s.Total)
}

// capEvery is how often the watch samples: 10 ms, as the matrix's cap
// line asks (a refill of one slot takes a fork, milliseconds).
const capEvery = 10 * time.Millisecond

// WatchCap samples dir's pids.current and the pids in dir and every group
// below it every capEvery until the returned stop is called, which gives
// the sample (the drill's cap line; the live tests' too).
func WatchCap(dir string) (stop func() CapSample) {
	var s CapSample
	s.Max, _ = readInt(filepath.Join(dir, "pids.max"))
	seen := map[string]bool{}
	look := func() {
		if n, err := readInt(filepath.Join(dir, "pids.current")); err == nil && n > s.Peak {
			s.Peak = n
		}
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				seen[f] = true
			}
			return nil
		})
	}
	look()
	done, over := make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		defer close(over)
		t := time.NewTicker(capEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				look()
				return
			case <-t.C:
				look()
			}
		}
	}()
	return func() CapSample {
		once.Do(func() { close(done) })
		<-over
		s.Total = len(seen)
		return s
	}
}

func readInt(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
