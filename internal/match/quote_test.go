package match

import (
	"os/exec"
	"strings"
	"testing"
)

// What ShellQuote prints, pasted into bash, is the string itself, and it
// is always one line.
func TestShellQuoteRoundTripsThroughBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to paste into")
	}
	for _, s := range []string{
		"/tmp/plain/tool",
		"/tmp/with space/tool",
		"/tmp/it's/tool",
		"/tmp/new\nline/tool",
		"/tmp/tab\tand\\backslash/x",
		"/tmp/bell\a'quote/x",
		"$(touch /tmp/pwned)",
		"",
	} {
		q := ShellQuote(s)
		if strings.ContainsAny(q, "\n\r") {
			t.Errorf("ShellQuote(%q) = %q spans lines", s, q)
		}
		out, err := exec.Command(bash, "-c", "printf %s "+q).Output()
		if err != nil {
			t.Errorf("bash -c 'printf %%s %s': %v", q, err)
			continue
		}
		if string(out) != s {
			t.Errorf("ShellQuote(%q) = %s, which bash reads as %q", s, q, out)
		}
	}
}

func TestOneLine(t *testing.T) {
	for in, want := range map[string]string{
		"plain path":  "plain path",
		"a\nb":        `a\nb`,
		"tab\there":   `tab\there`,
		"é unicode":   "é unicode",
		"esc\x1b[31m": `esc\x1b[31m`,
	} {
		if got := OneLine(in); got != want {
			t.Errorf("OneLine(%q) = %q, want %q", in, got, want)
		}
	}
}
