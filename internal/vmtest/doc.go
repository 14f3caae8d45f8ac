// Package vmtest is freeze's kernel matrix: it boots Debian's own kernel
// packages (bookworm's 6.1, trixie's 6.12, and 6.12 with bpf left out of
// lsm=) under qemu with software emulation (TCG: KVM guests never print
// on the machines freeze is built on), each from an initramfs holding
// busybox, freeze, the gate's and the stop order's test binaries and
// the chain fixture, and runs the gate's suite inside. Its only code is
// its test (TestKernelMatrix); fetch-kernels brings the kernels.
//
// It must never run a chain outside a VM's own kernel: the host only
// builds, boots and reads the serial console; qemu runs in a process
// group of its own, killed at its deadline and at cleanup.
package vmtest
