package guard

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// A request the guard cannot queue is refused with ExitBusy, not 0: a
// caller (the CLI, Ansible) must not count a hand-over that ran nothing
// as a contained chain (#24, finding 9).
func TestBusyRefusalIsNotSuccess(t *testing.T) {
	g := &Guard{c: Config{Say: func(string) {}}, queue: make(chan request, 1)}
	g.enqueue(request{source: "socket", words: []string{"--path", "/x"}}) // fills the queue
	a, b, err := socketPair(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	done := make(chan struct{})
	g.enqueue(request{source: "socket", words: []string{"--path", "/y"}, conn: a, done: done})
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the refused request was never answered")
	}
	a.CloseWrite()
	var last string
	sc := bufio.NewScanner(b)
	for sc.Scan() {
		last = sc.Text()
	}
	if want := "exit 5"; last != want {
		t.Fatalf("the peer read %q last, want %q", last, want)
	}
}

func socketPair(dir string) (*net.UnixConn, *net.UnixConn, error) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: dir + "/s", Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: dir + "/s", Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	s, err := l.AcceptUnix()
	return s, c, err
}
