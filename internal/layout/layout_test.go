package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// pkg is one of freeze's packages as go list gives it.
type pkg struct {
	dir     string
	files   []string
	imports []string // freeze's own only
}

// list lists freeze's packages linked into cmd/freeze.
func list(t *testing.T) map[string]pkg {
	t.Helper()
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goTool, "list", "-deps", "-f",
		`{{if .Module}}{{if eq .Module.Path "freeze"}}{{.ImportPath}}|{{.Dir}}|{{join .GoFiles ","}}|{{join .Imports ","}}{{end}}{{end}}`, "freeze/cmd/freeze").Output()
	if err != nil {
		t.Fatalf("go list -deps freeze/cmd/freeze: %v", err)
	}
	pkgs := map[string]pkg{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 4 {
			continue
		}
		p := pkg{dir: f[1], files: strings.Split(f[2], ",")}
		for _, imp := range strings.Split(f[3], ",") {
			if strings.HasPrefix(imp, "freeze/") {
				p.imports = append(p.imports, imp)
			}
		}
		pkgs[f[0]] = p
	}
	if len(pkgs) < 20 {
		t.Fatalf("listed %d packages of freeze: the listing is wrong, the check proves nothing", len(pkgs))
	}
	return pkgs
}

// longest is the longest chain of imports from top.
func longest(pkgs map[string]pkg, top string) []string {
	memo := map[string][]string{}
	var walk func(string) []string
	walk = func(p string) []string {
		if c, ok := memo[p]; ok {
			return c
		}
		var best []string
		for _, q := range pkgs[p].imports {
			if c := walk(q); len(c) > len(best) {
				best = c
			}
		}
		memo[p] = append([]string{p}, best...)
		return memo[p]
	}
	return walk(top)
}

func TestAtMostNineLayers(t *testing.T) {
	chain := longest(list(t), "freeze/cmd/freeze")
	t.Logf("%d layers: %s", len(chain), strings.Join(chain, " -> "))
	if len(chain) > 9 {
		t.Errorf("%d layers, at most 9: %s", len(chain), strings.Join(chain, " -> "))
	}
}

func TestNoDoorBack(t *testing.T) {
	pkgs := list(t)
	for _, rule := range []struct{ from, to, why string }{
		{"say", "stop", "say is freeze's voice: a run's output is order.Output"},
		{"say", "timeline", "say is freeze's voice: exit codes are the caller's"},
		{"guard", "order", "cmd/freeze gives the guard its runner (order.Asked)"},
		{"drill", "guard", "cmd/freeze gives the drill its asker (the guard's client)"},
		{"stop", "gate", "the gate is behind freeze: Seal before the first scan, freeze.Open for the set"},
		{"order", "gate", "a guard's spare is a freeze.Spare"},
		{"cmd/freeze", "freeze", "main parses and says: the method is drill's or order's words, the set is stop's"},
		{"cmd/freeze", "proc", "main parses and says: census.Here reads this machine's /proc"},
		{"cmd/freeze", "timeline", "main parses and says: exit codes are stop's, the record is contain's, stop's or postmortem's"},
	} {
		from, to := "freeze/internal/"+rule.from, "freeze/internal/"+rule.to
		if strings.HasPrefix(rule.from, "cmd/") {
			from = "freeze/" + rule.from
		}
		if _, ok := pkgs[from]; !ok {
			t.Errorf("%s is not linked into freeze: update this rule", from)
			continue
		}
		for _, imp := range pkgs[from].imports {
			if imp == to {
				t.Errorf("%s imports %s: %s", rule.from, rule.to, rule.why)
			}
		}
	}
}

// TestSignalsAreCaughtInCmd: signal.Notify is called under cmd/ only
// (but priority's SIGXCPU): each run takes the command's context.
func TestSignalsAreCaughtInCmd(t *testing.T) {
	calls := 0
	for path, p := range list(t) {
		for _, name := range p.files {
			file := filepath.Join(p.dir, name)
			f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "Notify" {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "signal" {
					return true
				}
				calls++
				if strings.HasPrefix(path, "freeze/cmd/") || path == "freeze/internal/priority" {
					return true
				}
				t.Errorf("%s calls signal.Notify: take the command's context instead (package interrupt)", file)
				return true
			})
		}
	}
	if calls == 0 {
		t.Fatal("found no signal.Notify at all, not even cmd/freeze's: the check proves nothing")
	}
}
