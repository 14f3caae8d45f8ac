// Command all is a Go hello-world that links every third-party library
// freeze links (their package inits run, nothing else): the start-up
// bench's yardstick for what the libraries cost apart from freeze's own
// code (issue #51).
package main

import (
	"os"

	_ "net/http"

	_ "github.com/cilium/ebpf"
	_ "github.com/cilium/ebpf/link"
	_ "github.com/containerd/cgroups/v3"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/common/expfmt"
	_ "github.com/prometheus/procfs"
	_ "github.com/spf13/pflag"
	_ "golang.org/x/sys/unix"
)

func main() { os.Stdout.WriteString("hello\n") }
