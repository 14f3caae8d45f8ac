// Package show is the one escaper: every string that a user controls (a
// path, an argv word, a comm, a container's path, a label, a host name)
// passes one function of this package, the one for its channel, before
// freeze shows it: a terminal line (Term), a command line to paste
// (Shell), markdown (Markdown, MarkdownCode), a GitHub workflow command
// (Workflow, WorkflowProperty), XML and SVG text (XML).
//
// Every function here first makes the string one line of printable text
// (Term): C0 and C1 controls, DEL, the Unicode line and paragraph
// separators, the bidirectional overrides and bytes that are not UTF-8
// are written as escapes. Then it escapes what the channel itself gives
// meaning to. Nothing here ever passes a raw control byte on: ESC and BEL
// from a chain's path set the title of root's terminal (the third audit's
// S4), and the same bytes went into a CI log raw (S7).
//
// It must never drop a character silently: two different strings show
// differently, so what an operator reads names the one file.
package show

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// risky says whether r may not be shown as it is: a control (C0, DEL,
// C1), a line or paragraph separator, or a bidirectional control, which
// can make a line read as another (CVE-2021-42574).
func risky(r rune) bool {
	return unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r) || r == '\ufeff'
}

// needs says whether s holds anything Term escapes.
func needs(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || risky(r) {
			return true
		}
		i += n
	}
	return false
}

// Term is s as one line of text for a terminal or a log: when s holds a
// risky character, each is written as Go writes it in a quoted string
// (\n, \x1b, \u009b, \u202e), a byte that is not UTF-8 as \xNN, and a
// backslash as \\ (so the escaped form reads back to one string); else s
// as it is.
func Term(s string) string {
	if !needs(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && risky(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case risky(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// Terms is Term of each word, joined by spaces.
func Terms(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		out[i] = Term(w)
	}
	return strings.Join(out, " ")
}

// Clip shortens s to n runes, marking the cut.
func Clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// Dash is s, or "-" for an empty value: how a table or a line shows a
// value the record does not have.
func Dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
