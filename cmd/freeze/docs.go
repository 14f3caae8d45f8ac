package main

import (
	"fmt"

	"freeze/internal/order"
	"freeze/internal/say"
)

// The man page and the shell completions are generated from the usage
// texts, so that they cannot say something the help does not.

// usageOf is the usage text of a command, "" for one that has none of
// its own.
func usageOf(cmd string) string {
	switch cmd {
	case "":
		return order.Usage()
	case "run":
		return runUsage
	case "guard":
		return guardUsage
	case "census":
		return censusUsage
	case "drill":
		return drillUsage
	case "timeline":
		return timelineUsage
	case "runbook":
		return runbookUsage
	case "restore":
		return restoreUsage
	case "completion":
		return completionUsage
	case "node":
		return nodeUsage
	}
	return ""
}

// flagsOf lists a command's options, as its usage defines them.
func flagsOf(cmd string) []string { return say.Options(usageOf(cmd)) }

const completionUsage = `Usage:
    freeze completion bash|zsh|fish

Prints a completion script for the shell, generated from freeze's usage
texts: subcommands, and each one's options. Install it, for example:

    freeze completion bash > /usr/share/bash-completion/completions/freeze
    freeze completion zsh > /usr/share/zsh/vendor-completions/_freeze
    freeze completion fish > /usr/share/fish/vendor_completions.d/freeze.fish

Options:
    -h, --help   this text
`

func runCompletion(o out, args []string) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(o.Stdout, completionUsage)
		return exitZero
	}
	if len(args) != 1 {
		o.Errorf("completion: name one shell: bash, zsh or fish")
		o.Hintf("freeze completion bash > /usr/share/bash-completion/completions/freeze")
		return exitUsage
	}
	switch args[0] {
	case "bash":
		fmt.Fprint(o.Stdout, book().Bash())
	case "zsh":
		// zsh runs bash's completion through bashcompinit.
		fmt.Fprint(o.Stdout, "#compdef freeze\nautoload -U +X bashcompinit && bashcompinit\n"+book().Bash())
	case "fish":
		fmt.Fprint(o.Stdout, book().Fish())
	default:
		o.Errorf("completion: unknown shell %q", args[0])
		o.Hintf("use bash, zsh or fish")
		return exitUsage
	}
	return exitZero
}
