package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"freeze/internal/contain"
	"freeze/internal/guard"
	"freeze/internal/order"
	"freeze/internal/say"
	"freeze/internal/version"
)

func run(args []string, stdout, stderr io.Writer) int {
	o := out{Stdout: stdout, Stderr: stderr}
	if len(args) > 0 {
		switch args[0] {
		case "drill":
			return withCtx(func(ctx context.Context) int { return runDrill(ctx, o, args[1:]) })
		case "runbook":
			return runRunbook(o, args[1:])
		case "timeline":
			return runTimeline(o, args[1:])
		case "census":
			return runCensus(o, args[1:])
		case "restore":
			return runRestore(o, args[1:])
		case "guard":
			return withCtx(func(ctx context.Context) int { return runGuard(ctx, o, args[1:]) })
		case "run":
			return withCtx(func(ctx context.Context) int { return runRun(ctx, o, args[1:]) })
		case "node":
			return runNode(o, args[1:])
		case "version", "--version":
			if helpAsked(args[1:]) {
				fmt.Fprint(o.Stdout, versionUsage)
				return exitZero
			}
			fmt.Fprintln(o.Stdout, version.Get())
			return exitZero
		case "help":
			return runHelp(o, args[1:])
		case "completion":
			return runCompletion(o, args[1:])
		case "man":
			if helpAsked(args[1:]) {
				fmt.Fprint(o.Stdout, manUsage)
				return exitZero
			}
			fmt.Fprint(o.Stdout, book().Man())
			return exitZero
		case hiddenChain:
			return runChainFixture(args[1:])
		case contain.ChildArg:
			return contain.Child(args[1:])
		}
	}
	return withCtx(func(ctx context.Context) int { return runStop(ctx, o, args) })
}

// withCtx runs a command that acts (the stop order, the drill, the
// guard, freeze run) with the signals caught for its whole life: see
// withSignals.
func withCtx(cmd func(context.Context) int) int {
	ctx, stop := withSignals(context.Background())
	defer stop()
	return cmd(ctx)
}

// runStop is the stop order's command: parse and check the words once,
// hand the request to a running guard if one answers, else run it here.
func runStop(ctx context.Context, o out, args []string) int {
	f, code := order.Parse(o, args)
	if code >= 0 {
		return code
	}
	// What the checks say (a symlinked --path, say) is said once, by
	// whoever runs the request: a guard checks its request again.
	var pre bytes.Buffer
	req, code := f.Request(out{Stdout: &pre, Stderr: &pre})
	if code != 0 || f.Local() {
		o.Stderr.Write(pre.Bytes())
		if code != 0 {
			return code
		}
		return order.Run(ctx, o, f, req).Code()
	}
	// The guard runs in its own directory: a relative --timeline would be
	// written there (#24, finding 9). Resolved here, where the operator
	// meant it; a later flag overrides the earlier.
	if tl := f.Timeline(); tl != "" && !filepath.IsAbs(tl) {
		args = append(args[:len(args):len(args)], "--timeline", say.MustAbs(tl))
	}
	code, err := guard.Ask(f.RunDir(), args, o.Stdout, o.Stderr)
	switch {
	case err == nil:
		return code
	case errors.Is(err, guard.ErrLost):
		o.Errorf("the guard at %s stopped answering mid-run: %v", f.RunDir(), err)
		o.Hintf("see %s; what it froze stays frozen; run the same command with --no-guard to finish", filepath.Join(f.RunDir(), guard.LogName))
		return exitInterrupted
	case err == guard.ErrNoGuard:
		// None runs: freeze runs here, as it always has.
	default:
		o.Warnf("%v; running here instead", err)
	}
	o.Stderr.Write(pre.Bytes())
	return order.Run(ctx, o, f, req).Code()
}

// runHelp is 'freeze help [CMD]': the usage of freeze or of CMD.
func runHelp(o out, args []string) int {
	name := ""
	if len(args) > 0 {
		name = args[0]
	}
	text := usageOf(name)
	if text == "" || len(args) > 1 {
		o.Errorf("help: no command %q", strings.Join(args, " "))
		o.Hintf("freeze help [%s]", strings.Join(helpable(), " | "))
		return exitUsage
	}
	fmt.Fprint(o.Stdout, text)
	return exitZero
}

// helpable are the commands with a usage text of their own.
func helpable() []string {
	var out []string
	for _, c := range order.Commands[1:] {
		if usageOf(c) != "" {
			out = append(out, c)
		}
	}
	return out
}

const versionUsage = `Usage:
    freeze version

Prints freeze's version, the commit it was built from, the Go version,
whether cgo (and so the early priority lift) is on, and the hash of the
gate's BPF object. --version is the same.
`

const manUsage = `Usage:
    freeze man

Prints freeze's man page (troff), the one the package installs as
freeze(1). To read it without installing:
    freeze man | man -l -
`

// helpAsked says whether a command that takes no options was given -h
// or --help.
func helpAsked(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "--help" {
			return true
		}
	}
	return false
}
