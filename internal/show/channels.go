package show

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Shell quotes s for a command line an operator can paste: plain when it
// holds only safe characters, in single quotes otherwise, and in bash's
// $'...' form when it holds a risky character or a byte that is not
// UTF-8, each written as \xNN (a newline in a path must not break the
// printed command, or the line it is on; ESC must not reach the
// terminal). Pasted, it is the same bytes.
func Shell(s string) string {
	safe := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+=:,@", r)
	}
	if s != "" && strings.IndexFunc(s, func(r rune) bool { return !safe(r) }) < 0 {
		return s
	}
	if !needs(s) {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\\' || r == '\'':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == utf8.RuneError && n == 1 || risky(r):
			for j := i; j < i+n; j++ {
				fmt.Fprintf(&b, `\x%02x`, s[j])
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	b.WriteByte('\'')
	return b.String()
}

// ShellJoin quotes each word (Shell) and joins them: a command line that
// pastes back into a shell as the same words.
func ShellJoin(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = Shell(w)
	}
	return strings.Join(q, " ")
}

var mdEscaper = strings.NewReplacer(`\`, `\\`, "|", `\|`, "`", "\\`", "<", "&lt;", ">", "&gt;", "[", `\[`, "]", `\]`)

// Markdown is s as markdown text on one line (a table's cell included):
// no cell, code span, link or HTML tag can be opened or closed
// by it.
func Markdown(s string) string { return mdEscaper.Replace(Term(s)) }

// MarkdownCode is s as a markdown code span: fenced by one more backtick
// than its longest run of backticks, so the span cannot be closed from
// inside. A '|' is escaped too: in a table, GitHub splits cells on it
// even inside a code span.
func MarkdownCode(s string) string {
	s = strings.ReplaceAll(Term(s), "|", `\|`)
	run, longest := 0, 0
	for _, c := range s {
		if c == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	if longest == 0 {
		return "`" + s + "`"
	}
	fence := strings.Repeat("`", longest+1)
	return fence + " " + s + " " + fence // the spaces are markdown's: stripped
}

// Workflow is s as a GitHub workflow command's message (what follows
// '::'), escaped as the runner's toolkit does ('%', CR, LF), after Term:
// no raw control byte reaches the log, and no line the message holds can
// start a command of its own.
func Workflow(s string) string {
	return strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A").Replace(Term(s))
}

// WorkflowProperty is s as a workflow command's property value (title=,
// file=): Workflow, and ':' and ',' too, which would end the value.
func WorkflowProperty(s string) string {
	return strings.NewReplacer(":", "%3A", ",", "%2C").Replace(Workflow(s))
}

var xmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")

// XML is s as XML character data or an attribute's value (JUnit, SVG):
// Term first, so a control character that XML 1.0 cannot hold shows as
// its escape instead of vanishing, then the five markup characters.
// Where encoding/xml marshals the value, pass Term(s) instead: it does
// the markup itself.
func XML(s string) string { return xmlEscaper.Replace(Term(s)) }
