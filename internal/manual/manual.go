// Package manual is freeze's manual as other programs read it: the man
// page and the shell completions, generated from the same usage texts
// --help prints, so that none of them can say something the help does
// not. The command line gives the texts (a Book); nothing here runs a
// command.
package manual

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"freeze/internal/say"
)

// Book is what the manual is made of.
type Book struct {
	// Commands are freeze's subcommands in the order the help lists
	// them, "" being freeze itself.
	Commands []string
	// Usage is a command's usage text, "" for one with none of its own.
	Usage    func(cmd string) string
	Runbooks []string // the names 'freeze runbook NAME' takes
	Version  string
}

func (bk Book) usage(cmd string) string { return bk.Usage(cmd) }

// flags lists a command's options, as its usage defines them.
func (bk Book) flags(cmd string) []string { return say.Options(bk.Usage(cmd)) }

// helpable are the commands with a usage text of their own.
func (bk Book) helpable() []string {
	var out []string
	for _, c := range bk.Commands[1:] {
		if bk.Usage(c) != "" {
			out = append(out, c)
		}
	}
	return out
}

// Man is freeze(1): the standard sections (NAME, SYNOPSIS,
// DESCRIPTION, OPTIONS, COMMANDS, EXIT STATUS, ENVIRONMENT, FILES,
// EXAMPLES, SEE ALSO), made from the same usage texts --help prints, so
// that the two never disagree.
func (bk Book) Man() string {
	var b strings.Builder
	main := bk.usage("")
	fmt.Fprintf(&b, ".TH FREEZE 1 %q %q \"freeze manual\"\n", manDate(), "freeze "+bk.Version)
	b.WriteString(".SH NAME\nfreeze \\- stop a runaway process chain in the order that works; run commands that cannot leave one\n")
	b.WriteString(".SH SYNOPSIS\n.nf\n")
	for _, l := range blockOf(main, "Usage:") {
		b.WriteString(roff(strings.TrimSpace(l)) + "\n")
	}
	b.WriteString(".fi\n.SH DESCRIPTION\n")
	b.WriteString(".nf\n" + roff(strings.TrimSpace(stripBlock(between(main, "", "Options:"), "Usage:"))) + "\n.fi\n")
	b.WriteString(".SH OPTIONS\n")
	writeOptions(&b, blockOf(main, "Options:"))
	bk.writeCommands(&b)
	b.WriteString(".SH EXIT STATUS\n")
	writeOptions(&b, blockOf(main, "Exit codes:"))
	b.WriteString(manFiles)
	for _, l := range blockOf(main, "Examples:") {
		b.WriteString(roff(strings.TrimSpace(l)) + "\n")
	}
	b.WriteString(".fi\n.SH SEE ALSO\n\\fBfreeze runbook\\fR prints the incident runbook; \\fBfreeze runbook \\-\\-list\\fR names the others.\n.PP\n.BR kill (1),\n.BR cgroups (7),\n.BR bpf (2),\n.BR systemd.resource\\-control (5)\n")
	return b.String()
}

// writeCommands writes COMMANDS: each subcommand's usage, its options
// as items.
func (bk Book) writeCommands(b *strings.Builder) {
	b.WriteString(".SH COMMANDS\n")
	for _, c := range bk.Commands[1:] {
		text := bk.usage(c)
		if text == "" {
			continue
		}
		fmt.Fprintf(b, ".SS freeze %s\n", c)
		rest := text
		if opts := blockOf(text, "Options:"); len(opts) > 0 {
			rest = between(text, "", "Options:") + "\n" + after(text, "Options:", opts)
			b.WriteString(".nf\n" + roff(strings.TrimSpace(stripUsage(between(text, "", "Options:")))) + "\n.fi\n")
			b.WriteString(".PP\nOptions:\n")
			writeOptions(b, opts)
			if tail := strings.TrimSpace(after(text, "Options:", opts)); tail != "" {
				b.WriteString(".PP\n.nf\n" + roff(tail) + "\n.fi\n")
			}
			continue
		}
		b.WriteString(".nf\n" + roff(strings.TrimSpace(stripUsage(rest))) + "\n.fi\n")
	}
}

// manFiles is the man page from its exit status's note to its examples:
// ENVIRONMENT and FILES.
const manFiles = `.PP
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
`

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
var optLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^ {2,8}(\S.*?)(?: {2,}(.*))?$`) })

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
			m := optLine().FindStringSubmatch(l)
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

// Bash completes subcommands in the first word, then the
// options of the subcommand given (freeze's own when none is), and
// files for an option's value.
func (bk Book) Bash() string {
	var cases, formats strings.Builder
	for _, c := range bk.Commands[1:] {
		fmt.Fprintf(&cases, "    %s) opts=%q ;;\n", c, strings.Join(bk.flags(c), " "))
		fmt.Fprintf(&formats, "        %s) vals=%q ;;\n", c, strings.Join(bk.formatsOf(c), " "))
	}
	subs := strings.Join(bk.Commands[1:], " ")
	return `# bash completion for freeze, generated by 'freeze completion bash'
_freeze() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} sub="" opts vals w i
  for w in "${COMP_WORDS[@]:1:COMP_CWORD-1}"; do
    case $w in -*) ;; *) sub=$w; break ;; esac
  done
  # freeze run -- CMD: a command, then its own arguments (files).
  if [[ $sub == run || $sub == node ]]; then
    for ((i = 1; i < COMP_CWORD; i++)); do
      if [[ ${COMP_WORDS[i]} == -- ]]; then
        if ((i == COMP_CWORD - 1)) && [[ $sub == run ]]; then
          COMPREPLY=($(compgen -c -- "$cur" | sort -u))
        else
          COMPREPLY=($(compgen -f -- "$cur"))
        fi
        return
      fi
    done
  fi
  # A flag's value.
  case $prev in
    --method|-m) COMPREPLY=($(compgen -W "` + strings.Join(methodWords, " ") + `" -- "$cur")); return ;;
    --shape) COMPREPLY=($(compgen -W "tree line churn" -- "$cur")); return ;;
    --guard) COMPREPLY=($(compgen -W "fifo socket" -- "$cur")); return ;;
    --format|-f)
      case $sub in
` + formats.String() + `        *) vals=` + fmt.Sprintf("%q", strings.Join(bk.formatsOf(""), " ")) + ` ;;
      esac
      COMPREPLY=($(compgen -W "$vals" -- "$cur")); return ;;
    --path|-p|--under|-u|--timeline|-t|--btf|--run-dir|--disposable|--metrics-file|--root|--fleet|--auto-under)
      COMPREPLY=($(compgen -f -- "$cur")); return ;;
  esac
  case $sub in
` + cases.String() + `    *) opts=` + fmt.Sprintf("%q", strings.Join(bk.flags(""), " ")) + ` ;;
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  elif [[ -z $sub && $COMP_CWORD == 1 ]]; then
    COMPREPLY=($(compgen -W "` + subs + ` $opts" -- "$cur"))
  elif [[ $sub == runbook ]]; then
    COMPREPLY=($(compgen -W "` + strings.Join(bk.Runbooks, " ") + `" -- "$cur"))
  elif [[ $sub == completion ]]; then
    COMPREPLY=($(compgen -W "bash zsh fish" -- "$cur"))
  elif [[ $sub == help ]]; then
    COMPREPLY=($(compgen -W "` + strings.Join(bk.helpable(), " ") + `" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}
complete -F _freeze freeze
`
}

// methodWords are --method's values.
var methodWords = []string{"auto", "bpf", "cgroup2", "cgroup1", "sigstop", "none"}

// formatRE finds a command's --format values where its usage lists them
// ("--format text|json|prometheus").
var formatRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`--format ([a-z]+(?:\|[a-z]+)+)`) })

// formatsOf lists the values --format takes for cmd, from its usage.
func (bk Book) formatsOf(cmd string) []string {
	if cmd == "" {
		return []string{"text", "json"}
	}
	seen := map[string]bool{}
	var out []string
	for _, m := range formatRE().FindAllStringSubmatch(bk.usage(cmd), -1) {
		for _, f := range strings.Split(m[1], "|") {
			if !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	return out
}

// Fish completes subcommands, each one's options, and the values of
// --method, --format and --shape.
func (bk Book) Fish() string {
	var b strings.Builder
	b.WriteString("# fish completion for freeze, generated by 'freeze completion fish'\n")
	fmt.Fprintf(&b, "complete -c freeze -n __fish_use_subcommand -a %q\n", strings.Join(bk.Commands[1:], " "))
	for _, c := range bk.Commands {
		cond := "__fish_use_subcommand"
		if c != "" {
			cond = "__fish_seen_subcommand_from " + c
		}
		for _, f := range bk.flags(c) {
			if !strings.HasPrefix(f, "--") {
				continue
			}
			vals := ""
			switch f {
			case "--method":
				vals = strings.Join(methodWords, " ")
			case "--format":
				vals = strings.Join(bk.formatsOf(c), " ")
			case "--shape":
				vals = "tree line churn"
			}
			if vals != "" {
				fmt.Fprintf(&b, "complete -c freeze -n %q -l %s -xa %q\n", cond, strings.TrimPrefix(f, "--"), vals)
				continue
			}
			fmt.Fprintf(&b, "complete -c freeze -n %q -l %s\n", cond, strings.TrimPrefix(f, "--"))
		}
	}
	fmt.Fprintf(&b, "complete -c freeze -n %q -xa %q\n", "__fish_seen_subcommand_from runbook", strings.Join(bk.Runbooks, " "))
	fmt.Fprintf(&b, "complete -c freeze -n %q -xa %q\n", "__fish_seen_subcommand_from completion", "bash zsh fish")
	return b.String()
}

// manDate is SOURCE_DATE_EPOCH's day where a reproducible build sets
// it, else today.
func manDate() string {
	t := time.Now()
	if s, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64); err == nil {
		t = time.Unix(s, 0)
	}
	return t.UTC().Format("2006-01-02")
}
