package gate

// The compiled object and the Go that loads it are checked in, so that
// building freeze needs no clang. .ci/run regenerates them and fails if
// anything changes. One object per architecture (gate_x86_bpfel.o,
// gate_arm64_bpfel.o): the syscall numbers differ.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target amd64,arm64 -type file_id -type task_rec -type fd_rec -type counter -type argv_rec gate gate.bpf.c
