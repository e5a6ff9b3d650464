package robustness

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dyad-db/dyad/test/testutil"
)

// Environment:
const (
	// envScenarios selects the rows of the fault table TestRobustness
	// runs: "ci" (default: every row that names no open bug), "all", or
	// a comma-separated list of names; a name not in the table fails the
	// test.
	envScenarios = "DYAD_ROBUSTNESS"
	// envSoakCycles makes TestSoak run the whole table over and over
	// until this many fault cycles have run (the long soak); unset, it is
	// skipped.
	envSoakCycles = "DYAD_ROBUSTNESS_SOAK_CYCLES"
	// envResults names a file that gets one JSON line per run.
	envResults = "DYAD_ROBUSTNESS_RESULTS"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

// TestRobustness runs the selected fault scenarios, each on a fresh pair.
func TestRobustness(t *testing.T) {
	selected, err := selectScenarios(os.Getenv(envScenarios))
	if err != nil {
		t.Fatal(err)
	}
	var total result
	for i, row := range scenarios {
		if !selected[row.name] {
			continue
		}
		t.Run(row.name, func(t *testing.T) {
			if row.bug != "" {
				t.Logf("known to fail by a dyad bug: %s", row.bug)
			}
			bin := testutil.BuildDyadFailpoints(t)
			r := run(t, bin, row.scenario, uint64(time.Now().UnixNano())+uint64(i))
			appendResult(t, r)
			add(&total, r)
		})
	}
	t.Logf("total: %s", summary(total))
}

// selectScenarios reads $DYAD_ROBUSTNESS: "" or "ci" selects every row
// that names no open bug, "all" every row, anything else is a
// comma-separated list of row names. A name not in the table is an error,
// so that a typo cannot pass with no fault injected at all.
func selectScenarios(sel string) (map[string]bool, error) {
	selected := map[string]bool{}
	switch sel = strings.TrimSpace(sel); sel {
	case "", "ci", "all":
		for _, row := range scenarios {
			if sel == "all" || row.bug == "" {
				selected[row.name] = true
			}
		}
		return selected, nil
	}
	known := map[string]bool{}
	for _, row := range scenarios {
		known[row.name] = true
	}
	var unknown []string
	for _, n := range strings.Split(sel, ",") {
		switch n = strings.TrimSpace(n); {
		case n == "":
		case known[n]:
			selected[n] = true
		default:
			unknown = append(unknown, strconv.Quote(n))
		}
	}
	if len(unknown) > 0 {
		names := make([]string, 0, len(scenarios))
		for _, row := range scenarios {
			names = append(names, row.name)
		}
		return nil, fmt.Errorf("%s=%s: no scenario named %s; the table has: ci, all, %s",
			envScenarios, sel, strings.Join(unknown, ", "), strings.Join(names, ", "))
	}
	if len(selected) == 0 {
		return nil, fmt.Errorf("%s=%q selects no scenario", envScenarios, sel)
	}
	return selected, nil
}

// TestSoak is the long soak: the whole fault table, again and again, until
// $DYAD_ROBUSTNESS_SOAK_CYCLES fault cycles have run (scripts/robustness-soak.sh).
func TestSoak(t *testing.T) {
	want, _ := strconv.Atoi(os.Getenv(envSoakCycles))
	if want <= 0 {
		t.Skipf("the soak runs only when %s is set (scripts/robustness-soak.sh)", envSoakCycles)
	}
	// A failed run records no cycles, so the loop also ends after
	// maxFailed failed runs: a soak whose every run fails (a broken
	// binary path, a missing prerequisite) must fail, not spin for ever.
	const maxFailed = 10
	var total result
	failed := 0
	for round := 1; total.Cycles < want; round++ {
		for i, row := range scenarios {
			if total.Cycles >= want {
				break
			}
			ok := t.Run(fmt.Sprintf("%d/%s", round, row.name), func(t *testing.T) {
				bin := testutil.BuildDyadFailpoints(t)
				r := run(t, bin, row.scenario, uint64(round)<<32|uint64(i))
				appendResult(t, r)
				add(&total, r)
			})
			if !ok {
				failed++
			}
			t.Logf("soak so far: %s; %d failed runs", summary(total), failed)
			if failed >= maxFailed {
				t.Fatalf("soak stopped after %d failed runs", failed)
			}
		}
	}
	t.Logf("soak total: %s; %d failed runs", summary(total), failed)
}

// add accumulates r into the total (Scenario counts the runs).
func add(total *result, r result) {
	n, _ := strconv.Atoi(total.Scenario)
	total.Scenario = strconv.Itoa(n + 1)
	total.Cycles += r.Cycles
	total.Operations += r.Operations
	total.Unknown += r.Unknown
	total.Acked += r.Acked
	total.Lost += r.Lost
	total.WatchEvents += r.WatchEvents
	total.WatchProblems += r.WatchProblems
	total.ConflictSets += r.ConflictSets
	total.Checked += r.Checked
	total.WatchResumes += r.WatchResumes
	total.ProbesCompacted += r.ProbesCompacted
}

func summary(r result) string {
	return fmt.Sprintf("%s runs, %d fault cycles, %d histories checked by porcupine, %d operations (%d unknown), "+
		"%d acknowledged writes, %d lost, %d watch events, %d watch problems, %d conflict sets, %d resume probes refused as compacted",
		r.Scenario, r.Cycles, r.Checked, r.Operations, r.Unknown, r.Acked, r.Lost, r.WatchEvents, r.WatchProblems, r.ConflictSets, r.ProbesCompacted)
}
