package guard

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"freeze/internal/safedir"
	"freeze/internal/stop"
	"freeze/internal/timeline"
)

// ErrNoGuard means no guard answers at the run directory: run locally.
var ErrNoGuard = errors.New("no guard is running")

// ErrLost means the connection ended before the guard gave an exit code.
var ErrLost = errors.New("the guard's answer ended before its exit code")

// Ask hands a request to the guard at runDir and prints its progress
// lines as they come; it returns the guard's exit code.
func Ask(runDir string, words []string, stdout, stderr io.Writer) (int, error) {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: filepath.Join(runDir, SocketName), Net: "unix"})
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return 0, ErrNoGuard
		}
		return 0, fmt.Errorf("%w (%v)", ErrNoGuard, err)
	}
	defer conn.Close()
	// A guard that refuses the peer answers before reading, and closes:
	// the write may then fail, but its answer is still there to read.
	sendErr := json.NewEncoder(conn).Encode(map[string][]string{"args": words})
	conn.CloseWrite()
	sc := bufio.NewScanner(conn)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "1 "):
			fmt.Fprintln(stdout, line[2:])
		case strings.HasPrefix(line, "2 "):
			fmt.Fprintln(stderr, line[2:])
		case strings.HasPrefix(line, "exit "):
			code, err := strconv.Atoi(line[5:])
			if err != nil {
				return 0, fmt.Errorf("%w: %q", ErrLost, line)
			}
			return code, nil
		}
	}
	if sendErr != nil {
		return 0, fmt.Errorf("send the request to the guard: %w", sendErr)
	}
	return 0, ErrLost
}

// AskFIFO writes a request into the guard's FIFO, as an operator's shell
// would with echo, and waits up to within for the guard to log its
// outcome. The words are quoted so that the guard splits them back as
// they are.
func AskFIFO(runDir string, words []string, within time.Duration) (stop.Report, error) {
	var q []string
	for _, w := range words {
		q = append(q, "'"+strings.ReplaceAll(w, "'", `'\''`)+"'")
	}
	logPath := filepath.Join(runDir, LogName)
	seen := countLines(logPath)
	f, err := safedir.OpenFIFO(filepath.Join(runDir, AskName), os.O_WRONLY)
	if err != nil {
		// ENXIO: a FIFO nobody reads, so no guard runs.
		return stop.Report{}, fmt.Errorf("%w (%v)", ErrNoGuard, err)
	}
	_, err = f.WriteString(strings.Join(q, " ") + "\n")
	f.Close()
	if err != nil {
		return stop.Report{}, err
	}
	end := time.Now().Add(within)
	for time.Now().Before(end) {
		b, _ := os.ReadFile(logPath)
		lines := strings.Split(string(b), "\n")
		for _, line := range lines[min(seen, len(lines)):] {
			var e RequestLine
			if json.Unmarshal([]byte(line), &e) != nil || e.Event != "request" || e.Source != "fifo" || !slices.Equal(e.Request, words) {
				continue
			}
			return stop.Report{Outcome: timeline.Step(e.Outcome), Timeline: e.Timeline}, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return stop.Report{}, fmt.Errorf("the guard logged no outcome of the request within %v: see %s", within, logPath)
}

func countLines(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "\n")
}
