package gate

import "golang.org/x/sys/unix"

const sigcont = unix.SIGCONT

func mkfifo(path string) error { return unix.Mkfifo(path, 0o600) }

func kill(pid int, sig unix.Signal) error { return unix.Kill(pid, sig) }
