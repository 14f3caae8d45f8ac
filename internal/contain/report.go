package contain

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"strings"

	"freeze/internal/safedir"
	"freeze/internal/show"
	"freeze/internal/timeline"
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
func (rep Report) findings() [][2]string {
	var out [][2]string
	for _, f := range rep.found() {
		out = append(out, [2]string{f.title, f.msg})
	}
	return out
}

// titleMax bounds a finding's title: an annotation's title or a JUnit
// case's name is a line to read at a glance (#52: the whole ~400-byte
// chain was the title, and the message repeated it).
const titleMax = 100

// A finding is one thing a run reports to CI: a short title, the whole
// message, and the class it belongs to (who started a leftover: the Go
// test package, or its starter's command), for JUnit's classname.
type finding struct {
	title, msg, class string
	file              string // the test's file, where its runner says
}

func (rep Report) found() []finding {
	var out []finding
	for _, l := range rep.Leftovers {
		f := finding{title: show.Clip(fmt.Sprintf("left behind: pid %d %s", l.PID, l.Comm), titleMax), msg: l.String(), class: "freeze.run"}
		if l.StartedBy != "" {
			f.msg = "started by " + l.StartedBy + ": " + f.msg
			f.class = show.Clip(l.StartedBy, titleMax)
		}
		if l.Class != "" {
			// Named as the runner names the test's package or class:
			// the case sits by the runner's own when the two JUnit
			// files are merged.
			f.class, f.file = l.Class, l.File
		}
		if l.Test != "" {
			f.title = show.Clip(l.Test+": "+f.title, titleMax)
		}
		out = append(out, f)
	}
	if rep.CapHit() {
		out = append(out, finding{title: fmt.Sprintf("the cap of %d tasks refused %d fork(s)", rep.Max, rep.Refused),
			msg:   fmt.Sprintf("pids.max=%d refused %d fork(s) (peak %d tasks): a fork bomb, or a suite that needs a larger --max-procs; when it first fired the group held %s", rep.Max, rep.Refused, rep.Peak, strings.Join(rep.AtCap, ", ")),
			class: "freeze.run"})
	}
	return out
}

// JUnit is the run of command as JUnit XML.
func (rep Report) JUnit(command []string) []byte {
	// The suite is named by the command's first words, not all of them
	// (#52: 13 package paths named procfs's suite).
	name := show.Clip("freeze run -- "+show.ShellJoin(command), titleMax)
	s := junitSuite{Name: show.Term(name), Time: fmt.Sprintf("%.3f", rep.Took.Seconds())}
	for _, fd := range rep.found() {
		s.Cases = append(s.Cases, junitCase{Name: show.Term(fd.title), Classname: show.Term(fd.class),
			Failure: &junitFailure{Message: show.Term(fd.title), Type: "leftover", Text: show.Term(fd.msg)}})
	}
	if rep.CapHit() {
		s.Cases[len(s.Cases)-1].Failure.Type = "cap"
	}
	if len(s.Cases) == 0 {
		s.Cases = append(s.Cases, junitCase{Name: "nothing outlived the command, and the cap never fired", Classname: "freeze.run"})
	}
	s.Tests, s.Failures = len(s.Cases), len(rep.findings())
	b, _ := xml.MarshalIndent(s, "", "  ")
	return append([]byte(xml.Header), append(b, '\n')...)
}

// GitHub writes, under GitHub Actions (GITHUB_ACTIONS=true), one error
// annotation per finding (a workflow command on stdout, after the
// command has ended) and a table in the job's summary.
func (rep Report) GitHub(stdout io.Writer) error {
	if os.Getenv("GITHUB_ACTIONS") != "true" {
		return nil
	}
	code, why := rep.Exit, rep.Why
	fds := rep.findings()
	for _, f := range rep.found() {
		file := ""
		if f.file != "" {
			file = "file=" + show.WorkflowProperty(f.file) + ","
		}
		fmt.Fprintf(stdout, "::error %stitle=%s::%s\n", file, show.WorkflowProperty(f.title), show.Workflow(f.msg))
	}
	path := os.Getenv("GITHUB_STEP_SUMMARY")
	if path == "" {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### freeze run: exit %d\n\n%s\n\n", code, show.Markdown(why))
	if len(fds) > 0 {
		b.WriteString("| finding | detail |\n| --- | --- |\n")
		for _, fd := range fds {
			fmt.Fprintf(&b, "| %s | %s |\n", show.Markdown(fd[0]), show.Markdown(fd[1]))
		}
	}
	// The summary's file is the runner's, in a directory of the
	// runner's user: root appends only through the one writer, which
	// refuses another user's directory and any file not root's own
	// (the third audit's S1: a link swapped in there made root append a
	// table holding a user's argv to a root-only file).
	if err := safedir.Append(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("GITHUB_STEP_SUMMARY: no summary written: %w", err)
	}
	return nil
}

// ReportJSON is a run's report as --format json and --report write it,
// and as a reader takes it back.
type ReportJSON struct {
	Exit   int    `json:"exit"`
	Why    string `json:"why"`
	Status int    `json:"status"`
	// NotStarted: why the command never started (its status is then a
	// shell's 127 or 126).
	NotStarted string                 `json:"not_started,omitempty"`
	Cap        string                 `json:"cap"`
	CapWhy     string                 `json:"cap_why"`
	Group      string                 `json:"group,omitempty"` // the group whose pids.max capped it
	TimedOut   bool                   `json:"timed_out"`
	Refused    int                    `json:"forks_refused"`
	Peak       int                    `json:"peak"`
	Leftovers  []timeline.RunLeftover `json:"leftovers"`
	AtCap      []string               `json:"at_cap,omitempty"` // what the group held when the cap first fired
	// AtCapMissed: what the looks saw when they named nothing.
	AtCapMissed string  `json:"at_cap_missed,omitempty"`
	Zero        bool    `json:"zero"`
	Timeline    string  `json:"timeline,omitempty"`
	TookMS      float64 `json:"took_ms"`
}

// JSON is the report as --format json prints it and --report writes it;
// tl is the run's timeline, if kept.
func (r Report) JSON(tl string) []byte {
	j := ReportJSON{Exit: r.Exit, Why: r.Why, Status: r.Status, Cap: r.Cap, CapWhy: r.CapWhy, Group: r.Group, TimedOut: r.TimedOut,
		Refused: r.Refused, Peak: r.Peak, Zero: r.Zero, Timeline: tl, TookMS: msOf(r.Took),
		Leftovers: []timeline.RunLeftover{}, AtCap: r.AtCap, AtCapMissed: r.AtCapMissed, NotStarted: r.NotStarted}
	for _, l := range r.Leftovers {
		j.Leftovers = append(j.Leftovers, l.Record())
	}
	b, _ := json.MarshalIndent(j, "", "  ")
	return b
}

// WriteFile writes b to path by descriptor, replacing whatever stands at
// the name: a user's symlink there (in /tmp, say) must not make root
// truncate the file it points to.
func WriteFile(path string, b []byte) error {
	return safedir.WriteFile(path, b, 0o644)
}
