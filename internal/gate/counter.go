package gate

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"freeze/internal/proc"
)

// Counter counts fork attempts per executable on the whole machine, in
// the kernel, and refuses nothing: the guard's automatic mode reads it to
// see a chain coming, at the cost of a map read instead of a /proc scan.
// In a pid namespace of its own it counts that namespace's tasks alone
// (not those of namespaces nested in it): the processes its /proc shows.
type Counter struct {
	ld   *loader
	prog *ebpf.Program
	link link.Link
}

// FileKey is an executable as the kernel knows it (see fileID).
type FileKey struct {
	Dev uint32
	Ino uint64
}

// KeyOf is the FileKey of f, a file identity as stat(2) gives it. On
// btrfs subvolumes and overlays across filesystems the kernel's device
// is another, and such a file's forks are counted under a key KeyOf
// does not give (the gate itself reads the kernel's identity by
// descriptor: kernelIDs).
func KeyOf(f proc.File) FileKey {
	k := fileID(f)
	return FileKey{Dev: k.Dev, Ino: k.Ino}
}

// StartCounter loads the gate's object and attaches its counter only.
func StartCounter() (*Counter, error) {
	ld, err := newLoader("", 0)
	if err != nil {
		return nil, fmt.Errorf("load the counter: %w", err)
	}
	c := &Counter{ld: ld}
	if c.prog, err = ld.prog("count_sys_enter"); err != nil {
		ld.close()
		return nil, fmt.Errorf("load the counter: %w", err)
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: c.prog})
	if err != nil {
		c.prog.Close()
		ld.close()
		return nil, fmt.Errorf("attach the counter: %w", err)
	}
	c.link = l
	return c, nil
}

// Read returns the attempts counted so far, by executable.
func (c *Counter) Read() (map[FileKey]uint64, error) {
	out := map[FileKey]uint64{}
	var k gateFileId
	var v uint64
	it := c.ld.maps["fork_counts"].Iterate()
	for it.Next(&k, &v) {
		out[FileKey{Dev: k.Dev, Ino: k.Ino}] = v
	}
	if err := it.Err(); err != nil && err != ebpf.ErrIterationAborted {
		return out, err
	}
	return out, nil
}

// Close detaches and unloads the counter.
func (c *Counter) Close() error {
	c.link.Close()
	c.prog.Close()
	return c.ld.close()
}
