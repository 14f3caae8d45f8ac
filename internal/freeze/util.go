package freeze

import (
	"os"

	"golang.org/x/sys/unix"
)

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func writable(p string) bool { return unix.Access(p, unix.W_OK) == nil }
