// Package exefile copies an executable into a disposable test cache: the
// drill's copy of freeze and the test harness's fixtures are both such
// copies, and a chain is matched by the copy's own device and inode. It
// imports nothing of the project but the one writer, so both can use it.
package exefile

import (
	"freeze/internal/safedir"
	"io"
	"os"
)

// Copy copies src to a new file dst with mode 0755; it never overwrites.
func Copy(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := safedir.CreateNew(dst, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
