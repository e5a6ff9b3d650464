package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// step is one line of the steps file scripts/test.sh writes:
// name, exit code, wall seconds and the file holding its go test events
// ("-" for a step that runs no tests), separated by tabs.
type step struct {
	Name    string
	Code    int
	Seconds int
	Events  string
}

func readSteps(path string) ([]step, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var steps []step
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) != 4 {
			return nil, fmt.Errorf("%s:%d: want 4 tab-separated fields, got %q", path, n, sc.Text())
		}
		code, err1 := strconv.Atoi(fields[1])
		secs, err2 := strconv.Atoi(fields[2])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s:%d: bad exit code or seconds in %q", path, n, sc.Text())
		}
		steps = append(steps, step{Name: fields[0], Code: code, Seconds: secs, Events: fields[3]})
	}
	return steps, sc.Err()
}

// allowed is one line of test/skips.txt: a package (relative to the
// module), a regular expression matching the whole test name, and why
// the skip is legitimate.
type allowed struct {
	Package string
	Test    *regexp.Regexp
	Why     string
}

func readAllowList(r io.Reader, name string) ([]allowed, error) {
	var list []allowed
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 3 {
			return nil, fmt.Errorf("%s:%d: want <package> <test regexp> <reason>, got %q", name, n, line)
		}
		re, err := regexp.Compile("^(?:" + fields[1] + ")$")
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, n, err)
		}
		list = append(list, allowed{Package: fields[0], Test: re, Why: strings.Join(fields[2:], " ")})
	}
	return list, sc.Err()
}

// allows returns the entry that allows o's skip, if any.
func allows(list []allowed, o outcome) (allowed, bool) {
	for _, a := range list {
		if a.Package == short(o.Package) && a.Test.MatchString(o.Test) {
			return a, true
		}
	}
	return allowed{}, false
}

// total is what the closing line adds up.
type total struct{ passed, failed, skipped int }

// report writes the summary of steps to w and returns the totals; any
// failure at all makes total.failed > 0.
func report(w io.Writer, steps []step, allow []allowed) (total, error) {
	var sum total
	var failures, skips []string
	fmt.Fprintf(w, "%-14s %7s  %-6s %7s %7s %7s\n", "step", "time", "result", "passed", "failed", "skipped")
	for _, s := range steps {
		var t total
		hasTests := s.Events != "-" && s.Events != ""
		if hasTests {
			res, err := readEvents(s.Events)
			if err != nil {
				return sum, fmt.Errorf("step %s: %v", s.Name, err)
			}
			t.passed = len(res.Passed)
			for _, o := range res.Failed {
				t.failed++
				failures = append(failures, fmt.Sprintf("%s: %s %s", s.Name, short(o.Package), o.Test))
			}
			for _, o := range res.PackageFailures {
				t.failed++
				failures = append(failures, fmt.Sprintf("%s: %s: the package failed outside any test (build error, panic, timeout; see the log)", s.Name, short(o.Package)))
			}
			for _, o := range res.Skipped {
				if _, ok := allows(allow, o); ok {
					t.skipped++
					skips = append(skips, fmt.Sprintf("  allowed      %s %s: %s", short(o.Package), o.Test, reason(o.Output)))
					continue
				}
				t.failed++
				skips = append(skips, fmt.Sprintf("  NOT ALLOWED  %s %s: %s", short(o.Package), o.Test, reason(o.Output)))
				failures = append(failures, fmt.Sprintf("%s: %s %s was skipped, and test/skips.txt does not allow it", s.Name, short(o.Package), o.Test))
			}
		}
		if s.Code != 0 && t.failed == 0 {
			t.failed = 1
			failures = append(failures, fmt.Sprintf("%s: the step exited %d (see its log above)", s.Name, s.Code))
		}
		result := "ok"
		if t.failed > 0 {
			result = "FAIL"
		}
		if hasTests {
			fmt.Fprintf(w, "%-14s %6ds  %-6s %7d %7d %7d\n", s.Name, s.Seconds, result, t.passed, t.failed, t.skipped)
		} else {
			fmt.Fprintf(w, "%-14s %6ds  %-6s\n", s.Name, s.Seconds, result)
		}
		sum.passed += t.passed
		sum.failed += t.failed
		sum.skipped += t.skipped
	}
	if len(skips) > 0 {
		fmt.Fprintf(w, "skipped tests (%d):\n%s\n", len(skips), strings.Join(skips, "\n"))
	}
	if len(failures) > 0 {
		fmt.Fprintf(w, "failures (%d):\n  %s\n", len(failures), strings.Join(failures, "\n  "))
	}
	fmt.Fprintf(w, "%d passed, %d failed, %d skipped\n", sum.passed, sum.failed, sum.skipped)
	return sum, nil
}

func readEvents(path string) (results, error) {
	f, err := os.Open(path)
	if err != nil {
		return results{}, err
	}
	defer f.Close()
	c := newCollector(nil)
	err = c.read(f, nil)
	return c.res, err
}

// fuzzRace reports whether the failures in res are exactly golang/go#75804:
// at least one failed fuzz target, every failed test a fuzz target whose
// only message is "context deadline exceeded", and no failing input
// written anywhere. Anything else is a real failure and is not retried.
//
// Lines the target logged with Go's log package (a node it starts says
// "store opened") are not messages of the failure and are left out.
func fuzzRace(res results) bool {
	if len(res.Failed) == 0 {
		return false
	}
	for _, o := range res.Failed {
		if !strings.HasPrefix(o.Test, "Fuzz") {
			return false
		}
		if m := withoutLogLines(messages(o.Output)); len(m) != 1 || m[0] != "context deadline exceeded" {
			return false
		}
	}
	return res.InputsWritten == 0
}

// logLine matches a line written by Go's log package with its default
// flags (slog's default handler writes through it): a date and a time.
var logLine = regexp.MustCompile(`^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} `)

// withoutLogLines is m without the lines logLine matches.
func withoutLogLines(m []string) []string {
	var out []string
	for _, l := range m {
		if !logLine.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}
