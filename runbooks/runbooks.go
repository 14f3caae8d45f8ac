// Package runbooks carries freeze's runbooks, markdown files embedded in
// the binary so that an operator has them on a machine that can no longer
// fetch anything.
package runbooks

import (
	"embed"
	"sort"
	"strings"
)

//go:embed *.md
var files embed.FS

// Default is the runbook 'freeze runbook' prints.
const Default = "incident"

// Get returns the runbook called name.
func Get(name string) (string, bool) {
	b, err := files.ReadFile(name + ".md")
	return string(b), err == nil
}

// List returns each runbook's name and its title (its first line).
func List() [][2]string {
	ents, _ := files.ReadDir(".")
	var out [][2]string
	for _, e := range ents {
		name := strings.TrimSuffix(e.Name(), ".md")
		b, _ := files.ReadFile(e.Name())
		title, _, _ := strings.Cut(string(b), "\n")
		out = append(out, [2]string{name, strings.TrimPrefix(title, "# ")})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}
