package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

const nodeUsage = `Usage:
    freeze node [--root DIR] -- FREEZE-ARGS...

Runs freeze with FREEZE-ARGS in the node's own file system, from a
container: the way the DaemonSet and the Job in deploy/kubernetes run it.
It changes its root to DIR (default /proc/1/root: the root of PID 1's
mount namespace, which a container sees with the host's pid namespace),
then runs this same freeze binary again there, from the file it already
holds open. So a --path, the cgroups, BPF, /run/freeze and the timelines
are the node's, and the image needs no shell, cp or nsenter: it is this
one static binary (deploy/kubernetes/Dockerfile, FROM scratch).

It needs CAP_SYS_CHROOT and the host's pid namespace (a privileged pod
with hostPID: true). It says which pid namespace it runs in, and refuses
any but the host's: without hostPID, PID 1 is the pod's own, /proc/1/root
is the pod's root, and freeze would run inside the pod and act on the
pod alone, while its words said "node".

Options:
        --root DIR                the root to run in (default /proc/1/root)
        --allow-pod-namespace     run in a pid namespace that is not the
                                  host's all the same (a test of the
                                  image, say): freeze then sees only
                                  the pod's processes
    -h, --help                    this text

Example (the DaemonSet's command):
    freeze node -- guard --run-dir /run/freeze --health $(POD_IP):9479
`

// runNode is 'freeze node': chroot to the node's root, then exec this
// binary (held open before the chroot, so it need not exist on the
// node) with the rest of the words.
func runNode(o out, args []string) int {
	fl := pflag.NewFlagSet("freeze node", pflag.ContinueOnError)
	fl.SetOutput(io.Discard)
	root := fl.String("root", "/proc/1/root", "")
	podNS := fl.Bool("allow-pod-namespace", false, "")
	help := fl.BoolP("help", "h", false, "")
	if err := fl.Parse(args); err != nil {
		flagError(o, "node", "node: ", err)
		o.Hintf("see 'freeze node --help'")
		return exitUsage
	}
	if *help {
		fmt.Fprint(o.Stdout, nodeUsage)
		return exitZero
	}
	rest := fl.Args()
	if len(rest) == 0 || fl.ArgsLenAtDash() != 0 {
		o.Errorf("node: give the freeze command to run after --")
		o.Hintf("freeze node -- guard --run-dir /run/freeze")
		return exitUsage
	}
	if rest[0] == "node" {
		o.Errorf("node: freeze node inside freeze node")
		o.Hintf("give the command to run on the node, such as: freeze node -- guard")
		return exitUsage
	}
	ns, host := pidNamespace()
	if host {
		o.Sayf("node: pid namespace %s, the host's", ns)
	} else if *podNS {
		o.Warnf("node: pid namespace %s is not the host's: freeze runs inside the pod and sees only its processes (--allow-pod-namespace)", ns)
	} else {
		o.Errorf("node: pid namespace %s is not the host's: PID 1 here is the pod's own, so %s is the pod's root and freeze would act inside the pod alone", ns, *root)
		o.Hintf("run the pod with hostPID: true (deploy/kubernetes does); or add --allow-pod-namespace to run inside the pod all the same")
		return exitRefused
	}
	// The binary, before the root changes: the image's file is not on
	// the node. Close-on-exec: execve(2) opens /proc/self/fd/N before it
	// closes such descriptors (a binary is not a script, which would
	// need it after), and the command freeze runs must not inherit it.
	self, err := unix.Open("/proc/self/exe", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		o.Errorf("node: open this freeze binary: %v", err)
		return exitSurvivors
	}
	if err := unix.Chroot(*root); err != nil {
		o.Errorf("node: chroot %s: %v", *root, err)
		switch {
		case errors.Is(err, unix.EPERM):
			o.Hintf("this needs CAP_SYS_CHROOT: run the pod privileged (securityContext.privileged: true)")
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EACCES):
			o.Hintf("%s is not the node's root here: the pod needs hostPID: true (PID 1 is then the node's init)", *root)
		}
		return exitSurvivors
	}
	if err := unix.Chdir("/"); err != nil {
		o.Errorf("node: chdir / in %s: %v", *root, err)
		return exitSurvivors
	}
	// /proc is now the node's, which with the host's pid namespace
	// holds this process too.
	argv := append([]string{"freeze"}, rest...)
	err = unix.Exec("/proc/self/fd/"+strconv.Itoa(self), argv, os.Environ())
	o.Errorf("node: run freeze in %s: %v", *root, err)
	o.Hintf("the node's /proc must be mounted, and the pod must have hostPID: true")
	return exitSurvivors
}

// initPidNS is the inode of the initial pid namespace's /proc/PID/ns/pid
// (PROC_PID_INIT_INO, include/linux/proc_ns.h): the host's.
const initPidNS = 0xEFFFFFFC

// pidNamespace names this process's pid namespace ("pid:[4026531836]")
// and says whether it is the host's.
func pidNamespace() (string, bool) {
	name, _ := os.Readlink("/proc/self/ns/pid")
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return "unknown (" + err.Error() + ")", false
	}
	if name == "" {
		name = fmt.Sprintf("pid:[%d]", st.Ino)
	}
	return name, st.Ino == initPidNS
}
