package guard

import (
	"slices"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, c := range []struct {
		line string
		want []string
		err  error
	}{
		{"--path /abs/path", []string{"--path", "/abs/path"}, nil},
		{"  --path\t/a  ", []string{"--path", "/a"}, nil},
		{`--arg ':(){ :|:& };:'`, []string{"--arg", ":(){ :|:& };:"}, nil},
		{`--path "/with space/bin"`, []string{"--path", "/with space/bin"}, nil},
		{`--arg "say \"hi\" \$HOME \x"`, []string{"--arg", `say "hi" $HOME \x`}, nil},
		{`--path /a\ b`, []string{"--path", "/a b"}, nil},
		{`--arg '' x`, []string{"--arg", "", "x"}, nil},
		{`a'b'"c"d`, []string{"abcd"}, nil},
		{`$(rm -rf /) ; echo`, []string{"$(rm", "-rf", "/)", ";", "echo"}, nil},
		{"", nil, nil},
		{"--arg 'open", nil, ErrQuote},
		{`--arg "open`, nil, ErrQuote},
		{"--path /a\x00b", nil, ErrNUL},
		{strings.Repeat("a", MaxLine+1), nil, ErrLong},
	} {
		got, err := Split(c.line)
		if err != c.err || !slices.Equal(got, c.want) {
			t.Errorf("Split(%.40q) = %q, %v; want %q, %v", c.line, got, err, c.want, c.err)
		}
	}
}

// Split never panics, and what it returns joins back, requoted, to the
// same words.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{"--path /a", `--arg ':(){ :|:& };:'`, `"a\"b" 'c' d\ e`, "\x00", "'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		words, err := Split(line)
		if err != nil {
			return
		}
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, "'"+strings.ReplaceAll(w, "'", `'\''`)+"'")
		}
		again, err := Split(strings.Join(quoted, " "))
		if err != nil || !slices.Equal(again, words) {
			t.Fatalf("%q: words %q requoted split to %q (%v)", line, words, again, err)
		}
	})
}
