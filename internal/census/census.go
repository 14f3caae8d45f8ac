package census

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"freeze/internal/container"
	"freeze/internal/match"
	"freeze/internal/proc"
	"freeze/internal/show"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat times; 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// Report is one census.
type Report struct {
	Verdict string     `json:"verdict"`
	Load    [3]float64 `json:"load"`
	Cores   int        `json:"cores"`
	Running int        `json:"runnable_now"` // procs_running less the census, -1 unknown
	PidLine string     `json:"pid_space"`
	MemLine string     `json:"memory"`
	Sample  float64    `json:"sample_s"`
	Total   int        `json:"processes"`
	Rows    []Row      `json:"rows"`
	Ports   []Port     `json:"ports"`
	Command string     `json:"command,omitempty"` // for the top suspect
	Notes   []string   `json:"notes,omitempty"`

	// The pid space in numbers: tasks (threads count against pid_max),
	// pid_max, and the pids cgroup closest to its pids.max.
	Tasks    int         `json:"tasks"`
	PidMax   int         `json:"pid_max"`
	Tightest *PidsCgroup `json:"tightest_pids_cgroup,omitempty"`
}

type snap struct {
	exe   string
	id    rowKey // the executable's identity, with the link's text
	ppid  int
	pgrp  int
	sess  int
	cpu   uint64
	start uint64
}

// take reads the exe link and stat of every process.
func take(fs proc.FS) map[int]snap {
	out := map[int]snap{}
	pids, _ := fs.PIDs(nil)
	for _, pid := range pids {
		st, err := fs.ReadStat(pid)
		if err != nil || st.Kernel() || st.Zombie() {
			continue
		}
		exe, deleted, err := fs.ExePath(pid)
		if err != nil {
			continue // another user's process, unreadable without root
		}
		if deleted {
			exe += " (deleted)"
		}
		// The file itself, not only the link's text: in another mount
		// namespace a user's binary bind-mounted over /usr/bin/yes reads
		// as /usr/bin/yes, which is another file for root.
		f, err := fs.ExeFile(pid)
		if err != nil {
			// Gone between the two reads: a churning chain's process.
			// Kept, it made a second row of the same path with no
			// identity (dev 0, inode 0), which the chain's own row did
			// not count (a test's lookup by path found that one).
			continue
		}
		// And where it runs: one path text on the host and in a
		// container are two rows (#33).
		place, _ := container.Of(fs, pid)
		out[pid] = snap{exe, rowKey{exe, f.Dev, f.Ino, place}, st.PPID, st.PGRP, st.Session, st.UTime + st.STime, st.Start}
	}
	return out
}

// Here takes the census of this machine's own /proc (Take with
// proc.Default).
func Here(sample time.Duration, top int) (*Report, error) { return Take(proc.Default, sample, top) }

// Take samples the machine over sample and builds the report, keeping the
// top rows.
func Take(fs proc.FS, sample time.Duration, top int) (*Report, error) {
	r := &Report{Cores: runtime.NumCPU(), Sample: sample.Seconds()}
	pfs, err := procfs.NewFS(fs.Root)
	if err != nil {
		return nil, err
	}
	if la, err := pfs.LoadAvg(); err == nil {
		r.Load = [3]float64{la.Load1, la.Load5, la.Load15}
	}
	r.Running = -1
	if b, err := os.ReadFile(fs.Root + "/stat"); err == nil {
		r.Running = procsRunning(b)
	}
	r.Verdict = VerdictLine(r.Load[0], r.Load[1], r.Load[2], r.Cores, r.Running)

	a := take(fs)
	t0 := time.Now()
	time.Sleep(sample)
	b := take(fs)
	elapsed := time.Since(t0).Seconds()
	r.Total = len(b)
	r.PidLine = pidLine(fs, len(b))
	r.PidMax = readInt(fs.Root + "/sys/kernel/pid_max")
	r.Tasks = tasks(fs)
	r.Tightest = TightestPids(CgroupRoots())
	if mi, err := pfs.Meminfo(); err == nil && mi.MemTotal != nil && mi.MemAvailable != nil {
		r.MemLine = memLine(*mi.MemTotal, *mi.MemAvailable)
	}

	list := rowsOf(a, b, elapsed, uptimeTicks(fs))
	if len(list) > top {
		list = list[:top]
	}
	for i := range list {
		list[i].Owners = owners(fs, list[i], b)
		if list[i].Suspect {
			list[i].Command = command(fs, &list[i], b)
		}
	}
	tieToCap(r.Tightest, list, b)
	// The command printed last is the one an operator copies: the
	// suspect that sits in the group at its cap, if one does, before a
	// larger chain elsewhere (#52: census printed another user's chain's
	// command, while 400 copies in a container held their cap).
	for _, row := range list {
		if row.Suspect && row.InTightest && row.Command != "" {
			r.Command = row.Command
			break
		}
	}
	if r.Command == "" && len(list) > 0 && list[0].Suspect {
		r.Command = list[0].Command
	}
	r.Rows = list
	r.Ports, r.Notes = ports(fs.Root, b)
	return r, nil
}

// rowsOf sums two snapshots taken elapsed seconds apart into one row per
// executable (by identity), suspects first, then by count.
func rowsOf(a, b map[int]snap, elapsed float64, uptime uint64) []Row {
	rows := map[rowKey]*Row{}
	groups := map[rowKey]map[int]bool{}
	sessions := map[rowKey]map[int]bool{}
	get := func(k rowKey) *Row {
		if rows[k] == nil {
			rows[k] = &Row{Exe: k.exe, Dev: k.dev, Ino: k.ino, Runtime: k.place.Runtime, Container: k.place.ID, Pod: k.place.Pod}
			groups[k], sessions[k] = map[int]bool{}, map[int]bool{}
		}
		return rows[k]
	}
	for pid, s := range b {
		row := get(s.id)
		row.Count++
		if orphaned(pid, s, b) {
			row.Orphaned++
		}
		if old, ok := a[pid]; ok && old.start == s.start {
			row.CPUPercent += float64(s.cpu-old.cpu) / clockTicks / elapsed * 100
		} else {
			row.Appeared++
		}
		if age := float64(uptime-s.start) / clockTicks; age > row.OldestAgeS {
			row.OldestAgeS = age
		}
		groups[s.id][s.pgrp] = true
		sessions[s.id][s.sess] = true
	}
	for pid, s := range a {
		if now, ok := b[pid]; !ok || now.start != s.start {
			get(s.id).Vanished++
		}
	}
	var list []Row
	for k, row := range rows {
		row.Groups, row.Sessions = len(groups[k]), len(sessions[k])
		row.Suspect, row.Reasons = Suspect(*row, elapsed, testLike(k.exe))
		list = append(list, *row)
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Suspect != list[j].Suspect {
			return list[i].Suspect
		}
		if list[i].Count != list[j].Count {
			return list[i].Count > list[j].Count
		}
		return list[i].Exe < list[j].Exe
	})
	return list
}

// orphaned: re-parented to PID 1, or to a subreaper, which shows as a
// parent that runs another program while the process's group leader is
// gone (the leader that started the group has exited).
func orphaned(pid int, s snap, all map[int]snap) bool {
	if s.ppid == 1 {
		return true
	}
	parent, ok := all[s.ppid]
	if !ok || parent.exe == s.exe {
		return false
	}
	_, leader := all[s.pgrp]
	return s.pgrp != pid && !leader
}

// testLike: an executable in a temporary or cache directory, where test
// binaries and disposable tools live.
func testLike(exe string) bool {
	for _, p := range []string{"/tmp/", "/var/tmp/", "/.cache/", "/go-build"} {
		if strings.Contains(exe, p) {
			return true
		}
	}
	return false
}

// rowKey is what a census row counts: one executable file, as its
// processes' exe links read and as stat of them finds it.
type rowKey struct {
	exe      string
	dev, ino uint64
	place    container.Place
}

// command is the freeze command for a suspect, with --arg for an
// interpreter (its first argument, from one process's command line: read
// for this row only). Only where the path names, for freeze, the file
// the row's processes run: else the row says so instead, and no command
// that would stop another program's processes is printed (#24, finding
// 7).
func command(fs proc.FS, row *Row, procs map[int]snap) string {
	exe := row.Exe
	path := strings.TrimSuffix(exe, " (deleted)")
	key := rowKey{exe, row.Dev, row.Ino, row.Place()}
	scope := ""
	if place := row.Place(); !place.Host() {
		// In a container: the path is the container's, and names its
		// file only inside that container's root.
		var why string
		if scope, why = inContainer(fs, path, path != exe, key, procs); scope == "" {
			row.Reasons += "; " + why
			return ""
		}
	} else if path == exe { // a live file: its path must be that file
		if f, err := proc.StatFile(path); err != nil || f.Dev != row.Dev || f.Ino != row.Ino {
			row.Reasons += "; " + path + " is not the file these processes run (another mount namespace, or replaced): find it with ls -l /proc/PID/exe"
			return ""
		}
	} else if why := deletedAmbiguous(fs, path, row, procs); why != "" {
		// A deleted file in another mount namespace: a user who ran a
		// binary in a namespace of their own and deleted it had census
		// print the command for the host's file of that name (the second
		// audit), which matches the host's processes, root's among them.
		row.Reasons += "; " + why
		return ""
	}
	cmd := "freeze " + scope + "--path " + show.Shell(path)
	base := filepath.Base(path)
	if match.IsInterpreter(base) {
		script, share := script(fs, key, procs)
		if script == "" {
			row.Reasons += "; no one script runs in most of its processes: name the one to stop with --arg"
			return cmd + " --arg SCRIPT"
		}
		if share < 1 {
			row.Reasons += fmt.Sprintf("; %.0f%% of its processes run %s", 100*share, show.Shell(script))
		}
		return cmd + " --arg " + show.Shell(script)
	}
	return cmd
}

// inContainer returns the flags that name a container's row ("--container
// ID " or "--pod UID "), after checking, through one of the row's own
// processes, that path in that container's root is the very file the row
// runs; else "" and why not.
func inContainer(fs proc.FS, path string, deleted bool, key rowKey, procs map[int]snap) (string, string) {
	if deleted {
		return "", path + " was deleted inside " + key.place.String() + ": name it by a process, freeze --path /proc/PID/exe (ls -l /proc/PID/exe finds them)"
	}
	flag := "--container " + key.place.Short() + " "
	if key.place.ID == "" {
		flag = "--pod " + key.place.Pod + " "
	}
	for pid, s := range procs {
		if s.id != key {
			continue
		}
		t, err := match.Resolve(fs.Root + "/" + strconv.Itoa(pid) + "/root" + path)
		// The process was pinned while its root was opened; it must
		// still be in the row's container after (its pid reused by
		// another's process would have named another root).
		if pl, perr := container.Of(fs, pid); err == nil && perr == nil && pl == key.place && t.File.Dev == key.dev && t.File.Ino == key.ino {
			return flag, ""
		}
		break
	}
	return "", path + " inside " + key.place.String() + " is not the file these processes run (replaced, or another mount namespace within it): name it by a process, freeze --path /proc/PID/exe"
}

// deletedAmbiguous says why 'freeze --path PATH' would not contain the
// row of a deleted file at PATH, or "". freeze finds a deleted file by its
// processes' exe links, whose text is a path in their own mount
// namespace: where the row's processes run in another one and PATH names
// a file here, freeze would take this host's file of that name. (In the
// same namespace, a file rebuilt at PATH while the old one still runs is
// the README's incident, and 'freeze --path PATH' takes both: right.)
func deletedAmbiguous(fs proc.FS, path string, row *Row, procs map[int]snap) string {
	self, _ := os.Readlink(fs.Root + "/self/ns/mnt")
	for pid, s := range procs {
		if s.id.exe != row.Exe || s.id.dev != row.Dev || s.id.ino != row.Ino {
			continue
		}
		ns, err := os.Readlink(fs.Root + "/" + strconv.Itoa(pid) + "/ns/mnt")
		if err != nil || ns == self {
			return ""
		}
		if _, err := os.Lstat(path); err != nil {
			return ""
		}
		return "its processes run in another mount namespace (" + ns + "), where " + path + " was deleted; here that path names another file, which 'freeze --path' would take: no command is printed; find them with ls -l /proc/PID/exe"
	}
	return ""
}

// scriptsRead bounds the command lines a census reads for one row.
const scriptsRead = 200

// script is the first argument (not a flag) that most of an
// interpreter's processes share, and its share; "" when no argument is
// shared by more than half: an --arg taken from one process of a
// row that runs many scripts would stop one and leave the chain (#24).
func script(fs proc.FS, key rowKey, procs map[int]snap) (string, float64) {
	counts := map[string]int{}
	read := 0
	for pid, s := range procs {
		if s.id != key || read == scriptsRead {
			continue
		}
		b, err := os.ReadFile(fs.Root + "/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil {
			continue
		}
		read++
		for _, a := range bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})[1:] {
			if len(a) > 0 && a[0] != '-' {
				counts[string(a)]++
				break
			}
		}
	}
	best, n := "", 0
	for a, c := range counts {
		if c > n || c == n && a < best {
			best, n = a, c
		}
	}
	if read == 0 || 2*n <= read {
		return "", 0
	}
	return best, float64(n) / float64(read)
}

// owners says whose processes a row's are, by user id, most first (the
// owner of /proc/PID is the process's effective user).
func owners(fs proc.FS, row Row, procs map[int]snap) string {
	key := rowKey{row.Exe, row.Dev, row.Ino, row.Place()}
	by := map[uint32]int{}
	for pid, s := range procs {
		if s.id != key {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(fs.Root+"/"+strconv.Itoa(pid), &st) == nil {
			by[st.Uid]++
		}
	}
	uids := make([]uint32, 0, len(by))
	for u := range by {
		uids = append(uids, u)
	}
	sort.Slice(uids, func(i, j int) bool {
		if by[uids[i]] != by[uids[j]] {
			return by[uids[i]] > by[uids[j]]
		}
		return uids[i] < uids[j]
	})
	var parts []string
	for _, u := range uids {
		parts = append(parts, fmt.Sprintf("uid %d x%d", u, by[u]))
	}
	return strings.Join(parts, ", ")
}

func pidLine(fs proc.FS, procs int) string {
	pidMax := readInt(fs.Root + "/sys/kernel/pid_max")
	var lim unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NPROC, &lim)
	line := fmt.Sprintf("pids: %d processes of pid_max %d (%.0f%%)", procs, pidMax, 100*float64(procs)/float64(max(pidMax, 1)))
	if lim.Cur != unix.RLIM_INFINITY {
		line += fmt.Sprintf("; your process limit (ulimit -u) is %d", lim.Cur)
	}
	if pidMax > 0 && float64(procs) > 0.8*float64(pidMax) {
		line += " -- NEARLY FULL: new processes will fail to start"
	}
	return line
}

func memLine(totalKB, availKB uint64) string {
	line := fmt.Sprintf("memory: %.1f GiB available of %.1f GiB", float64(availKB)/(1<<20), float64(totalKB)/(1<<20))
	if availKB*10 < totalKB {
		line += " -- LOW: the OOM killer is near"
	}
	return line
}

func readInt(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

func uptimeTicks(fs proc.FS) uint64 {
	b, err := os.ReadFile(fs.Root + "/uptime")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return uint64(f * clockTicks)
}
