package say

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/pflag"

	"freeze/internal/show"
)

// DidYouMean is the candidate nearest to word, within two edits (or
// one a prefix of the other), or "".
func DidYouMean(word string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if c == "" || c == word {
			continue
		}
		d := EditDistance(word, c)
		if len(word) >= 3 && strings.HasPrefix(c, word) {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// EditDistance is Levenshtein's distance between a and b.
func EditDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// optionRE finds an option where an "Options:" list defines it: indented,
// an optional short form, then the long one.
var optionRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?m)^ {4,8}(?:-([a-zA-Z]), )?--([a-z][a-z0-9-]*)`) })

// Options lists the long options (with "--") and short ones that a usage
// text's "Options:" list defines.
func Options(usage string) []string {
	var out []string
	for _, m := range optionRE().FindAllStringSubmatch(usage, -1) {
		out = append(out, "--"+m[2])
		if m[1] != "" {
			out = append(out, "-"+m[1])
		}
	}
	return out
}

// PathHint is the example of a full path for a relative flag value p:
// the file where p names one from here, else the one on PATH, else none
// (a path that does not exist helps nobody).
func (o Out) PathHint(flag, p string) {
	if abs := MustAbs(p); isFile(abs) {
		o.Hintf("give the full path, for example %s %s", flag, show.Shell(abs))
		return
	}
	if !strings.Contains(p, "/") {
		if found, err := exec.LookPath(p); err == nil {
			o.Hintf("no %s runs now; the %s on PATH is %s: %s %s", p, p, found, flag, show.Shell(MustAbs(found)))
			return
		}
	}
	o.Hintf("no file %s here%s, and no process runs one: 'freeze census' shows what runs most, with the command", p, map[bool]string{true: " or on PATH", false: ""}[!strings.Contains(p, "/")])
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// MustAbs is p made absolute from here, or p where it cannot be.
func MustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

// Self is how to run this freeze again, for the commands a run prints:
// "freeze" where that is the file on PATH, "go run ./cmd/freeze" after
// 'go run' (whose binary is deleted when it exits), else its full path.
func Self() string {
	exe, err := os.Executable()
	if err != nil {
		return "freeze"
	}
	if strings.Contains(exe, "/go-build") && strings.HasSuffix(exe, "/exe/freeze") {
		return "go run ./cmd/freeze"
	}
	if exe == "/usr/lib/freeze/freeze" {
		return "freeze" // the package's, run through its first stage, /usr/bin/freeze
	}
	if onPath, err := exec.LookPath("freeze"); err == nil {
		a, aerr := os.Stat(onPath)
		b, berr := os.Stat(exe)
		if aerr == nil && berr == nil && os.SameFile(a, b) {
			return "freeze"
		}
	}
	return show.Shell(exe)
}

// Format is the one output flag every command that prints a report
// takes: --format (-f) with the command's formats, the first its
// default, and --json as the alias of --format json.
type Format struct {
	cmd     string // "census: ", or "" for freeze itself
	value   string
	json    bool
	allowed []string
}

// AddFormat adds --format and --json to fl.
func AddFormat(fl *pflag.FlagSet, cmd string, allowed ...string) *Format {
	f := &Format{cmd: cmd, allowed: allowed}
	fl.StringVarP(&f.value, "format", "f", allowed[0], "")
	fl.BoolVar(&f.json, "json", false, "")
	return f
}

// Resolve checks the flag after parsing: the format it names and true,
// or false after saying what is wrong (a usage error).
func (f *Format) Resolve(o Out) (string, bool) {
	if f.json {
		if f.value != f.allowed[0] && f.value != "json" {
			o.Errorf("%s--json and --format %s ask for two formats", f.cmd, f.value)
			o.Hintf("--json is --format json: keep one of them")
			return "", false
		}
		f.value = "json"
	}
	if !slices.Contains(f.allowed, f.value) {
		o.Errorf("%sunknown --format %q", f.cmd, f.value)
		o.Hintf("use %s", strings.Join(f.allowed, ", "))
		return "", false
	}
	return f.value, true
}
