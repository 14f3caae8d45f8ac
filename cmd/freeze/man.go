package main

import (
	"fmt"
	"regexp"
	"strings"

	"freeze/internal/version"
)

// manPage is freeze(1): the standard sections (NAME, SYNOPSIS,
// DESCRIPTION, OPTIONS, COMMANDS, EXIT STATUS, ENVIRONMENT, FILES,
// EXAMPLES, SEE ALSO), made from the same usage texts --help prints, so
// that the two never disagree.
func manPage() string {
	var b strings.Builder
	main := usageText()
	fmt.Fprintf(&b, ".TH FREEZE 1 %q %q \"freeze manual\"\n", manDate(), "freeze "+version.Get().Version)
	b.WriteString(".SH NAME\nfreeze \\- stop a runaway process chain in the order that works; run commands that cannot leave one\n")
	b.WriteString(".SH SYNOPSIS\n.nf\n")
	for _, l := range blockOf(main, "Usage:") {
		b.WriteString(roff(strings.TrimSpace(l)) + "\n")
	}
	b.WriteString(".fi\n.SH DESCRIPTION\n")
	b.WriteString(".nf\n" + roff(strings.TrimSpace(stripBlock(between(main, "", "Options:"), "Usage:"))) + "\n.fi\n")
	b.WriteString(".SH OPTIONS\n")
	writeOptions(&b, blockOf(main, "Options:"))
	b.WriteString(".SH COMMANDS\n")
	for _, c := range commands[1:] {
		text := usageOf(c)
		if text == "" {
			continue
		}
		fmt.Fprintf(&b, ".SS freeze %s\n", c)
		rest := text
		if opts := blockOf(text, "Options:"); len(opts) > 0 {
			rest = between(text, "", "Options:") + "\n" + after(text, "Options:", opts)
			b.WriteString(".nf\n" + roff(strings.TrimSpace(stripUsage(between(text, "", "Options:")))) + "\n.fi\n")
			b.WriteString(".PP\nOptions:\n")
			writeOptions(&b, opts)
			if tail := strings.TrimSpace(after(text, "Options:", opts)); tail != "" {
				b.WriteString(".PP\n.nf\n" + roff(tail) + "\n.fi\n")
			}
			continue
		}
		b.WriteString(".nf\n" + roff(strings.TrimSpace(stripUsage(rest))) + "\n.fi\n")
	}
	b.WriteString(".SH EXIT STATUS\n")
	writeOptions(&b, blockOf(main, "Exit codes:"))
	b.WriteString(`.PP
freeze run has its own codes (121 to 124): see \fBfreeze run \-\-help\fR.
.SH ENVIRONMENT
.TP
.B TMPDIR
a root of disposable files for \fB\-\-revoke\-exec\fR, beside /tmp, /var/tmp and ~/.cache
.TP
.B GOCACHE
Go's build cache, also disposable for \fB\-\-revoke\-exec\fR
.TP
.BR XDG_RUNTIME_DIR ", " XDG_STATE_HOME
where a user who is not root keeps the run locks and timelines
.TP
.B FREEZE_GATE_FORM
the BPF gate's form: auto (default), lsm, fmod_ret or tp_btf; for measurements
.TP
.B FREEZE_GATE_ACTION
kill: the gate kills the chain at its next fork or exec instead of stopping it
.TP
.B FREEZE_SCAN
proc: scan /proc even where the gate's task iterator loads
.TP
.B FREEZE_RUN_LINEAGE
off: freeze run does not record who started whom (its cost: up to a fifth on a command that forks and execs without pause)
.TP
.B FREEZE_PRIORITY
off: freeze does not lift its own scheduling priority
.TP
.BR NOTIFY_SOCKET ", " WATCHDOG_USEC
set by systemd for \fBfreeze guard\fR (sd_notify readiness and watchdog)
.SH FILES
.TP
.I /run/freeze
the guard's run directory: its socket, the FIFO \fIask\fR, \fIheartbeat\fR, \fIguard.log\fR, and the run locks
.TP
.I /var/tmp/freeze
the timelines, one JSON line per step of each run
.TP
.I /sys/fs/cgroup
the frozen groups (freeze\-NAME\-HASH) and freeze run's capped groups (freeze\-run\-PID\-START)
.TP
.I /lib/systemd/system/freeze\-guard.service
the guard's unit, with \fI/etc/default/freeze\-guard\fR for its arguments
.SH EXAMPLES
.nf
`)
	for _, l := range blockOf(main, "Examples:") {
		b.WriteString(roff(strings.TrimSpace(l)) + "\n")
	}
	b.WriteString(".fi\n.SH SEE ALSO\n\\fBfreeze runbook\\fR prints the incident runbook; \\fBfreeze runbook \\-\\-list\\fR names the others.\n.PP\n.BR kill (1),\n.BR cgroups (7),\n.BR bpf (2),\n.BR systemd.resource\\-control (5)\n")
	return b.String()
}

// roff escapes text for a man page: backslashes, and a line that would
// start with a control character.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			l = `\&` + l
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// blockOf is the indented lines after a heading line ("Options:") up to
// the first blank or unindented line.
func blockOf(text, heading string) []string {
	var out []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		switch {
		case l == heading:
			in = true
		case in && (strings.TrimSpace(l) == "" || !strings.HasPrefix(l, " ")):
			return out
		case in:
			out = append(out, l)
		}
	}
	return out
}

// between is text after the line from (the start when "") up to the line
// to.
func between(text, from, to string) string {
	if from != "" {
		if i := strings.Index(text, "\n"+from+"\n"); i >= 0 {
			text = text[i+len(from)+2:]
		}
	}
	if i := strings.Index(text, "\n"+to+"\n"); i >= 0 {
		return text[:i]
	}
	return text
}

// after is what follows a heading's block.
func after(text, heading string, block []string) string {
	i := strings.Index(text, "\n"+heading+"\n")
	if i < 0 {
		return ""
	}
	rest := text[i+len(heading)+2:]
	for range block {
		if j := strings.IndexByte(rest, '\n'); j >= 0 {
			rest = rest[j+1:]
		}
	}
	return rest
}

// stripBlock drops a heading and its block.
func stripBlock(s, heading string) string {
	return strings.Replace(s, heading+"\n"+strings.Join(blockOf(s, heading), "\n")+"\n", "", 1)
}

// stripUsage drops the "Usage:" heading, keeping the lines under it.
func stripUsage(s string) string {
	return strings.Replace(s, "Usage:\n", "", 1)
}

// optLine is an option's first line: a term, two or more spaces, then
// its description; an exit code's is a number and its words.
var optLine = regexp.MustCompile(`^ {2,8}(\S.*?)(?: {2,}(.*))?$`)

// writeOptions writes an indented list (options, or exit codes) as .TP
// items: a line indented as the list is a new term; a line indented
// deeper continues the description.
func writeOptions(b *strings.Builder, lines []string) {
	if len(lines) == 0 {
		return
	}
	indent := len(lines[0]) - len(strings.TrimLeft(lines[0], " "))
	for _, l := range lines {
		in := len(l) - len(strings.TrimLeft(l, " "))
		first := strings.TrimLeft(l, " ")
		// A term: an option (a dash, indented as the list or a little
		// more, where it has no short form), or an exit code.
		if in <= indent+4 && strings.HasPrefix(first, "-") || in == indent && first != "" && first[0] >= '0' && first[0] <= '9' {
			m := optLine.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			term, desc := m[1], m[2]
			if desc == "" {
				// An exit code: "0   zero remain": the number, then words.
				if f := strings.Fields(term); len(f) > 1 {
					term, desc = f[0], strings.TrimSpace(strings.TrimPrefix(term, f[0]))
				}
			}
			fmt.Fprintf(b, ".TP\n.B %s\n%s\n", roffTerm(term), roff(desc))
			continue
		}
		b.WriteString(roff(strings.TrimSpace(l)) + "\n")
	}
}

// roffTerm escapes an option's term, its dashes as minus signs.
func roffTerm(s string) string {
	return strings.ReplaceAll(roff(s), "-", `\-`)
}
