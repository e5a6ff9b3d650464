package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const pkgA, pkgB, pkgC = module + "internal/a", module + "test/b", module + "internal/c"

// stream renders events as go test -json lines.
func stream(t *testing.T, events ...event) string {
	t.Helper()
	var b strings.Builder
	for _, e := range events {
		j, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

func out(pkg, test, text string) event {
	return event{Action: "output", Package: pkg, Test: test, Output: text}
}

func end(action, pkg, test string) event { return event{Action: action, Package: pkg, Test: test} }

// sample: internal/a passes one test, skips one (with a reason) and
// fails a subtest and its parent; test/b fails with no failing test (a
// panic outside tests); internal/c passes.
func sample(t *testing.T) string {
	return stream(t,
		out(pkgA, "TestOK", "=== RUN   TestOK\n"), end("pass", pkgA, "TestOK"),
		out(pkgA, "TestSkip", "=== RUN   TestSkip\n"),
		out(pkgA, "TestSkip", "    a_test.go:12: missing prerequisite: root\n"),
		out(pkgA, "TestSkip", "--- SKIP: TestSkip (0.00s)\n"), end("skip", pkgA, "TestSkip"),
		out(pkgA, "TestBad/sub", "    a_test.go:30: want 1, got 2\n"),
		end("fail", pkgA, "TestBad/sub"), end("fail", pkgA, "TestBad"),
		end("fail", pkgA, ""),
		out(pkgB, "", "panic: boom in TestMain\n"), end("fail", pkgB, ""),
		end("pass", pkgC, "TestC"), end("pass", pkgC, ""),
	) + "FAIL\tnot json at all\n"
}

func TestCollector(t *testing.T) {
	var log bytes.Buffer
	c := newCollector(&log)
	var tee bytes.Buffer
	if err := c.read(strings.NewReader(sample(t)), &tee); err != nil {
		t.Fatal(err)
	}
	if tee.String() != sample(t) {
		t.Errorf("the raw copy differs from the input")
	}
	r := c.res
	if len(r.Passed) != 2 || len(r.Failed) != 2 || len(r.Skipped) != 1 {
		t.Fatalf("passed %d, failed %d, skipped %d; want 2, 2, 1", len(r.Passed), len(r.Failed), len(r.Skipped))
	}
	if len(r.PackageFailures) != 1 || r.PackageFailures[0].Package != pkgB {
		t.Fatalf("package failures %+v; want test/b alone (internal/a failed by its tests)", r.PackageFailures)
	}
	if len(r.Other) != 1 {
		t.Errorf("non-event lines %q; want the one", r.Other)
	}
	if got := reason(r.Skipped[0].Output); got != "missing prerequisite: root" {
		t.Errorf("skip reason %q", got)
	}
	for _, want := range []string{
		"--- SKIP internal/a TestSkip: missing prerequisite: root\n",
		"--- FAIL internal/a TestBad/sub (0.0s)\n    a_test.go:30: want 1, got 2\n",
		"FAIL internal/a 0.0s (1 passed, 2 failed, 1 skipped)\n",
		"    panic: boom in TestMain\nFAIL test/b",
		"ok   internal/c 0.0s (1 passed, 0 skipped)\n",
		"FAIL\tnot json at all\n",
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, log.String())
		}
	}
}

func TestReport(t *testing.T) {
	dir := t.TempDir()
	events := filepath.Join(dir, "unit.jsonl")
	if err := os.WriteFile(events, []byte(sample(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	stepsFile := filepath.Join(dir, "steps")
	lines := fmt.Sprintf("vet\t1\t7\t-\nbuild\t0\t3\t-\nunit\t1\t40\t%s\n", events)
	if err := os.WriteFile(stepsFile, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	steps, err := readSteps(stepsFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		allow             string
		passed, failed, s int
		allowed           bool
	}{
		// vet (1, no events), TestBad and TestBad/sub, test/b; TestSkip is
		// allowed by the list, a failure without it.
		{allow: "# comment\n\ninternal/a TestS.* needs root, run by hand\n", passed: 2, failed: 4, s: 1, allowed: true},
		{allow: "internal/a TestS needs a whole-name match\ntest/b TestSkip wrong package\n", passed: 2, failed: 5, s: 0},
	} {
		list, err := readAllowList(strings.NewReader(tc.allow), "skips.txt")
		if err != nil {
			t.Fatal(err)
		}
		var w bytes.Buffer
		sum, err := report(&w, steps, list)
		if err != nil {
			t.Fatal(err)
		}
		if sum != (total{tc.passed, tc.failed, tc.s}) {
			t.Errorf("allow %q: totals %+v, want %d passed, %d failed, %d skipped", tc.allow, sum, tc.passed, tc.failed, tc.s)
		}
		text := w.String()
		lastLine := text[strings.LastIndex(strings.TrimSuffix(text, "\n"), "\n")+1:]
		if want := fmt.Sprintf("%d passed, %d failed, %d skipped\n", tc.passed, tc.failed, tc.s); lastLine != want {
			t.Errorf("last line %q, want %q", lastLine, want)
		}
		mark := "NOT ALLOWED  internal/a TestSkip: missing prerequisite: root"
		if tc.allowed {
			mark = "allowed      internal/a TestSkip: missing prerequisite: root"
		}
		for _, want := range []string{mark, "vet: the step exited 1", "unit: internal/a TestBad/sub", "unit: test/b: the package failed"} {
			if !strings.Contains(text, want) {
				t.Errorf("allow %q: the report lacks %q:\n%s", tc.allow, want, text)
			}
		}
		if strings.Contains(text, "build: ") {
			t.Errorf("the build step succeeded but is listed as a failure:\n%s", text)
		}
	}
}

func TestReadAllowListRejects(t *testing.T) {
	for _, bad := range []string{"internal/a TestX\n", "internal/a Test( broken regexp\n"} {
		if _, err := readAllowList(strings.NewReader(bad), "skips.txt"); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestFuzzRace(t *testing.T) {
	// fuzzFail is a failed fuzz run whose output after the FAIL line is
	// msgs, one output event per line as go test -json writes them.
	fuzzFail := func(msgs ...string) []event {
		ev := []event{
			out(pkgA, "FuzzX", "=== RUN   FuzzX\n"),
			out(pkgA, "FuzzX", "fuzz: elapsed: 10s, execs: 5000 (0/sec), new interesting: 1 (total: 9)\n"),
			out(pkgA, "FuzzX", "--- FAIL: FuzzX (10.01s)\n"),
		}
		for _, m := range msgs {
			ev = append(ev, out(pkgA, "FuzzX", m))
		}
		// Clipped: the cases below append to one result each.
		return slices.Clip(append(ev, end("fail", pkgA, "FuzzX")))
	}
	race := fuzzFail("    context deadline exceeded\n")
	crasher := append(fuzzFail("    fuzz_test.go:20: boom\n"),
		out(pkgA, "FuzzX", "    Failing input written to testdata/fuzz/FuzzX/0123\n"))
	for _, tc := range []struct {
		name   string
		events []event
		want   bool
	}{
		{"the bare deadline error", append(race, end("fail", pkgA, "")), true},
		{"the bare deadline error after the target logged", append(fuzzFail("    2026/11/25 21:59:22 INFO store opened data-dir=/tmp/x revision=1\n", "    context deadline exceeded\n"), end("fail", pkgA, "")), true},
		{"a crasher", crasher, false},
		{"a logged line and a failure", append(fuzzFail("    2026/11/25 21:59:22 INFO store opened\n", "    fuzz_test.go:20: boom\n"), end("fail", pkgA, "")), false},
		{"the deadline error with an input written",
			append(race, out(pkgA, "", "Failing input written to testdata/fuzz/FuzzX/0123\n"), end("fail", pkgA, "")), false},
		{"a unit test failure", []event{end("fail", pkgA, "TestX")}, false},
		{"the race beside a unit test failure", append(race, end("fail", pkgA, "TestX")), false},
		{"a package failure alone", []event{end("fail", pkgA, "")}, false},
		{"a pass", []event{end("pass", pkgA, "FuzzX")}, false},
	} {
		c := newCollector(nil)
		if err := c.read(strings.NewReader(stream(t, tc.events...)), nil); err != nil {
			t.Fatal(err)
		}
		if got := fuzzRace(c.res); got != tc.want {
			t.Errorf("%s: fuzzRace = %v, want %v", tc.name, got, tc.want)
		}
	}
}
