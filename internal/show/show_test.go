package show

import (
	"os/exec"
	"strings"
	"testing"
	"unicode/utf8"
)

// hostile holds what a chain's owner can put in a path, an argv word or
// a comm: C0 (ESC, BEL, NUL-free), C1 (CSI as UTF-8 and as a raw byte),
// a line separator, a right-to-left override, and bytes that are not
// UTF-8.
var hostile = []string{
	"/tmp/plain/tool",
	"/tmp/with space/tool",
	"/tmp/it's/tool",
	"/tmp/new\nline/tool",
	"/tmp/tab\tand\\backslash/x",
	"/tmp/bell\a'quote/x",
	"$(touch /tmp/pwned)",
	"title\x1b]0;pwned\x07end",
	"csi\u009b31mred",
	"raw\x9b31m\xff\xfe",
	"line\u2028sep",
	"rtl\u202egnp.exe",
	"",
}

// What Shell prints, pasted into bash, is the string itself, and it is
// always one line of printable text.
func TestShellRoundTripsThroughBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to paste into")
	}
	for _, s := range hostile {
		q := Shell(s)
		if bad := rawControl(q); bad != "" {
			t.Errorf("Shell(%q) = %q holds %s", s, q, bad)
		}
		out, err := exec.Command(bash, "-c", "printf %s "+q).Output()
		if err != nil {
			t.Errorf("bash -c 'printf %%s %s': %v", q, err)
			continue
		}
		if string(out) != s {
			t.Errorf("Shell(%q) = %s, which bash reads as %q", s, q, out)
		}
	}
}

func TestTerm(t *testing.T) {
	for in, want := range map[string]string{
		"plain path":        "plain path",
		`back\slash`:        `back\slash`,
		"a\nb":              `a\nb`,
		"tab\there":         `tab\there`,
		"é unicode":         "é unicode",
		"esc\x1b[31m":       `esc\x1b[31m`,
		"esc\x1b and \\":    `esc\x1b and \\`,
		"csi\u009bx":        `csi\u009bx`,
		"raw\x9bx":          `raw\x9bx`,
		"rtl\u202eexe":      `rtl\u202eexe`,
		"nel\u0085x\u2028y": `nel\u0085x\u2028y`,
		"del\x7f":           `del\x7f`,
		"bom\ufeffx":        `bom\ufeffx`,
		"日本語/ok":            "日本語/ok",
	} {
		if got := Term(in); got != want {
			t.Errorf("Term(%q) = %q, want %q", in, got, want)
		}
	}
}

// Every channel, fed every hostile string, gives one line of valid UTF-8
// with no raw control character, and nothing that opens structure of
// the channel's own.
func TestEveryChannelIsOneLineOfText(t *testing.T) {
	channels := map[string]func(string) string{
		"Term": Term, "Shell": Shell, "Markdown": Markdown, "MarkdownCode": MarkdownCode,
		"Workflow": Workflow, "WorkflowProperty": WorkflowProperty, "XML": XML,
	}
	for name, f := range channels {
		for _, s := range append(hostile, "a|b`c<d>[e](f)", "::error::x", "50%0Aforged", "k:v,w") {
			got := f(s)
			if bad := rawControl(got); bad != "" {
				t.Errorf("%s(%q) = %q holds %s", name, s, got, bad)
			}
			switch name {
			case "Markdown":
				if strings.ContainsAny(strings.NewReplacer(`\|`, "", "\\`", "", `\[`, "", `\]`, "").Replace(got), "|`[]<>") {
					t.Errorf("Markdown(%q) = %q leaves markdown's structure unescaped", s, got)
				}
			case "Workflow", "WorkflowProperty":
				if strings.Contains(strings.ReplaceAll(got, "%25", ""), "%0A") {
					t.Errorf("%s(%q) = %q forges a newline the runner decodes", name, s, got)
				}
				if name == "WorkflowProperty" && strings.ContainsAny(got, ":,") {
					t.Errorf("WorkflowProperty(%q) = %q ends the property", s, got)
				}
			case "XML":
				if strings.ContainsAny(got, `<>"'`) || strings.Contains(strings.NewReplacer("&amp;", "", "&lt;", "", "&gt;", "", "&quot;", "", "&apos;", "").Replace(got), "&") {
					t.Errorf("XML(%q) = %q leaves markup unescaped", s, got)
				}
			}
		}
	}
}

// rawControl names the first character of s no channel may show raw, or "".
func rawControl(s string) string {
	if !utf8.ValidString(s) {
		return "bytes that are not UTF-8"
	}
	for _, r := range s {
		if risky(r) {
			return Term(string(r)) + " raw"
		}
	}
	return ""
}
