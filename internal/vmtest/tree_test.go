package vmtest

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// guestTree builds the VM's root: busybox (its applets, PID 1's shell),
// bash-static as /bin/sh and /bin/bash (the gate's tests copy /bin/sh
// and run the copy under another name, which busybox would not answer
// to), freeze, the test binaries (gate, stop, and cmd/freeze/live's for
// freeze run), the chain fixture built statically, btrfs-progs, and
// every library ldd names.
func guestTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	mod, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	mkTreeDirs(t, root)
	build := func(args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = mod
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	build("build", "-o", filepath.Join(root, "bin/freeze"), "./cmd/freeze")
	build("test", "-c", "-o", filepath.Join(root, "t/gate.test"), "./internal/gate")
	build("test", "-c", "-o", filepath.Join(root, "t/stop.test"), "./internal/stop/live")
	build("test", "-c", "-o", filepath.Join(root, "t/cmd.test"), "./cmd/freeze/live")
	build("test", "-c", "-o", filepath.Join(root, "t/autopilot.test"), "./internal/autopilot")
	if out, err := exec.Command("cc", "-O2", "-static", "-o", filepath.Join(root, "t/chain"),
		filepath.Join(mod, "internal/containtest/fixture/chain.c")).CombinedOutput(); err != nil {
		t.Fatalf("build the chain fixture statically (install libc6-dev): %v\n%s", err, out)
	}
	need := func(host, guest string) {
		t.Helper()
		p, err := exec.LookPath(host)
		if err != nil {
			t.Fatalf("%s not found: .ci/run installs it (busybox-static, bash-static, btrfs-progs)", host)
		}
		copyFile(t, p, filepath.Join(root, guest), 0o755)
	}
	need("busybox", "bin/busybox")
	need("bash-static", "bin/sh")
	need("bash-static", "bin/bash") // freeze run's fork-bomb test copies /bin/bash
	need("mkfs.btrfs", "usr/sbin/mkfs.btrfs")
	need("btrfs", "usr/bin/btrfs")
	copyFile(t, "guest/init", filepath.Join(root, "init"), 0o755)
	copyFile(t, "guest/suite", filepath.Join(root, "suite"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\nnogroup:x:65534:\n"), 0o644)
	for _, bin := range []string{"bin/freeze", "t/gate.test", "t/stop.test", "t/cmd.test", "t/autopilot.test", "usr/sbin/mkfs.btrfs", "usr/bin/btrfs"} {
		for _, lib := range libs(t, filepath.Join(root, bin)) {
			copyFile(t, lib, filepath.Join(root, lib), 0o755)
		}
	}
	return root
}

// mkTreeDirs makes a guest root's directories.
func mkTreeDirs(t *testing.T, root string) {
	t.Helper()
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "t", "proc", "sys", "dev", "tmp", "var/tmp", "run", "etc", "modules"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// libs lists the shared libraries ldd says bin loads, the loader included;
// none for a static binary.
func libs(t *testing.T, bin string) []string {
	t.Helper()
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		return nil // "not a dynamic executable"
	}
	var paths []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		for _, f := range strings.Fields(sc.Text()) {
			if strings.HasPrefix(f, "/") {
				paths = append(paths, f)
			}
		}
	}
	return paths
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// copyFiles copies the regular files of src into dst.
func copyFiles(t *testing.T, src, dst string) {
	t.Helper()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Type().IsRegular() {
			copyFile(t, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()), 0o644)
		}
	}
}

// cpio writes the tree under root as a newc archive (busybox's cpio), as
// the kernel unpacks an initramfs.
func cpio(t *testing.T, root, out string) {
	t.Helper()
	var list bytes.Buffer
	filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err == nil && p != root {
			rel, _ := filepath.Rel(root, p)
			list.WriteString(rel + "\n")
		}
		return nil
	})
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("busybox", "cpio", "-o", "-H", "newc")
	cmd.Dir, cmd.Stdin, cmd.Stdout = root, &list, f
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("cpio: %v: %s", err, stderr.String())
	}
}

func concat(t *testing.T, out string, parts ...string) {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range parts {
		in, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(f, in)
		in.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// ownGroup puts qemu in a process group of its own, and has the kernel
// kill it if the test process dies first (a test binary killed by a
// signal runs no cleanup: seen, when one was stopped by hand).
func ownGroup() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup kills qemu's process group (qemu is its leader).
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

// systemdUnits are the host's units the systemd boot needs: the targets
// multi-user.target pulls in, and journald.
var systemdUnits = []string{"systemd-journald.service", "systemd-journald.socket", "systemd-journald-dev-log.socket",
	"sockets.target", "sysinit.target", "local-fs.target", "shutdown.target", "basic.target", "multi-user.target"}

// systemdTree builds what the systemd boot adds to the guest's root (the
// kernel unpacks it over the common archive): the host's systemd 252 as
// PID 1 with systemctl and systemd-analyze, the guard's unit exactly as
// deploy/systemd ships it (enabled in multi-user.target), the suite's
// unit, freeze where the unit runs it, and a user whose home holds a
// test cache.
func systemdTree(t *testing.T, common string) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"etc/systemd/system/multi-user.target.wants", "lib/systemd/system", "usr/local/bin", "home/u", "root", "var/lib", "var/log"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bins := map[string]string{"/lib/systemd/systemd": "lib/systemd/systemd", "/lib/systemd/systemd-journald": "lib/systemd/systemd-journald",
		"/bin/systemctl": "bin/systemctl", "/usr/bin/systemd-analyze": "usr/bin/systemd-analyze",
		// systemd-run: the TasksMax step's service.
		"/usr/bin/systemd-run": "usr/bin/systemd-run",
		// util-linux's setpriv: the revoke step runs its chain as uid 1000
		// (busybox's setpriv sets no uid).
		"/usr/bin/setpriv": "usr/bin/setpriv"}
	for host, guest := range bins {
		if _, err := os.Stat(host); err != nil {
			t.Fatalf("%s: %v: the systemd boot runs the host's systemd (Debian's systemd package)", host, err)
		}
		copyFile(t, host, filepath.Join(root, guest), 0o755)
		for _, lib := range libs(t, host) {
			copyFile(t, lib, filepath.Join(root, lib), 0o755)
		}
	}
	for _, u := range systemdUnits {
		copyFile(t, filepath.Join("/lib/systemd/system", u), filepath.Join(root, "lib/systemd/system", u), 0o644)
	}
	copyFile(t, "../../deploy/systemd/freeze-guard.service", filepath.Join(root, "etc/systemd/system/freeze-guard.service"), 0o644)
	if err := os.Symlink("../freeze-guard.service", filepath.Join(root, "etc/systemd/system/multi-user.target.wants/freeze-guard.service")); err != nil {
		t.Fatal(err)
	}
	copyFile(t, "guest/freeze-vmtest.service", filepath.Join(root, "etc/systemd/system/freeze-vmtest.service"), 0o644)
	copyFile(t, "guest/default.target", filepath.Join(root, "etc/systemd/system/default.target"), 0o644)
	copyFile(t, "guest/systemd-init", filepath.Join(root, "init"), 0o755)
	copyFile(t, "guest/systemd-suite", filepath.Join(root, "systemd-suite"), 0o644)
	copyFile(t, filepath.Join(common, "bin/freeze"), filepath.Join(root, "usr/local/bin/freeze"), 0o755)
	if err := os.Chown(filepath.Join(root, "home/u"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"etc/passwd":                "root:x:0:0:root:/root:/bin/sh\nu:x:1000:1000:u:/home/u:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group":                 "root:x:0:\nu:x:1000:\nsystemd-journal:x:101:\nnogroup:x:65534:\n",
		"etc/machine-id":            "", // systemd makes one at boot
		"etc/os-release":            "PRETTY_NAME=\"freeze vmtest (Debian 12 systemd)\"\nID=debian\n",
		"etc/systemd/journald.conf": "[Journal]\nStorage=volatile\n",
	}
	for p, s := range files {
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}
