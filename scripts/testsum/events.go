package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json), with the fields
// testsum uses.
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string // build-output and build-fail events
}

// outcome is how one test, or one package (Test == ""), ended.
type outcome struct {
	Package string
	Test    string
	Action  string // pass, fail or skip
	Elapsed float64
	Output  []string
}

// results is everything one event stream said.
type results struct {
	Passed, Failed, Skipped []outcome
	// PackageFailures are packages that failed with no failing test of
	// their own: build errors, panics outside a test, timeouts.
	PackageFailures []outcome
	// Other holds the lines that were not events (go test writes some
	// errors as plain text).
	Other []string
	// InputsWritten counts the fuzzer's "Failing input written" lines,
	// wherever they appeared.
	InputsWritten int
}

type key struct{ pkg, test string }

// collector turns events into results. Output is buffered per test until
// the test ends, because packages run in parallel and interleave.
type collector struct {
	res     results
	pending map[key][]string
	failing map[string]bool // packages with a failed test
	print   io.Writer       // the live log; nil for none
}

func newCollector(print io.Writer) *collector {
	return &collector{pending: map[key][]string{}, failing: map[string]bool{}, print: print}
}

// read feeds every line of r to the collector; tee, if not nil, gets the
// raw lines.
func (c *collector) read(r io.Reader, tee io.Writer) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		if tee != nil {
			if _, err := fmt.Fprintf(tee, "%s\n", sc.Bytes()); err != nil {
				return err
			}
		}
		c.line(sc.Bytes())
	}
	return sc.Err()
}

func (c *collector) line(b []byte) {
	var e event
	if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &e) != nil || e.Action == "" {
		c.res.Other = append(c.res.Other, string(b))
		c.printf("%s\n", b)
		return
	}
	switch e.Action {
	case "output":
		if strings.Contains(e.Output, "Failing input written") {
			c.res.InputsWritten++
		}
		k := key{e.Package, e.Test}
		c.pending[k] = append(c.pending[k], e.Output)
	case "build-output":
		k := key{e.ImportPath, ""}
		c.pending[k] = append(c.pending[k], e.Output)
	case "build-fail":
		c.printf("BUILD FAIL %s\n%s", e.ImportPath, strings.Join(c.pending[key{e.ImportPath, ""}], ""))
	case "pass", "fail", "skip":
		k := key{e.Package, e.Test}
		o := outcome{Package: e.Package, Test: e.Test, Action: e.Action, Elapsed: e.Elapsed, Output: c.pending[k]}
		delete(c.pending, k)
		if e.Test == "" {
			c.packageEnded(o)
		} else {
			c.testEnded(o)
		}
	}
}

func (c *collector) testEnded(o outcome) {
	switch o.Action {
	case "pass":
		c.res.Passed = append(c.res.Passed, o)
	case "fail":
		c.res.Failed = append(c.res.Failed, o)
		c.failing[o.Package] = true
		c.printf("--- FAIL %s %s (%.1fs)\n%s", short(o.Package), o.Test, o.Elapsed, indent(o.Output))
	case "skip":
		c.res.Skipped = append(c.res.Skipped, o)
		c.printf("--- SKIP %s %s: %s\n", short(o.Package), o.Test, reason(o.Output))
	}
}

func (c *collector) packageEnded(o outcome) {
	var p, f, s int
	for _, l := range [][]outcome{c.res.Passed, c.res.Failed, c.res.Skipped} {
		for _, t := range l {
			if t.Package != o.Package {
				continue
			}
			switch t.Action {
			case "pass":
				p++
			case "fail":
				f++
			case "skip":
				s++
			}
		}
	}
	switch o.Action {
	case "pass":
		c.printf("ok   %s %.1fs (%d passed, %d skipped)\n", short(o.Package), o.Elapsed, p, s)
	case "skip": // no test files
	case "fail":
		if !c.failing[o.Package] {
			// Nothing in the package failed by name: show what it said.
			c.res.PackageFailures = append(c.res.PackageFailures, o)
			c.printf("%s", indent(o.Output))
		}
		c.printf("FAIL %s %.1fs (%d passed, %d failed, %d skipped)\n", short(o.Package), o.Elapsed, p, f, s)
	}
}

func (c *collector) printf(format string, a ...any) {
	if c.print != nil {
		fmt.Fprintf(c.print, format, a...)
	}
}

// module is stripped from package paths in what testsum prints.
const module = "github.com/dyad-db/dyad/"

func short(pkg string) string {
	if s := strings.TrimPrefix(pkg, module); s != "" {
		return s
	}
	return pkg
}

func indent(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			continue // the framework's lines: testsum prints its own
		}
		b.WriteString("    " + strings.TrimLeft(l, " "))
		if !strings.HasSuffix(l, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// location is the "file.go:12: " that t.Log and t.Skip put before a message.
var location = regexp.MustCompile(`^\S+\.go:\d+: `)

// messages returns what a test itself wrote: its output without the
// framework's lines (=== RUN, --- SKIP, the fuzzing progress) and without
// the file:line prefixes.
func messages(output []string) []string {
	var out []string
	for _, l := range output {
		l = strings.TrimSpace(l)
		switch {
		case l == "", strings.HasPrefix(l, "=== "), strings.HasPrefix(l, "--- "), strings.HasPrefix(l, "fuzz: "):
			continue
		}
		out = append(out, location.ReplaceAllString(l, ""))
	}
	return out
}

// reason is a skipped test's message on one line.
func reason(output []string) string {
	m := messages(output)
	if len(m) == 0 {
		return "(no reason given)"
	}
	return strings.Join(m, " | ")
}
