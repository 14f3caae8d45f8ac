package main

import (
	"os"
	"os/exec"
	"strings"

	"freeze/internal/match"
)

// didYouMean is the candidate nearest to word, within two edits (or
// one a prefix of the other), or "".
func didYouMean(word string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		if c == "" || c == word {
			continue
		}
		d := editDistance(word, c)
		if len(word) >= 3 && strings.HasPrefix(c, word) {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is Levenshtein's distance between a and b.
func editDistance(a, b string) int {
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

// flagHint suggests the flag nearest to an unknown one in pflag's error
// ("unknown flag: --pathh"), among cmd's own.
func flagHint(o out, cmd string, err error) {
	msg := err.Error()
	i := strings.Index(msg, "unknown flag: ")
	if i < 0 {
		return
	}
	bad := strings.Fields(msg[i+len("unknown flag: "):])[0]
	if near := didYouMean(bad, flagsOf(cmd)); near != "" {
		o.hintf("did you mean %s?", near)
	}
}

// pathHint is the example of a full path for a relative --path p: the
// file where p names one from here, else the one on PATH, else none (a
// path that does not exist helps nobody).
func pathHint(o out, flag, p string) {
	if abs := mustAbs(p); fileExists(abs) {
		o.hintf("give the full path, for example %s %s", flag, match.ShellQuote(abs))
		return
	}
	if !strings.Contains(p, "/") {
		if found, err := exec.LookPath(p); err == nil {
			o.hintf("no %s runs now; the %s on PATH is %s: %s %s", p, p, found, flag, match.ShellQuote(mustAbs(found)))
			return
		}
	}
	o.hintf("no file %s here%s, and no process runs one: 'freeze census' shows what runs most, with the command", p, map[bool]string{true: " or on PATH", false: ""}[!strings.Contains(p, "/")])
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// self is how to run this freeze again, for the commands a run prints:
// "freeze" where that is the file on PATH, "go run ./cmd/freeze" after
// 'go run' (whose binary is deleted when it exits), else its full path.
func self() string {
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
	return match.ShellQuote(exe)
}
