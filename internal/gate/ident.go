package gate

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unsafe"

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
	l, err := link.AttachIter(link.IterOptions{Program: g.ident})
	if err != nil {
		return nil, fmt.Errorf("the identity reader: %w", err)
	}
	defer l.Close()
	r, err := l.Open()
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
