package guard

import (
	"errors"
	"strings"
)

// MaxLine is the longest request the guard reads; a longer line is
// refused whole.
const MaxLine = 64 << 10

// Errors of Split: each refuses the whole line.
var (
	ErrQuote = errors.New("unterminated quote")
	ErrNUL   = errors.New("a NUL byte in the request")
	ErrLong  = errors.New("request longer than 64 KiB")
)

// Split splits a request line into words as a POSIX shell would split
// it, and does nothing else: no expansion, no globbing, nothing is ever
// run. Whitespace separates words; single quotes keep everything up to
// the next single quote; double quotes keep everything but a backslash
// before one of " \ $ ` (which is dropped); outside quotes a backslash
// keeps the next character. So --arg ':(){ :|:& };:' arrives as one
// word.
func Split(line string) ([]string, error) {
	if len(line) > MaxLine {
		return nil, ErrLong
	}
	if strings.IndexByte(line, 0) >= 0 {
		return nil, ErrNUL
	}
	var (
		words []string
		cur   strings.Builder
		in    bool // inside a word (an empty quoted word counts)
	)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case c == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				return nil, ErrQuote
			}
			cur.WriteString(line[i+1 : i+1+end])
			i += end + 1
			in = true
		case c == '"':
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' && i+1 < len(line) && strings.IndexByte("\"\\$`", line[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(line[i])
			}
			if i >= len(line) {
				return nil, ErrQuote
			}
			in = true
		case c == '\\':
			if i+1 < len(line) {
				i++
				if line[i] != '\n' { // a backslash-newline joins lines
					cur.WriteByte(line[i])
				}
			}
			in = true
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}
