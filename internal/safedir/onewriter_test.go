package safedir

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

// writeFlags are the open flags that write: spelled outside this
// package, except as an argument of one of its functions, they are a
// writer of their own.
var writeFlags = map[string]bool{
	"O_WRONLY": true, "O_RDWR": true, "O_CREATE": true, "O_CREAT": true, "O_APPEND": true, "O_TRUNC": true,
}

// writeCalls write a file without a flag to spell.
var writeCalls = map[string]bool{"os.WriteFile": true, "os.Create": true, "os.CreateTemp": true, "ioutil.WriteFile": true, "ioutil.TempFile": true}

// TestOneWriter walks the code linked into freeze (go list -deps of
// cmd/freeze; the test-only helpers are not in it) and fails on any
// os.WriteFile, os.Create or write flag outside package safedir, unless
// the flag is an argument of a safedir call: each writer added beside
// the one writer brought the audits' classes back (the third audit's S1
// was a fourth O_APPEND|O_CREATE of its own).
func TestOneWriter(t *testing.T) {
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goTool, "list", "-deps", "-f", `{{if .Module}}{{if eq .Module.Path "freeze"}}{{.ImportPath}} {{.Dir}} {{join .GoFiles ","}}{{end}}{{end}}`, "freeze/cmd/freeze").Output()
	if err != nil {
		t.Fatalf("go list -deps freeze/cmd/freeze: %v", err)
	}
	files := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] == "freeze/internal/safedir" {
			continue
		}
		for _, name := range strings.Split(f[2], ",") {
			path := filepath.Join(f[1], name)
			for _, bad := range writersIn(t, path) {
				t.Errorf("%s: %s: write through package safedir (Open, WriteFile, Append, CreateNew, Knob, OpenFIFO)", bad.pos, bad.what)
			}
			files++
		}
	}
	if files < 100 {
		t.Fatalf("walked %d files of freeze: the listing is wrong, the check proves nothing", files)
	}
}

type finding struct {
	pos  token.Position
	what string
}

// writersIn parses one file and lists its writes outside the writer.
func writersIn(t *testing.T, path string) []finding {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []finding
	var inSafedir []ast.Node // the safedir calls being walked
	ast.Inspect(f, func(n ast.Node) bool {
		if n == nil {
			return true
		}
		for len(inSafedir) > 0 && !(inSafedir[len(inSafedir)-1].Pos() <= n.Pos() && n.End() <= inSafedir[len(inSafedir)-1].End()) {
			inSafedir = inSafedir[:len(inSafedir)-1]
		}
		switch n := n.(type) {
		case *ast.CallExpr:
			if name := selName(n.Fun); strings.HasPrefix(name, "safedir.") {
				inSafedir = append(inSafedir, n)
			} else if writeCalls[name] {
				out = append(out, finding{fset.Position(n.Pos()), name})
			}
		case *ast.SelectorExpr:
			name := selName(n)
			pkg, flag, _ := strings.Cut(name, ".")
			if (pkg == "os" || pkg == "unix" || pkg == "syscall") && writeFlags[flag] && len(inSafedir) == 0 {
				out = append(out, finding{fset.Position(n.Pos()), name})
			}
		}
		return true
	})
	return out
}

// selName is "pkg.Name" for a selector on an identifier, else "".
func selName(e ast.Expr) string {
	s, ok := e.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	id, ok := s.X.(*ast.Ident)
	if !ok {
		return ""
	}
	return id.Name + "." + s.Sel.Name
}

// The check finds what it must: a file with each kind of writer.
func TestOneWriterFindsEachKind(t *testing.T) {
	src := `package x
import ("os"; "golang.org/x/sys/unix"; "freeze/internal/safedir")
func a() {
	os.WriteFile("p", nil, 0)
	os.Create("p")
	os.OpenFile("p", os.O_WRONLY|os.O_APPEND, 0)
	unix.Open("p", unix.O_RDWR, 0)
	os.OpenFile("p", os.O_RDONLY, 0)
	safedir.Open("p", os.O_WRONLY|os.O_CREATE, 0)
}`
	p := filepath.Join(t.TempDir(), "x.go")
	if err := WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range writersIn(t, p) {
		got = append(got, f.what)
	}
	want := "os.WriteFile os.Create os.O_WRONLY os.O_APPEND unix.O_RDWR"
	if strings.Join(got, " ") != want {
		t.Fatalf("found %q, want %q", strings.Join(got, " "), want)
	}
}
