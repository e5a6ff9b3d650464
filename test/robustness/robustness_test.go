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
	// runs: "ci" (default: the short run), "all", or a comma-separated
	// list of names.
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
	sel := strings.TrimSpace(os.Getenv(envScenarios))
	names := map[string]bool{}
	for _, n := range strings.Split(sel, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names[n] = true
		}
	}
	var total result
	for i, row := range scenarios {
		switch {
		case sel == "" || sel == "ci":
			if !row.ci || row.bug != "" {
				continue
			}
		case sel == "all":
		default:
			if !names[row.name] {
				continue
			}
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

// TestSoak is the long soak: the whole fault table, again and again, until
// $DYAD_ROBUSTNESS_SOAK_CYCLES fault cycles have run (scripts/robustness-soak.sh).
func TestSoak(t *testing.T) {
	want, _ := strconv.Atoi(os.Getenv(envSoakCycles))
	if want <= 0 {
		t.Skipf("the soak runs only when %s is set (scripts/robustness-soak.sh)", envSoakCycles)
	}
	var total result
	for round := 1; total.Cycles < want; round++ {
		for i, row := range scenarios {
			if total.Cycles >= want {
				break
			}
			t.Run(fmt.Sprintf("%d/%s", round, row.name), func(t *testing.T) {
				bin := testutil.BuildDyadFailpoints(t)
				r := run(t, bin, row.scenario, uint64(round)<<32|uint64(i))
				appendResult(t, r)
				add(&total, r)
			})
			t.Logf("soak so far: %s", summary(total))
		}
	}
	t.Logf("soak total: %s", summary(total))
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
