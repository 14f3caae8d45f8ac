package timeline

import (
	"fmt"
	"strings"
	"unicode"
)

// A timeline's strings come from the system and from whoever controls
// the chain: paths, process names, command lines, host names. Rendered,
// they must stay text. In a terminal a control character (ESC starts a
// sequence that moves the cursor, rewrites the title, or worse) is
// written as an escape; in markdown, what would end a table cell, a code
// span, or start a link or an HTML tag is escaped too.

// oneLine writes control characters (newlines included) as Go escapes:
// what freeze's progress lines do (match.OneLine), for the renderer.
func oneLine(s string) string {
	if strings.IndexFunc(s, isControl) < 0 {
		return s
	}
	q := fmt.Sprintf("%q", s)
	return q[1 : len(q)-1]
}

func isControl(r rune) bool { return unicode.IsControl(r) || r == unicode.ReplacementChar }

var mdEscaper = strings.NewReplacer(`\`, `\\`, "|", `\|`, "`", "\\`", "<", "&lt;", ">", "&gt;", "[", `\[`, "]", `\]`)

// mdText is s as markdown text on one line: no table cell, code span,
// link or HTML tag can be opened or closed by it.
func mdText(s string) string { return mdEscaper.Replace(oneLine(s)) }

// mdCode is s as a markdown code span: fenced by one more backtick than
// its longest run of backticks, so the span cannot be closed from inside.
func mdCode(s string) string {
	s = oneLine(s)
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
