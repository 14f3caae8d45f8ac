// Command lean is all less the metrics stack (client_golang, its
// exposition format and net/http), which only the guard's metrics and
// webhook and census's Prometheus output use: what a freeze command
// that does not link them would pay for its libraries (issue #51).
package main

import (
	"os"

	_ "github.com/cilium/ebpf"
	_ "github.com/cilium/ebpf/link"
	_ "github.com/containerd/cgroups/v3"
	_ "github.com/prometheus/procfs"
	_ "github.com/spf13/pflag"
	_ "golang.org/x/sys/unix"
)

func main() { os.Stdout.WriteString("hello\n") }
