package main

import (
	"encoding/xml"
	"fmt"
	"os"
	"strings"

	"freeze/internal/contain"
	"freeze/internal/match"
	"freeze/internal/safedir"
)

// junitSuite is the run as a JUnit XML test suite: a failing test case
// per leftover and per cap hit, a passing one when clean. GitLab reads it
// as a report; Jenkins, and GitHub through an action, show it.
type junitSuite struct {
	XMLName  xml.Name    `xml:"testsuite"`
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// findings are what a run reports to CI: each leftover and the cap hit,
// as a title and a message.
func findings(f runFlags, rep contain.Report) [][2]string {
	var out [][2]string
	for _, l := range rep.Leftovers {
		title := fmt.Sprintf("left behind: pid %d %s", l.PID, l.Comm)
		if l.StartedBy != "" {
			title += " (started by " + l.StartedBy + ")"
		}
		out = append(out, [2]string{title, l.String()})
	}
	if rep.CapHit() {
		out = append(out, [2]string{fmt.Sprintf("the cap of %d tasks refused %d fork(s)", f.maxProcs, rep.Refused),
			fmt.Sprintf("pids.max=%d refused %d fork(s) (peak %d tasks): a fork bomb, or a suite that needs a larger --max-procs; when it first fired the group held %s", f.maxProcs, rep.Refused, rep.Peak, strings.Join(rep.AtCap, ", "))})
	}
	return out
}

// writeJUnit writes the run as JUnit XML to path, by descriptor.
func writeJUnit(o out, f runFlags, rep contain.Report, command []string) {
	name := "freeze run -- " + match.ShellJoin(command)
	s := junitSuite{Name: name, Time: fmt.Sprintf("%.3f", rep.Took.Seconds())}
	for _, fd := range findings(f, rep) {
		s.Cases = append(s.Cases, junitCase{Name: fd[0], Classname: "freeze.run",
			Failure: &junitFailure{Message: fd[0], Type: "leftover", Text: fd[1]}})
	}
	if rep.CapHit() {
		s.Cases[len(s.Cases)-1].Failure.Type = "cap"
	}
	if len(s.Cases) == 0 {
		s.Cases = append(s.Cases, junitCase{Name: "nothing outlived the command, and the cap never fired", Classname: "freeze.run"})
	}
	s.Tests, s.Failures = len(s.Cases), len(findings(f, rep))
	b, err := xml.MarshalIndent(s, "", "  ")
	if err != nil {
		o.warnf("run: --junit: %v", err)
		return
	}
	if err := safedir.WriteFile(f.junit, append([]byte(xml.Header), append(b, '\n')...), 0o644); err != nil {
		o.warnf("run: --junit %s: %v", f.junit, err)
	}
}

// githubAnnotate writes, under GitHub Actions, one error annotation per
// finding (a workflow command on stdout, after the command has ended)
// and a table in the job's summary.
func githubAnnotate(o out, f runFlags, rep contain.Report, code int, why string) {
	if os.Getenv("GITHUB_ACTIONS") != "true" {
		return
	}
	fs := findings(f, rep)
	for _, fd := range fs {
		fmt.Fprintf(o.stdout, "::error title=%s::%s\n", ghEscape(fd[0], true), ghEscape(fd[1], false))
	}
	path := os.Getenv("GITHUB_STEP_SUMMARY")
	if path == "" {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### freeze run: exit %d\n\n%s\n\n", code, why)
	if len(fs) > 0 {
		b.WriteString("| finding | detail |\n| --- | --- |\n")
		for _, fd := range fs {
			fmt.Fprintf(&b, "| %s | %s |\n", mdCell(fd[0]), mdCell(fd[1]))
		}
	}
	sf, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		o.warnf("run: GITHUB_STEP_SUMMARY: %v", err)
		return
	}
	defer sf.Close()
	sf.WriteString(b.String())
}

// ghEscape escapes a workflow command's data (and, for a property, its
// ':' and ',') as the runner's toolkit does.
func ghEscape(s string, property bool) string {
	r := strings.NewReplacer("%", "%25", "\r", "%0D", "\n", "%0A")
	s = r.Replace(s)
	if property {
		s = strings.NewReplacer(":", "%3A", ",", "%2C").Replace(s)
	}
	return s
}

// mdCell makes a string one cell of a markdown table.
func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "\r", " ").Replace(s)
}
