package gate

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"freeze/internal/safedir"
)

// identBatch is how many files are held open at once while their
// identities are read: well below any RLIMIT_NOFILE (Go raises the soft
// limit to the hard one, at least 1,024 by default), and one pass of the
// identity reader a batch. --under can name MaxFiles.
const identBatch = 512

var fdRecSize = int(unsafe.Sizeof(gateFdRec{}))

// kernelIDs returns each file's identity as the kernel holds it, read
// through a descriptor: each path is opened O_PATH|O_NOFOLLOW, checked
// by fstat to be the file that was resolved, and the identity reader
// (iter/task_file over freeze's own descriptors) reports what the
// kernel holds for that open file: the inode number and its
// super_block's s_dev, which is what mm->exe_file of a process running
// it shows. stat(2) says the same on most filesystems, but not on btrfs
// subvolumes (an anonymous device per subvolume) nor on overlayfs whose
// layers are on several filesystems with xino off (the real file's
// device, not the overlay's). Without the reader, the stat identity.
//
// Each file gets its identity or its error: a file that is not, when
// opened, the one that was resolved or found is not gated by identity.
func (g *Gate) kernelIDs(files []File) ([]gateFileId, []error) {
	ids, errs := make([]gateFileId, len(files)), make([]error, len(files))
	for start := 0; start < len(files); start += identBatch {
		end := min(start+identBatch, len(files))
		g.readBatch(files[start:end], ids[start:end], errs[start:end])
	}
	return ids, errs
}

func (g *Gate) readBatch(files []File, ids []gateFileId, errs []error) {
	fds := make([]int, len(files))
	defer func() {
		for _, fd := range fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	for i, f := range files {
		fds[i], ids[i] = -1, fileID(f.Stat)
		open := safedir.OpenNoSymlinks
		if safedir.IsProcView(f.Path) {
			// A file named through a process's own view (a container's):
			// opened as that process sees it, and checked below to be
			// the identity that was matched.
			open = safedir.OpenProcView
		}
		fd, err := open(f.Path)
		if err != nil {
			errs[i] = fmt.Errorf("gate: open %s: %w", f.Path, err)
			continue
		}
		fds[i] = fd
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			errs[i] = fmt.Errorf("gate: fstat %s: %w", f.Path, err)
		} else if st.Dev != f.Stat.Dev || st.Ino != f.Stat.Ino {
			errs[i] = fmt.Errorf("gate: %s changed since freeze resolved it (was %d:%d, now %d:%d): run freeze again", f.Path, f.Stat.Dev, f.Stat.Ino, st.Dev, st.Ino)
		}
	}
	if g.ident == nil {
		return
	}
	byFD, err := g.readIdent()
	for i, fd := range fds {
		if errs[i] != nil || fd < 0 {
			continue
		}
		id, ok := byFD[uint32(fd)]
		switch {
		case err != nil:
			errs[i] = err
		case !ok:
			errs[i] = fmt.Errorf("gate: the identity reader did not see %s (fd %d)", files[i].Path, fd)
		case id.Ino != files[i].Stat.Ino:
			// The inode number is the file's on every filesystem here;
			// only the device differs. Another number means another file.
			errs[i] = fmt.Errorf("gate: %s: the kernel holds inode %d, stat said %d", files[i].Path, id.Ino, files[i].Stat.Ino)
		default:
			ids[i] = id
		}
	}
}

// readIdent runs the identity reader once: the kernel identity of every
// descriptor freeze has open, by descriptor.
func (g *Gate) readIdent() (map[uint32]gateFileId, error) {
	r, err := openOwnFiles(g.ident)
	if err != nil {
		return nil, fmt.Errorf("the identity reader: %w", err)
	}
	defer r.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, fmt.Errorf("the identity reader: %w", err)
	}
	out := map[uint32]gateFileId{}
	b := buf.Bytes()
	for len(b) >= fdRecSize {
		var rec gateFdRec
		if _, err := binary.Decode(b[:fdRecSize], binary.NativeEndian, &rec); err != nil {
			return nil, fmt.Errorf("the identity reader: %w", err)
		}
		b = b[fdRecSize:]
		out[rec.Fd] = gateFileId{Ino: rec.Ino, Dev: rec.Dev}
	}
	return out, nil
}

// openOwnFiles attaches the identity reader to freeze's own process and
// opens it (ownFilesLink).
func openOwnFiles(prog *ebpf.Program) (io.ReadCloser, error) {
	l, err := ownFilesLink(prog)
	if err != nil {
		return nil, err
	}
	defer unix.Close(l)
	return openIter(l)
}

// ownFilesLink makes the identity reader's link, for freeze's own
// process only, and returns its descriptor. A task_file iterator walks
// every file of every task on the machine unless it is told which
// process to walk (Linux 6.1's task parameter, union
// bpf_iter_link_info's task.tid): beside a chain of 2,000 that walk was
// most of the 4 ms a guard took to fill its gate, before anything was
// held. The process is named by its pid in freeze's own pid namespace,
// the one the iterator looks it up in (the opener's). Kernels before
// 6.1 have no such parameter: the same four bytes are a map's
// descriptor there, which a task iterator has no use for, or the link
// is refused and made without them. Either way such a kernel walks
// every task, as the reader always did, and the records are the same
// (the program keeps freeze's own).
func ownFilesLink(prog *ebpf.Program) (int, error) {
	if fd, err := attachIterToProcess(prog, os.Getpid()); err == nil {
		return fd, nil
	}
	all, err := link.AttachIter(link.IterOptions{Program: prog})
	if err != nil {
		return -1, err
	}
	defer all.Close()
	return unix.FcntlInt(uintptr(all.FD()), unix.F_DUPFD_CLOEXEC, 0)
}

// attachIterToProcess makes an iterator link for prog with the task
// parameter tid set to pid (cilium/ebpf's AttachIter takes only a map):
// BPF_LINK_CREATE with bpf_iter_link_info. It returns the link's
// descriptor.
func attachIterToProcess(prog *ebpf.Program, pid int) (int, error) {
	info := new([3]uint32) // union bpf_iter_link_info's task: tid, pid, pid_fd
	info[0] = uint32(pid)
	attr := linkCreateIter{
		progFD:      uint32(prog.FD()),
		attachType:  uint32(ebpf.AttachTraceIter),
		iterInfo:    unsafe.Pointer(info),
		iterInfoLen: 4, // tid alone: what Linux 5.10's union (a map fd) has room for
	}
	fd, _, errno := unix.Syscall(unix.SYS_BPF, bpfLinkCreate, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return -1, fmt.Errorf("BPF_LINK_CREATE of an iterator for process %d: %w", pid, errno)
	}
	unix.CloseOnExec(int(fd))
	return int(fd), nil
}

// openIter opens an iterator link: reading the file runs the program.
func openIter(linkFD int) (io.ReadCloser, error) {
	attr := struct{ linkFD, flags uint32 }{linkFD: uint32(linkFD)}
	fd, _, errno := unix.Syscall(unix.SYS_BPF, bpfIterCreate, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return nil, fmt.Errorf("BPF_ITER_CREATE: %w", errno)
	}
	unix.CloseOnExec(int(fd))
	return os.NewFile(fd, "bpf_iter"), nil
}

// The bpf(2) commands and the part of union bpf_attr that
// BPF_LINK_CREATE reads for an iterator (include/uapi/linux/bpf.h).
const (
	bpfLinkCreate = 28
	bpfIterCreate = 33
)

type linkCreateIter struct {
	progFD, targetFD, attachType, flags uint32
	iterInfo                            unsafe.Pointer // __aligned_u64: the gate is built for 64-bit only
	iterInfoLen                         uint32
	_                                   uint32
}
