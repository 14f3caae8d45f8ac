package freeze

import (
	"os"

	"freeze/internal/proc"
)

// OpenCgroup2At opens cgroup2's set on a fixture hierarchy at mount,
// whose groups mkdir makes (with the files the kernel would put in
// them).
func OpenCgroup2At(fs proc.FS, mount, name string, mkdir func(string) error) (Group, error) {
	g, err := openCgroup2At(fs, mount, name)
	if err != nil {
		return nil, err
	}
	g.mkdir, g.rmdir = mkdir, os.RemoveAll
	return g, nil
}
