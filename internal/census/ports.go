package census

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Port is a socket held open for listening (TCP) or bound (UDP).
type Port struct {
	Proto string `json:"proto"`
	Addr  string `json:"addr"`
	Port  int    `json:"port"`
	PID   int    `json:"pid,omitempty"`
	Exe   string `json:"exe,omitempty"`
	// Unread, for a socket whose owner was not found: the processes
	// whose descriptors could not be read (another user's, without root;
	// another user namespace's, even with root: PID 1 on this machine).
	Unread string `json:"owner_unread,omitempty"`
	inode  uint64
}

// ownerBudget bounds the search for socket owners: it reads every
// process's fd directory, which is the one read here that grows with the
// chain.
const ownerBudget = 2 * time.Second

// ports reads /proc/net/{tcp,tcp6,udp,udp6} and finds each socket's
// owner through /proc/PID/fd, within ownerBudget.
func ports(root string, procs map[int]snap) ([]Port, []string) {
	out := readNet(root + "/net")
	byInode := map[uint64]int{}
	for i, p := range out {
		byInode[p.inode] = i
	}
	var notes []string
	var hidden []int // processes whose descriptors could not be read
	end := time.Now().Add(ownerBudget)
	left := len(out)
	// Every process, not only those whose executable could be read: a
	// port of PID 1 went without an owner here, where PID 1's exe link
	// is refused even to root (it is in another user namespace's hands)
	// while its descriptors are not.
	all := make([]int, 0, len(procs))
	for pid := range procs {
		all = append(all, pid)
	}
	if ents, err := os.ReadDir(root); err == nil {
		for _, e := range ents {
			if pid, err := strconv.Atoi(e.Name()); err == nil {
				if _, ok := procs[pid]; !ok {
					all = append(all, pid)
				}
			}
		}
	}
	for _, pid := range all {
		if left == 0 {
			break
		}
		if time.Now().After(end) {
			notes = append(notes, fmt.Sprintf("socket owners: gave up after %v; %d sockets without an owner", ownerBudget, left))
			break
		}
		found, refused := ownSockets(root, pid, procs, out, byInode)
		left -= found
		if refused {
			hidden = append(hidden, pid)
		}
	}
	// Who may hold the others: the processes whose descriptors could not
	// be read.
	var names []string
	for i, pid := range hidden {
		if i == 5 {
			names = append(names, fmt.Sprintf("and %d more", len(hidden)-5))
			break
		}
		comm, _ := os.ReadFile(root + "/" + strconv.Itoa(pid) + "/comm")
		names = append(names, fmt.Sprintf("pid %d (%s)", pid, strings.TrimSpace(string(comm))))
	}
	for i := range out {
		if out[i].PID == 0 && len(names) > 0 {
			out[i].Unread = "held by none of the processes whose descriptors could be read; these could not be: " + strings.Join(names, ", ")
		}
	}
	return out, notes
}

// ownSockets gives pid's sockets among out their owner; refused when a
// descriptor of pid could not be read.
func ownSockets(root string, pid int, procs map[int]snap, out []Port, byInode map[uint64]int) (found int, refused bool) {
	dir := root + "/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, os.IsPermission(err)
	}
	for _, e := range ents {
		l, err := os.Readlink(dir + "/" + e.Name())
		if os.IsPermission(err) {
			refused = true
		}
		if err != nil || !strings.HasPrefix(l, "socket:[") {
			continue
		}
		ino, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]"), 10, 64)
		if err != nil {
			continue
		}
		if i, ok := byInode[ino]; ok && out[i].PID == 0 {
			out[i].PID, out[i].Exe = pid, exeOrComm(root, pid, procs)
			found++
		}
	}
	return found, refused
}

// exeOrComm names a socket's owner: its executable, else its name and
// why not more.
func exeOrComm(root string, pid int, procs map[int]snap) string {
	if s, ok := procs[pid]; ok {
		return s.exe
	}
	if l, err := os.Readlink(root + "/" + strconv.Itoa(pid) + "/exe"); err == nil {
		return l
	}
	comm, _ := os.ReadFile(root + "/" + strconv.Itoa(pid) + "/comm")
	return fmt.Sprintf("(%s; its executable cannot be read, even by root: another user namespace's process)", strings.TrimSpace(string(comm)))
}

// readNet reads the listening TCP and bound UDP sockets of the network
// namespace whose /proc/.../net directory is dir.
func readNet(dir string) []Port {
	var out []Port
	for _, f := range []struct {
		name, proto string
		listen      string // the state that counts: 0A is TCP LISTEN, 07 UDP unconnected
	}{{"tcp", "tcp", "0A"}, {"tcp6", "tcp6", "0A"}, {"udp", "udp", "07"}, {"udp6", "udp6", "07"}} {
		b, err := os.ReadFile(dir + "/" + f.name)
		if err != nil {
			continue
		}
		out = append(out, ParseNet(b, f.proto, f.listen)...)
	}
	return out
}

// Listening reads the listening and bound sockets of the network
// namespace that process pid is in (through /proc/PID/net, so a process
// in its own namespace is read in its own), keyed by socket inode. It is
// how freeze run says which ports a leftover still holds.
func Listening(pid int) map[uint64]Port {
	m := map[uint64]Port{}
	for _, p := range readNet("/proc/" + strconv.Itoa(pid) + "/net") {
		m[p.inode] = p
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/unix"); err == nil {
		for _, p := range ParseUnix(b) {
			m[p.inode] = p
		}
	}
	return m
}

// ParseUnix parses /proc/net/unix and keeps the listening sockets that
// have a path (a socat UNIX-LISTEN bridge, a test's server): "Num
// RefCount Protocol Flags Type St Inode Path", listening where Flags has
// __SO_ACCEPTCON (0x10000).
func ParseUnix(b []byte) []Port {
	var out []Port
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Scan() // header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		flags, err1 := strconv.ParseUint(f[3], 16, 32)
		ino, err2 := strconv.ParseUint(f[6], 10, 64)
		if err1 != nil || err2 != nil || flags&0x10000 == 0 {
			continue
		}
		out = append(out, Port{Proto: "unix", Addr: strings.Join(f[7:], " "), inode: ino})
	}
	return out
}

// String is the port as an operator types it: "tcp 127.0.0.1:8080",
// "unix /run/x.sock".
func (p Port) String() string {
	if p.Proto == "unix" {
		return "unix " + p.Addr
	}
	return p.Proto + " " + net.JoinHostPort(p.Addr, strconv.Itoa(p.Port))
}

// ParseNet parses a /proc/net/tcp-style table and keeps the sockets in
// state want (hex). Addresses are little-endian hex words.
func ParseNet(b []byte, proto, want string) []Port {
	var out []Port
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Scan() // header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != want {
			continue
		}
		host, port, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(port, 16, 16)
		if err != nil {
			continue
		}
		ip, err := hexIP(host)
		if err != nil {
			continue
		}
		ino, _ := strconv.ParseUint(f[9], 10, 64)
		out = append(out, Port{Proto: proto, Addr: ip.String(), Port: int(p), inode: ino})
	}
	return out
}

// hexIP decodes the kernel's address: 4-byte words in host (little-endian)
// order.
func hexIP(h string) (net.IP, error) {
	raw, err := hex.DecodeString(h)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return nil, fmt.Errorf("bad address %q", h)
	}
	ip := make(net.IP, len(raw))
	for i := 0; i < len(raw); i += 4 {
		ip[i], ip[i+1], ip[i+2], ip[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	return ip, nil
}
