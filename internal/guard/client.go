package guard

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
