package match

import (
	"fmt"
	"strings"
)

// ShellQuote quotes s for a command line an operator can paste: plain
// when it holds only safe characters, in single quotes otherwise, and in
// bash's $'...' form when it holds a control character (a newline in a
// path must not break the printed command, or the line it is on).
func ShellQuote(s string) string {
	safe := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+=:,@", r)
	}
	if s != "" && strings.IndexFunc(s, func(r rune) bool { return !safe(r) }) < 0 {
		return s
	}
	if strings.IndexFunc(s, isControl) < 0 {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' || c == '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// OneLine makes s safe to print on one line: control characters are
// escaped as Go would quote them, the rest is left as it is.
func OneLine(s string) string {
	if strings.IndexFunc(s, isControl) < 0 {
		return s
	}
	q := fmt.Sprintf("%q", s)
	return q[1 : len(q)-1]
}

// ShellJoin quotes each word and joins them: a command line that pastes
// back into a shell as the same words.
func ShellJoin(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = ShellQuote(w)
	}
	return strings.Join(q, " ")
}

// Count says n of a thing in words with the right plural: "1 process",
// "2 processes", "1 child", "3 children".
func Count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
