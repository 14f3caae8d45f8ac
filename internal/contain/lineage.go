package contain

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A lineage records who started whom in a run, as it happens, through
// the kernel's process events connector (netlink, PROC_EVENT_FORK and
// PROC_EVENT_EXEC): a leftover re-parented to freeze has lost its
// parent by the time the command ends, and /proc no longer says who
// started it. Each process of the run is kept with its parent, its
// executable and argv as of its last exec, and its working directory
// (where 'go test' runs a package's test binary).
type lineage struct {
	mu      sync.Mutex
	fd      int
	wake    [2]int // a pipe: stop writes it to wake the reader
	stopped atomic.Bool
	procs   map[int]*ancestor
	done    chan struct{}
	at      int64 // the current event's timestamp (CLOCK_MONOTONIC ns)
	// early are the last comm and exec events of processes not (yet) in
	// procs: a child can exec (or rename itself), and its events come,
	// before its parent's fork event (the kernel sends that after it
	// wakes the child, which may run on another CPU first). The fork
	// replays the child's own: an exec dropped there left the child
	// named by its parent's argv.
	early     [earlyEvents]earlyEvent
	earlyNext int
	// queue holds the events read from the socket and not yet taken:
	// an exec's read of /proc is checked against the exec events that
	// came after it (laterExec). live says there is a socket to drain
	// (not a test's lineage).
	queue []queued
	buf   []byte
	live  bool
}

// maxQueued bounds the queue an exec's check may drain the socket into
// (the machine's events, 40-odd bytes each): past it, the check goes by
// what is queued, and the socket's own buffer holds the rest.
const maxQueued = 1 << 16

// queued is one event as read, its body copied.
type queued struct {
	what uint32
	at   int64
	body []byte
}

// earlyEvents is how many early events are kept: those of the whole
// machine's processes, so the last few hundred, a few milliseconds on
// a busy machine.
const earlyEvents = 256

// earlyWindow is how far an early event may precede the fork that
// replays it: a parent's delay between waking its child and the fork
// event, and never long enough for the pid to be reused.
const earlyWindow = 2 * time.Second

type earlyEvent struct {
	what uint32
	tgid int
	at   int64
	body [24]byte
	n    int
}

// ancestor is one process of the run as the lineage saw it.
type ancestor struct {
	PID    int
	Parent int
	Exe    string
	Args   []string
	Dir    string
	// Comm is the name its last exec gave it (PROC_EVENT_COMM, which
	// carries the name itself); Unread, that it was gone before freeze
	// could read what that exec ran: Exe, Args and Dir are then its
	// parent's, from its fork.
	Comm   string
	Unread bool
	// Again: Unread because, by the time freeze read it, the process
	// had exec'd again (the connector's exec event carries no argv, and
	// /proc then shows the later program): its name is the one this
	// exec gave it, its argv unknown.
	Again bool
	// Late is how long after its exec event (the kernel's timestamp)
	// freeze found an Unread process gone: a long one says the reader
	// lagged, a short one that the process was that short-lived.
	Late time.Duration
	// starter is the parent's entry at this process's fork: who started
	// it, with what it ran then.
	starter *ancestor
}

// The connector's constants (linux/connector.h, linux/cn_proc.h).
const (
	cnIdxProc          = 1
	cnValProc          = 1
	procCnMcastListen  = 1
	procEventFork      = 0x00000001
	procEventExec      = 0x00000002
	procEventComm      = 0x00000200
	cnMsgSize          = 20 // struct cn_msg without data
	procEventHeaderLen = 16 // what, cpu, timestamp_ns
)

// startLineage listens to the process events connector, rooted at root
// (the command's pid). It needs CAP_NET_ADMIN; where it cannot listen it
// returns nil, and leftovers are named without their ancestry.
func startLineage(root int) *lineage {
	l := listenLineage()
	if l == nil {
		return nil
	}
	l.procs[root], _ = describe(root, os.Getpid())
	go l.read()
	return l
}

// listenLineage opens and subscribes the connector's socket: a lineage
// that holds no process yet, and whose events nothing reads yet.
func listenLineage() *lineage {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_CONNECTOR)
	if err != nil {
		return nil
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: cnIdxProc, Pid: uint32(os.Getpid())}); err != nil {
		unix.Close(fd)
		return nil
	}
	// A large receive buffer: a fork bomb's events come faster than
	// anything reads them; a lost event loses one link, nothing else.
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	// stop wakes the reader through a pipe: closing a netlink socket
	// does not wake its reader (a run's end waited 93 s here for the
	// machine's next fork).
	var wake [2]int
	if err := unix.Pipe2(wake[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		unix.Close(fd)
		return nil
	}
	msg := make([]byte, unix.NLMSG_HDRLEN+cnMsgSize+4)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], unix.NLMSG_DONE)
	binary.NativeEndian.PutUint32(msg[12:], uint32(os.Getpid()))
	cn := msg[unix.NLMSG_HDRLEN:]
	binary.NativeEndian.PutUint32(cn[0:], cnIdxProc)
	binary.NativeEndian.PutUint32(cn[4:], cnValProc)
	binary.NativeEndian.PutUint16(cn[16:], 4)
	binary.NativeEndian.PutUint32(cn[cnMsgSize:], procCnMcastListen)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil
	}
	return &lineage{fd: fd, wake: wake, procs: map[int]*ancestor{}, done: make(chan struct{}), buf: make([]byte, 64<<10), live: true}
}

// read takes events until stop closes the socket.
func (l *lineage) read() {
	defer close(l.done)
	for {
		fds := []unix.PollFd{{Fd: int32(l.fd), Events: unix.POLLIN}, {Fd: int32(l.wake[0]), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return
		}
		if l.stopped.Load() || fds[1].Revents != 0 {
			return
		}
		if fds[0].Revents == 0 {
			continue
		}
		if !l.drain() {
			return
		}
		for len(l.queue) > 0 {
			e := l.queue[0]
			l.queue = l.queue[1:]
			l.at = e.at
			l.event(e.what, e.body)
		}
	}
}

// drain reads every event the socket holds now, without waiting, into
// the queue; false when the socket is closed or failed.
func (l *lineage) drain() bool {
	for {
		n, _, err := unix.Recvfrom(l.fd, l.buf, unix.MSG_DONTWAIT)
		switch {
		case err == unix.EINTR || err == unix.ENOBUFS:
			continue
		case err == unix.EAGAIN:
			return true
		case err != nil || n == 0:
			return false
		}
		msgs, err := syscall.ParseNetlinkMessage(l.buf[:n])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			if len(m.Data) < cnMsgSize+procEventHeaderLen {
				continue
			}
			ev := m.Data[cnMsgSize:]
			l.queue = append(l.queue, queued{
				what: binary.NativeEndian.Uint32(ev[0:]),
				at:   int64(binary.NativeEndian.Uint64(ev[8:])),
				body: append([]byte(nil), ev[procEventHeaderLen:]...),
			})
		}
	}
}

// queuedExec reports whether an exec event of tgid is among the events
// read and not yet taken: one that came after the exec being taken. The
// kernel's exec event carries the pid alone (no name: an exec sends no
// comm event, only a rename does), and is sent once the new program's
// argv is in place; so with a later exec queued, a read of /proc shows
// the later program (rehearsals 33, 38, 45 and 46: a starter that exec'd
// true at once after starting its helper was named by true's argv).
func (l *lineage) queuedExec(tgid int) bool {
	for _, e := range l.queue {
		if e.what == procEventExec && len(e.body) >= 8 && int(binary.NativeEndian.Uint32(e.body[4:])) == tgid {
			return true
		}
	}
	return false
}

// laterExec judges a read d of tgid's exec: false when it is this
// exec's. A later exec queued before the read makes it the later
// program's. One that came only during the read (drained from the
// socket after it) makes it ambiguous, unless /proc read again, now
// surely the later program, differs from it: then the first read was
// of this exec's program.
func (l *lineage) laterExec(tgid int, queuedBefore bool, d *ancestor) bool {
	if queuedBefore {
		return true
	}
	if !l.live || len(l.queue) >= maxQueued || !l.drain() || !l.queuedExec(tgid) {
		return false
	}
	// A read again that is itself mixed is not surely the later
	// program: ambiguous still.
	again, mixed := describe(tgid, d.Parent)
	return mixed || again.Exe == d.Exe && slices.Equal(again.Args, d.Args)
}

// event takes one process event: a fork copies the parent's entry to
// the child, an exec reads the process again, a comm names it.
func (l *lineage) event(what uint32, body []byte) {
	switch what {
	case procEventFork:
		if len(body) < 16 {
			return
		}
		ptgid := int(binary.NativeEndian.Uint32(body[4:]))
		ctgid := int(binary.NativeEndian.Uint32(body[12:]))
		cpid := int(binary.NativeEndian.Uint32(body[8:]))
		if cpid != ctgid || ptgid == ctgid {
			return // a thread, not a process
		}
		l.mu.Lock()
		var replay []earlyEvent
		if p, ok := l.procs[ptgid]; ok {
			// starter is the parent as it was at the fork: an entry is
			// never changed once made (an exec, a name or an unread
			// exec makes a new one), so a shell that starts a helper
			// and then execs rm still reads as the shell.
			l.procs[ctgid] = &ancestor{PID: ctgid, Parent: ptgid, Exe: p.Exe, Args: p.Args, Dir: p.Dir, starter: p}
			replay = l.takeEarly(ctgid)
		}
		l.mu.Unlock()
		at := l.at
		for _, e := range replay {
			l.at = e.at
			l.event(e.what, e.body[:e.n])
		}
		l.at = at
	case procEventExec:
		if len(body) < 8 {
			return
		}
		tgid := int(binary.NativeEndian.Uint32(body[4:]))
		l.mu.Lock()
		if p, ok := l.procs[tgid]; !ok {
			l.keepEarly(what, tgid, body)
		} else {
			// Read, then checked against the execs that came since
			// (laterExec). An exec whose event is not yet sent when the
			// check ends set its argv microseconds before: the window
			// left.
			before := l.queuedExec(tgid)
			d, mixed := describe(tgid, p.Parent)
			read := readOf(tgid, p.Comm, d)
			if mixed || l.laterExec(tgid, before, d) {
				read = execAgain
			}
			switch read {
			case execAgain:
				// The reader lagged behind two execs of one process (a
				// shell that starts a helper and execs another program
				// at once, on a loaded machine): what /proc shows is
				// the later program, which must not be taken for this
				// exec's (rehearsal 33: "started by ... true" for the
				// shell that exec'd true after starting its helper).
				c := *p
				c.Unread, c.Again = true, true
				d = &c
			case execGone:
				// Gone already, or going (a test binary that starts a
				// helper and exits within milliseconds, on a loaded
				// machine): its fork's copy stays, with the name its
				// exec gave it.
				c := *p
				c.Unread = true
				var now unix.Timespec
				if unix.ClockGettime(unix.CLOCK_MONOTONIC, &now) == nil && l.at > 0 {
					c.Late = time.Duration(now.Nano() - l.at)
				}
				d = &c
			}
			d.starter = p.starter
			l.procs[tgid] = d
		}
		l.mu.Unlock()
	case procEventComm:
		// Sent at a rename (prctl PR_SET_NAME, a write to
		// /proc/PID/comm), not at an exec (checked on 6.18: an exec
		// sends its exec event alone): the name travels in the event,
		// so it is kept even when the process is gone before it is
		// read.
		if len(body) < 24 {
			return
		}
		pid, tgid := int(binary.NativeEndian.Uint32(body[0:])), int(binary.NativeEndian.Uint32(body[4:]))
		if pid != tgid {
			return // a thread's name
		}
		l.mu.Lock()
		if p, ok := l.procs[tgid]; ok {
			c := *p
			c.Comm = strings.TrimRight(string(body[8:24]), "\x00")
			l.procs[tgid] = &c
		} else {
			l.keepEarly(what, tgid, body)
		}
		l.mu.Unlock()
	}
}

// keepEarly keeps an event of a process not in procs, in case a fork
// of the run's names it next. l.mu is held.
func (l *lineage) keepEarly(what uint32, tgid int, body []byte) {
	e := &l.early[l.earlyNext%earlyEvents]
	l.earlyNext++
	e.what, e.tgid, e.at = what, tgid, l.at
	e.n = copy(e.body[:], body)
}

// takeEarly takes the kept events of tgid, oldest first, that came
// within earlyWindow before the current event (its fork). l.mu is held.
func (l *lineage) takeEarly(tgid int) []earlyEvent {
	var out []earlyEvent
	for i := max(0, l.earlyNext-earlyEvents); i < l.earlyNext; i++ {
		e := &l.early[i%earlyEvents]
		if e.tgid == tgid && e.n > 0 && l.at-e.at < int64(earlyWindow) {
			out = append(out, *e)
			e.n = 0
		}
	}
	return out
}

// execRead is what a read of a process after its exec event was.
type execRead int

const (
	execTaken execRead = iota // the exec's: taken as read
	execAgain                 // a later exec's: the process exec'd again first
	execGone                  // nothing sure: it exited, or was exiting
)

// readOf judges what describe read (d) for an exec of a process whose
// last rename (a comm event: an exec sends none) named it named, "" if
// none:
//   - gone: no executable, or no argv (read after the process's memory
//     went: it was exiting), or an executable whose name is not the
//     exec's while the process's name can no longer be read to tell
//     why. In rehearsal 38 (6.1 under emulation) the reader lagged
//     behind a shell's exec of true, read true's executable, and found
//     its argv and name gone: taken as read, the shell's helper was
//     said to be started by true;
//   - again: /proc shows a process whose name is the basename of
//     another executable, as a later exec gives it, where a rename named
//     it otherwise. (A lagging read with no rename to check it by is
//     caught by the exec events queued after it: laterExec.)
//   - read, otherwise. A process that renamed itself (prctl) keeps its
//     executable's name nowhere: it is taken as read. The name is read
//     only when the executable's own name is not the exec's (a script,
//     a link, or a later exec): most execs cost no read more.
func readOf(pid int, named string, d *ancestor) execRead {
	if d.Exe == "" || len(d.Args) == 0 || len(d.Args) == 1 && d.Args[0] == "" {
		return execGone
	}
	if named == "" || commOf(d.Exe) == named {
		return execTaken
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return execGone
	}
	comm := strings.TrimSuffix(string(b), "\n")
	if comm != named && comm == commOf(d.Exe) {
		return execAgain
	}
	return execTaken
}

// commOf is the name an exec of path gives a process: its basename, cut
// to the kernel's 15 bytes (TASK_COMM_LEN less its NUL).
func commOf(path string) string {
	b := filepath.Base(strings.TrimSuffix(path, " (deleted)"))
	if len(b) > 15 {
		b = b[:15]
	}
	return b
}

// betweenReads, where a test sets it, runs between describe's read of
// a process's executable and its read of the argv.
var betweenReads func(pid int)

// describe reads what a process runs: its executable, argv and working
// directory. mixed says that the executable changed while it read: an
// exec came between the reads, so the argv may be the next program's
// while the executable is this one's (rehearsal 72, the 6.12 boot
// under emulation: a shell that started a helper and exec'd true was
// read as "true marker-arg", marked deleted as the shell's file was).
// Which program each read saw cannot be told: a mixed read is not
// taken for either.
func describe(pid, parent int) (a *ancestor, mixed bool) {
	a = &ancestor{PID: pid, Parent: parent}
	dir := "/proc/" + strconv.Itoa(pid)
	a.Exe, _ = os.Readlink(dir + "/exe")
	if betweenReads != nil {
		betweenReads(pid)
	}
	if b, err := os.ReadFile(dir + "/cmdline"); err == nil {
		a.Args = strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	}
	if exe, err := os.Readlink(dir + "/exe"); err == nil && exe != a.Exe {
		mixed = true
	}
	// The working directory only where it names something: a Go test
	// binary's package. Each read is paid at every exec of the run.
	if goTestRE().MatchString(a.Exe) || isMake(a.Exe) {
		a.Dir, _ = os.Readlink(dir + "/cwd")
	}
	return a, mixed
}

// stop ends the listening.
func (l *lineage) stop() {
	if l == nil {
		return
	}
	l.stopped.Store(true)
	unix.Write(l.wake[1], []byte{0})
	<-l.done
	unix.Close(l.fd)
	unix.Close(l.wake[0])
	unix.Close(l.wake[1])
}

// chain is pid's ancestry within the run, from its parent up to the
// command: who started it.
func (l *lineage) chain(pid int) []ancestor {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []ancestor
	seen := map[int]bool{pid: true}
	for cur := l.procs[pid]; cur != nil && !seen[cur.Parent]; {
		seen[cur.Parent] = true
		up := cur.starter // as it was at the fork
		if up == nil {
			up = l.procs[cur.Parent]
		}
		if up == nil {
			break
		}
		out = append(out, *up)
		cur = up
	}
	return out
}

// goTestRE is a test binary 'go test' built: /tmp/go-build.../bNNN/NAME.test.
var goTestRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`/go-build[0-9]+/b[0-9]+/[^/]+\.test$`) })

// startedBy names who started a leftover, in a phrase: the nearest Go
// test binary's package (go test runs it in the package's directory), or
// the ancestors' argv.
func startedBy(chain []ancestor) string {
	for _, a := range chain {
		if goTestRE().MatchString(a.Exe) {
			what := "the Go test binary " + filepath.Base(a.Exe) + " of package " + a.Dir
			for _, arg := range a.Args {
				if strings.HasPrefix(arg, "-test.run=") {
					what += " (" + arg + ")"
				}
			}
			return what
		}
	}
	var parts []string
	for i, a := range chain {
		if i == 3 {
			parts = append(parts, "...")
			break
		}
		what := argvLine(a.Args, a.Exe)
		if gone(a.Exe) && !strings.HasSuffix(what, " (deleted)") {
			what += " (deleted)"
		}
		if i+1 < len(chain) && isMake(chain[i+1].Exe) {
			if t := makeTarget(chain[i+1], a.Args); t != "" {
				what += " (" + t + ")"
			}
		}
		if a.Unread {
			// What it exec'd is known by name only: the argv is its
			// parent's, from the fork.
			name := a.Comm
			if name == "" {
				name = "a program"
			}
			late := ""
			if a.Late > 0 {
				late = ", " + a.Late.Round(time.Millisecond).String() + " after its exec"
			}
			why := "exited before freeze could read it" + late
			if a.Again {
				why = "it exec'd again before freeze could read its argv"
			}
			what = name + " (" + why + "; forked from: " + what + ")"
		}
		parts = append(parts, "pid "+strconv.Itoa(a.PID)+" "+what)
	}
	return strings.Join(parts, " <- ")
}

// gone reports whether the file a process ran is gone now (removed, or
// replaced, as the kernel marks it: "PATH (deleted)"): its argv names a
// path that no longer holds what ran.
func gone(exe string) bool {
	if exe == "" {
		return false
	}
	if strings.HasSuffix(exe, " (deleted)") {
		return true // marked by the kernel when freeze read it
	}
	_, err := os.Stat(exe)
	return errors.Is(err, fs.ErrNotExist)
}

// isMake reports whether exe is GNU make (make, gmake).
func isMake(exe string) bool {
	b := filepath.Base(exe)
	return b == "make" || b == "gmake"
}

// makeTarget names the target whose recipe line a shell that make
// started runs (sh -c LINE): "the recipe of target d, Makefile:4". It is
// found only where the line is written as is in the makefile (no
// variables): the makefile is read from make's directory, as make read
// it (-C, -f, else GNUmakefile, makefile, Makefile); "" otherwise.
func makeTarget(mk ancestor, sh []string) string {
	if len(sh) != 3 || sh[1] != "-c" || mk.Dir == "" {
		return ""
	}
	dir, files := mk.Dir, []string{"GNUmakefile", "makefile", "Makefile"}
	var named []string
	for i := 1; i < len(mk.Args); i++ {
		a := mk.Args[i]
		switch {
		case (a == "-C" || a == "--directory") && i+1 < len(mk.Args):
			i++
			dir = filepath.Join(dir, mk.Args[i])
		case strings.HasPrefix(a, "--directory="):
			dir = filepath.Join(dir, strings.TrimPrefix(a, "--directory="))
		case (a == "-f" || a == "--file" || a == "--makefile") && i+1 < len(mk.Args):
			i++
			named = append(named, mk.Args[i])
		}
	}
	if len(named) > 0 {
		files = named
	}
	for _, f := range files {
		path := f
		if !filepath.IsAbs(path) {
			path = filepath.Join(dir, f)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		target := ""
		for n, line := range strings.Split(string(b[:min(len(b), 1<<20)]), "\n") {
			if strings.HasPrefix(line, "\t") {
				if strings.TrimLeft(line[1:], "@-+ \t") == sh[2] && target != "" {
					return fmt.Sprintf("the recipe of target %s, %s:%d", target, filepath.Base(path), n+1)
				}
				continue
			}
			if t, _, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") && !strings.Contains(line, "=") {
				if fs := strings.Fields(t); len(fs) > 0 {
					target = strings.Join(fs, " ")
				}
			}
		}
		return "" // make reads the first that exists
	}
	return ""
}

// argvLine is argv as ps -f shows it, bounded.
func argvLine(args []string, exe string) string {
	if len(args) == 0 || args[0] == "" {
		return exe
	}
	s := strings.Join(args, " ")
	if len(s) > 400 {
		s = s[:399] + "…"
	}
	return s
}

// goImportPath is the import path of the Go package in dir (the
// directory go test runs a test binary in), from the nearest go.mod
// above it; "" if there is none. The go.mod is the test's owner's: what
// it names is only ever a label, shown escaped.
func goImportPath(dir string) string {
	if !filepath.IsAbs(dir) {
		return ""
	}
	for d, i := filepath.Clean(dir), 0; i < 32; d, i = filepath.Dir(d), i+1 {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil {
			for _, line := range strings.Split(string(b[:min(len(b), 1<<16)]), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
					mod := strings.Trim(f[1], `"`)
					rel, err := filepath.Rel(d, dir)
					if err != nil || rel == "." {
						return mod
					}
					return mod + "/" + filepath.ToSlash(rel)
				}
			}
			return ""
		}
		if d == "/" {
			break
		}
	}
	return ""
}

// oneGoTest is the test a test binary's -test.run names, when it names
// one: "TestX" or "^TestX$"; "" otherwise.
func oneGoTest(args []string) string {
	for _, arg := range args {
		v, ok := strings.CutPrefix(arg, "-test.run=")
		if !ok {
			continue
		}
		v = strings.TrimSuffix(strings.TrimPrefix(v, "^"), "$")
		if goTestName().MatchString(v) {
			return v
		}
	}
	return ""
}

var goTestName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^Test[A-Za-z0-9_]*$`) })
