// Package say is freeze's voice: every word to the operator goes through
// an Out, on stderr, "freeze: " first, lower case, one message a line (a
// control character in a path is escaped, never printed). The command
// line and the guard (which answers its asker with the same words) share
// it, with the hints that help a mistyped command along.
package say

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"

	"freeze/internal/show"
)

// Out is where a command's words go: its report on Stdout, the rest on
// Stderr.
type Out struct {
	Stdout, Stderr io.Writer
}

// Errorf says what went wrong.
func (o Out) Errorf(format string, a ...any) {
	fmt.Fprintf(o.Stderr, "freeze: error: %s\n", show.Term(fmt.Sprintf(format, a...)))
}

// Hintf says what to do next.
func (o Out) Hintf(format string, a ...any) {
	fmt.Fprintf(o.Stderr, "freeze: hint: %s\n", show.Term(fmt.Sprintf(format, a...)))
}

// Warnf says what went wrong without stopping the command.
func (o Out) Warnf(format string, a ...any) {
	fmt.Fprintf(o.Stderr, "freeze: warning: %s\n", show.Term(fmt.Sprintf(format, a...)))
}

// Sayf says what happened.
func (o Out) Sayf(format string, a ...any) {
	fmt.Fprintf(o.Stderr, "freeze: %s\n", show.Term(fmt.Sprintf(format, a...)))
}

// FlagError says a flag parse error, with a hint where the mistake is a
// common one: a flag nearest one of flags (the command's own, as
// Options lists them), a duration without its unit (--timeout 5).
func (o Out) FlagError(prefix string, err error, flags []string) {
	msg := plainNumbers(err.Error())
	o.Errorf("%s%s", prefix, msg)
	if i := strings.Index(msg, "unknown flag: "); i >= 0 {
		bad := strings.Fields(msg[i+len("unknown flag: "):])[0]
		if near := DidYouMean(bad, flags); near != "" {
			o.Hintf("did you mean %s?", near)
		}
	}
	if strings.Contains(msg, "missing unit in duration") {
		o.Hintf("a duration needs its unit: 5s, 2m, 500ms")
	}
}

// parseErr is what strconv says of a word that is not a number, as pflag
// passes it on: "strconv.ParseInt: parsing "abc": invalid syntax".
var parseErr = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`strconv\.Parse\w+: parsing "(?:[^"\\]|\\.)*": (invalid syntax|value out of range)`)
})

// plainNumbers says a number flag's error in words: "not a whole number",
// "out of range", not Go's strconv.
func plainNumbers(msg string) string {
	return parseErr().ReplaceAllStringFunc(msg, func(m string) string {
		if strings.HasSuffix(m, "value out of range") {
			return "out of range"
		}
		return "not a whole number"
	})
}
