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
type Counter struct {
	objs gateObjects
	link link.Link
}

// FileKey is an executable as the kernel knows it (see fileID).
type FileKey struct {
	Dev uint32
	Ino uint64
}

// KeyOf is the FileKey of f, a file identity as stat(2) gives it.
func KeyOf(f proc.File) FileKey {
	k := fileID(f)
	return FileKey{Dev: k.Dev, Ino: k.Ino}
}

// StartCounter loads the gate's object and attaches its counter only.
func StartCounter() (*Counter, error) {
	c := &Counter{}
	if err := loadGateObjects(&c.objs, nil); err != nil {
		return nil, fmt.Errorf("load the counter: %w", err)
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: c.objs.CountSysEnter})
	if err != nil {
		c.objs.Close()
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
	it := c.objs.ForkCounts.Iterate()
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
	return c.objs.Close()
}
