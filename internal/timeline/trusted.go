package timeline

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// MaxFileSize bounds a timeline freeze reads: the largest run here wrote
// well under 1 MiB (a run records steps, not processes); 64 MiB leaves
// room for a fleet's biggest and keeps /dev/zero from taking the memory.
const MaxFileSize = 64 << 20

// ErrUntrusted means a timeline is not one freeze may act on as root:
// not a regular file, or another user's, or writable by others.
var ErrUntrusted = errors.New("untrusted timeline")

// ReadTrusted reads a timeline that freeze will act on (restore chmods
// what it names): a regular file (opened without following a symlink and
// without blocking, so a FIFO cannot hang it), owned by root or by uid
// (the caller), writable by neither group nor others, at most
// MaxFileSize. Any line that does not parse is an error.
func ReadTrusted(path string, uid int) ([]Event, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link: name the file itself: %w", path, ErrUntrusted)
	}
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, fmt.Errorf("%s is not a regular file: %w", path, ErrUntrusted)
	case st.Uid != 0 && int(st.Uid) != uid:
		return nil, fmt.Errorf("%s belongs to uid %d, neither root nor you: anyone who owns it could have written what it asks for: %w", path, st.Uid, ErrUntrusted)
	case st.Mode&0o022 != 0:
		return nil, fmt.Errorf("%s is writable by group or others (mode %#o): %w", path, st.Mode&0o777, ErrUntrusted)
	case st.Size > MaxFileSize:
		return nil, fmt.Errorf("%s is %d bytes, more than a timeline's %d: %w", path, st.Size, MaxFileSize, ErrUntrusted)
	}
	b, err := readAll(f, st)
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

// readRegular reads a regular file of at most MaxFileSize, opened
// without blocking (a FIFO at the name cannot hang the reader).
func readRegular(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s is not a regular file: a timeline is one", path)
	}
	return readAll(f, st)
}

// readAll reads f, whose fstat is st, up to MaxFileSize.
func readAll(f *os.File, st unix.Stat_t) ([]byte, error) {
	if st.Size > MaxFileSize {
		return nil, fmt.Errorf("%s is %d bytes, more than a timeline's %d", f.Name(), st.Size, MaxFileSize)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("%s grew past %d bytes while read", f.Name(), MaxFileSize)
	}
	return b, nil
}
