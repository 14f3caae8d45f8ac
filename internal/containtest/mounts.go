package containtest

import (
	"freeze/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Overlay mounts an overlayfs whose lower layer and upper layer sit on two
// tmpfs mounts of their own, with xino=off, and returns its mount point:
// there stat(2) of a file reports the real layer's device, while the
// kernel's inode of a running process's executable is the overlay's, as
// in a container whose image and writable layers are on different
// filesystems. Everything is unmounted at cleanup, after the test's
// chains (registered earlier, cleaned up later). Skips where it cannot
// mount.
func Overlay(t testing.TB) string {
	t.Helper()
	needRoot(t, "mounting an overlay")
	dir := t.TempDir()
	lower, uw, m := filepath.Join(dir, "lower"), filepath.Join(dir, "uw"), filepath.Join(dir, "merged")
	for _, d := range []string{lower, uw, m} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mount(t, "tmpfs", lower, "tmpfs", "size=64m")
	mount(t, "tmpfs", uw, "tmpfs", "size=64m")
	for _, d := range []string{"upper", "work"} {
		if err := os.Mkdir(filepath.Join(uw, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mount(t, "overlay", m, "overlay", "lowerdir="+lower+",upperdir="+uw+"/upper,workdir="+uw+"/work,xino=off")
	return m
}

// Btrfs makes a btrfs filesystem on a sparse image in the test's
// temporary directory, mounts it through a loop device, creates a
// subvolume and returns the subvolume's path: stat(2) there reports the
// subvolume's anonymous device, not the superblock's. Unmounted (which
// frees the loop device) at cleanup. Skips without mkfs.btrfs (Debian's
// btrfs-progs) or where the mount fails.
func Btrfs(t testing.TB) string {
	t.Helper()
	needRoot(t, "mounting btrfs")
	mkfs, err := exec.LookPath("mkfs.btrfs")
	if err != nil {
		t.Skip("no mkfs.btrfs: install btrfs-progs to test btrfs subvolumes")
	}
	btrfs, err := exec.LookPath("btrfs")
	if err != nil {
		t.Skip("no btrfs command: install btrfs-progs to test btrfs subvolumes")
	}
	dir := t.TempDir()
	img, m := filepath.Join(dir, "btrfs.img"), filepath.Join(dir, "mnt")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	// 256 MiB, sparse: above mkfs.btrfs's minimum (about 114 MiB).
	if err := f.Truncate(256 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if out, err := exec.Command(mkfs, "-q", "-f", img).CombinedOutput(); err != nil {
		t.Skipf("mkfs.btrfs: %v: %s", err, out)
	}
	if err := os.Mkdir(m, 0o755); err != nil {
		t.Fatal(err)
	}
	// mount(8) sets up the loop device and marks it autoclear, so the
	// unmount at cleanup frees it.
	if out, err := exec.Command("mount", "-t", "btrfs", "-o", "loop", img, m).CombinedOutput(); err != nil {
		t.Skipf("mount btrfs image: %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { unmount(t, m) })
	sub := filepath.Join(m, "sub")
	if out, err := exec.Command(btrfs, "-q", "subvolume", "create", sub).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume create: %v: %s", err, out)
	}
	return sub
}

func needRoot(t testing.TB, what string) {
	t.Helper()
	testenv.RequireLive(t, what)
}

func mount(t testing.TB, src, target, fstype, data string) {
	t.Helper()
	if err := unix.Mount(src, target, fstype, unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		t.Skipf("mount %s on %s (%s): %v", fstype, target, data, err)
	}
	t.Cleanup(func() { unmount(t, target) })
}

// unmount unmounts target, detaching it lazily if something still holds
// it busy, so that no mount outlives the test.
func unmount(t testing.TB, target string) {
	if err := unix.Unmount(target, 0); err != nil {
		if err2 := unix.Unmount(target, unix.MNT_DETACH); err2 != nil {
			t.Errorf("unmount %s: %v, then %v", target, err, err2)
		}
	}
}
