package postmortem

import (
	"bytes"
	"encoding/xml"
	"errors"
	"freeze/internal/timeline"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A run whose command a user wrote: the --arg holds markup and the host
// an ampersand, as an attacker's chain and host name may.
const hostileRun = `{"time":"2026-12-01T10:00:00Z","elapsed_ms":0,"step":"start","msg":"start","host":"web&1","kernel":"6.1.0","freeze_version":"freeze 1.0","command":["freeze","--path","/tmp/x/bash","--arg","</text><script>alert(1)</script>"]}
{"time":"2026-12-01T10:00:00.01Z","elapsed_ms":10,"step":"match","stage":1,"msg":"m","matched":300}
{"time":"2026-12-01T10:00:00.02Z","elapsed_ms":20,"step":"freeze-round","stage":2,"msg":"f1","round":1,"matched":340}
{"time":"2026-12-01T10:00:00.13Z","elapsed_ms":130,"step":"kill-round","stage":3,"msg":"k1","round":1,"live":340}
{"time":"2026-12-01T10:00:00.14Z","elapsed_ms":140,"step":"zero","stage":4,"msg":"zero remain"}
`

// svgOf renders the run and decodes it as XML: a bar's height by its
// title, every element's name, and all the text.
func svgOf(t *testing.T, run string) (bars map[string]float64, elements map[string]int, text string) {
	t.Helper()
	events, err := timeline.Parse([]byte(run))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Render(&b, events, "svg"); err != nil {
		t.Fatal(err)
	}
	bars, elements = map[string]float64{}, map[string]int{}
	var all strings.Builder
	d := xml.NewDecoder(&b)
	var height float64
	inBar := false
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			elements[tok.Name.Local]++
			for _, a := range tok.Attr {
				if tok.Name.Local == "rect" && a.Name.Local == "height" {
					height, _ = strconv.ParseFloat(a.Value, 64)
				}
				if a.Name.Local == "class" && a.Value == "bar" {
					inBar = true
				}
			}
		case xml.CharData:
			if inBar {
				bars[string(tok)] = height
				inBar = false
			}
			all.Write(tok)
		}
	}
	return bars, elements, all.String()
}

// The picture has a bar per step, as tall as its count against the
// largest, and a user's strings in it are text, never markup.
func TestSVGOfARun(t *testing.T) {
	bars, elements, text := svgOf(t, hostileRun)
	plot := float64(svgHeight - svgTop - svgBottom)
	for title, want := range map[string]float64{
		"match at 10ms: 300":    plot * 300 / 340,
		"freeze 1 at 20ms: 340": plot,
		"kill 1 at 130ms: 340":  plot,
		"zero at 140ms: 0":      0,
	} {
		got, ok := bars[title]
		if !ok {
			t.Errorf("no bar %q; bars: %v", title, bars)
			continue
		}
		if d := got - want; d > 0.1 || d < -0.1 {
			t.Errorf("bar %q is %.1f high, want %.1f", title, got, want)
		}
	}
	if len(bars) != 4 {
		t.Errorf("%d bars, want 4 (match, freeze 1, kill 1, zero): %v", len(bars), bars)
	}
	if elements["script"] != 0 {
		t.Errorf("the command's </text><script> became %d script elements", elements["script"])
	}
	for _, want := range []string{"</text><script>alert(1)</script>", "web&1, kernel 6.1.0", "freeze 1.0", "Zero remain"} {
		if !strings.Contains(text, want) {
			t.Errorf("the picture's text has no %q:\n%s", want, text)
		}
	}
}

// A timeline cut before its match has nothing to draw, and says so.
func TestSVGOfARunCutAtItsStart(t *testing.T) {
	events, err := timeline.Parse([]byte(strings.SplitAfter(hostileRun, "\n")[0]))
	if err != nil {
		t.Fatal(err)
	}
	if err := Render(io.Discard, events, "svg"); err == nil || !strings.Contains(err.Error(), "nothing ran past the start") {
		t.Errorf("Render svg of a start alone: %v, want nothing to draw", err)
	}
}

// A real renderer draws it: librsvg's rsvg-convert, which .ci/run
// installs, turns the SVG into a PNG of the picture's size.
func TestSVGDrawsInARealRenderer(t *testing.T) {
	conv, err := exec.LookPath("rsvg-convert")
	if err != nil {
		t.Skip("rsvg-convert is not installed (apt-get install librsvg2-bin): no renderer to draw the picture with")
	}
	events, err := timeline.Parse([]byte(hostileRun))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "chain.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if err := SVG(f, events); err != nil {
		t.Fatal(err)
	}
	f.Close()
	png := filepath.Join(dir, "chain.png")
	if out, err := exec.Command(conv, "-o", png, filepath.Join(dir, "chain.svg")).CombinedOutput(); err != nil {
		t.Fatalf("rsvg-convert: %v\n%s", err, out)
	}
	b, err := os.ReadFile(png)
	if err != nil {
		t.Fatal(err)
	}
	// A PNG's signature, then the IHDR chunk's width and height.
	if len(b) < 24 || string(b[1:4]) != "PNG" {
		t.Fatalf("rsvg-convert wrote %d bytes that are not a PNG", len(b))
	}
	w := int(b[16])<<24 | int(b[17])<<16 | int(b[18])<<8 | int(b[19])
	h := int(b[20])<<24 | int(b[21])<<16 | int(b[22])<<8 | int(b[23])
	if w != svgWidth || h != svgHeight {
		t.Errorf("the PNG is %dx%d, want %dx%d", w, h, svgWidth, svgHeight)
	}
}
