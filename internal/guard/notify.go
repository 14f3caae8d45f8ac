package guard

import (
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Notifier speaks systemd's notification protocol (sd_notify(3)) without
// libsystemd: one datagram to $NOTIFY_SOCKET per state. Under a unit of
// Type=notify, READY=1 tells systemd the guard is armed (the gate
// loaded, the FIFO and the socket open), and WATCHDOG=1, every half of
// WatchdogSec, that the process still runs: a guard that hangs, or is
// stopped, is restarted.
type Notifier struct {
	conn  *net.UnixConn
	every time.Duration // 0: no watchdog asked for
}

// NewNotifier is the notifier systemd asked for, or nil outside such a
// unit (no NOTIFY_SOCKET).
func NewNotifier() *Notifier {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	if strings.HasPrefix(addr, "@") {
		addr = "\x00" + addr[1:] // the abstract namespace
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return nil
	}
	n := &Notifier{conn: conn}
	// WATCHDOG_PID, where set, names the process the watchdog is for.
	pid := os.Getenv("WATCHDOG_PID")
	if us, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64); err == nil && us > 0 && (pid == "" || pid == strconv.Itoa(os.Getpid())) {
		n.every = time.Duration(us) * time.Microsecond / 2
	}
	return n
}

// Send sends one state, such as "READY=1"; a nil notifier sends nothing.
func (n *Notifier) Send(state string) {
	if n != nil {
		n.conn.Write([]byte(state))
	}
}

// Watchdog pings until stop is closed, if systemd asked for it.
func (n *Notifier) Watchdog(stop <-chan struct{}) {
	if n == nil || n.every == 0 {
		return
	}
	every(n.every, stop, func() { n.Send("WATCHDOG=1") })
}

// every calls f every d until stop is closed: the guard's heartbeat, the
// watchdog and both automatic triggers' looks. A tick that comes with
// stop already closed calls nothing (select picks either at random).
func every(d time.Duration, stop <-chan struct{}, f func()) {
	loop(d, stop, nil, func(bool) { f() })
}

// loop is the guard's one ticker loop: it calls f(false) every d, and
// f(true) at once on each poke (nil: never), until stop is closed.
func loop(d time.Duration, stop, poke <-chan struct{}, f func(poked bool)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		poked := false
		select {
		case <-stop:
			return
		case <-t.C:
		case <-poke:
			poked = true
		}
		select {
		case <-stop:
			return
		default:
			f(poked)
		}
	}
}

// Close closes the notifier's socket.
func (n *Notifier) Close() {
	if n != nil {
		n.conn.Close()
	}
}
