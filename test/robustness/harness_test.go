package robustness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/test/linearize"
	"github.com/dyad-db/dyad/test/testutil"
)

// Timing of one run. The peer lease is dyad's default.
const (
	peerLease    = time.Second
	warmup       = 2 * time.Second  // traffic before the fault
	tail         = 3 * time.Second  // traffic after the fault is healed
	pairWithin   = 60 * time.Second // a pair forms (again)
	resumeWithin = 20 * time.Second
	opTimeout    = 3 * time.Second
	clients      = 4 // recorded clients, spread over both nodes
	checkTimeout = 3 * time.Minute
	resumeProbes = 4 // random revisions each node is re-watched from
)

// scenario is one row of the fault table.
type scenario struct {
	name    string
	profile profile
	// splitBrain: the fault is a real two-way partition longer than the
	// peer lease, so both sides may acknowledge writes alone. Any other
	// run that reports a split brain fails.
	splitBrain bool
	// setup runs before the nodes start (e.g. to put a data dir on a
	// small filesystem).
	setup func(h *harness)
	// fault injects the fault (the leader is h.leader) and heals it; it
	// returns the number of fault cycles it ran.
	fault func(h *harness) int
}

// harness is one run: a pair, its traffic and its records.
type harness struct {
	t       *testing.T
	p       *testutil.Pair
	leader  testutil.Zone
	notes   []string // what the fault did, for the log
	diskDir string   // the small filesystem of the full-disk faults
	mu      sync.Mutex
}

func (h *harness) notef(format string, a ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	note := fmt.Sprintf(format, a...)
	h.notes = append(h.notes, note)
	// Stamped like the nodes' logs, to line the fault up with them.
	h.t.Logf("%s %s", time.Now().UTC().Format("15:04:05.000"), note)
}

// restartDead starts, with no failpoint armed, every node whose process
// has exited, and reports which.
func (h *harness) restartDead() []testutil.Zone {
	var restarted []testutil.Zone
	for _, n := range []testutil.Zone{testutil.ZoneA, testutil.ZoneB} {
		if !h.p.Running(n) {
			if proc := h.p.Proc(n); proc != nil {
				h.notef("node %v had exited (%v)", n, proc.ExitErr())
			}
			h.p.Kill(n)
			h.p.Start(n)
			restarted = append(restarted, n)
		}
	}
	return restarted
}

// waitExit waits up to within for node's process to exit; it reports
// whether it did.
func (h *harness) waitExit(node testutil.Zone, within time.Duration) bool {
	proc := h.p.Proc(node)
	if proc == nil {
		return true
	}
	return proc.Wait(within) != testutil.ErrStillRunning
}

// armCrash arms a failpoint that crashes node at its next hit. Under
// write traffic the hit may come before the node has answered the arming
// request, which then fails with a closed connection: that counts as
// armed if the node has exited.
func (h *harness) armCrash(node testutil.Zone, name string) {
	h.t.Helper()
	if err := h.p.Failpoint(node, name, "1*crash"); err != nil {
		if !h.waitExit(node, resumeWithin) {
			h.t.Fatalf("arming %s=1*crash on %v: %v", name, node, err)
		}
		h.notef("node %v crashed at %s while the arming request was answered (%v)", node, name, err)
		return
	}
	h.notef("armed %s=1*crash on node %v", name, node)
}

// arm arms a failpoint on node over HTTP; the test fails if it cannot.
func (h *harness) arm(node testutil.Zone, name, term string) {
	h.t.Helper()
	if err := h.p.Failpoint(node, name, term); err != nil {
		h.t.Fatalf("arming %s=%s on %v: %v", name, term, node, err)
	}
	h.notef("armed %s=%s on node %v", name, term, node)
}

// result is what one run checked, for the figures.
type result struct {
	Scenario      string `json:"scenario"`
	Profile       string `json:"profile"`
	Cycles        int    `json:"faultCycles"`
	Operations    int    `json:"operations"` // recorded, incl. unknown outcomes
	Unknown       int    `json:"unknown"`
	Acked         int    `json:"ackedWrites"`
	Lost          int    `json:"lostWrites"`
	Linearizable  string `json:"linearizable"`     // "ok", "skipped (split brain)", "FAILED"
	Checked       int    `json:"historiesChecked"` // 1 when porcupine checked the history
	SplitBrain    bool   `json:"splitBrain"`
	ConflictSets  int    `json:"conflictSets"`
	WatchEvents   int    `json:"watchEvents"`
	WatchResumes  int    `json:"watchResumes"`
	WatchProblems int    `json:"watchProblems"`
	// ProbesCompacted counts watches from a random revision that the node
	// refused as compacted (then checked from the revision it named).
	ProbesCompacted int     `json:"probesCompacted"`
	Seconds         float64 `json:"seconds"`
}

// run executes one scenario on a fresh pair and checks everything.
func run(t *testing.T, bin string, sc scenario, seed uint64) result {
	start := time.Now()
	res := result{Scenario: sc.name, Profile: sc.profile.name}
	h := &harness{t: t, p: testutil.NewPair(t, bin, peerLease)}
	if sc.setup != nil {
		sc.setup(h)
	}
	h.p.Start(testutil.ZoneA)
	h.p.Start(testutil.ZoneB)
	h.leader = h.p.WaitPair(pairWithin)
	clis := []*clientv3.Client{h.p.Client(testutil.ZoneA), h.p.Client(testutil.ZoneB)}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	init, err := linearize.ReadState(ctx, clis[h.leader], keys()...)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	from := init.Rev + 1
	rec := linearize.NewRecorder(init)

	// Watchers on both nodes, from the history's first revision.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	var watchers [2]watchRecord
	var wwg sync.WaitGroup
	for i := range watchers {
		wcli := h.p.Client(testutil.Zone(i))
		wwg.Go(func() { watch(wctx, wcli, from, &watchers[i]) })
	}

	tctx, tcancel := context.WithCancel(context.Background())
	var twg sync.WaitGroup
	tr := traffic{profile: sc.profile, clis: clis, clients: clients, opTimeout: opTimeout, seed: seed}
	twg.Go(func() { tr.run(tctx, rec) })

	time.Sleep(warmup)
	res.Cycles = sc.fault(h)
	// The fault is healed; nodes it left dead come back clean.
	for _, n := range h.restartDead() {
		h.notef("restarted node %v", n)
	}
	h.leader = h.p.WaitPair(pairWithin)
	time.Sleep(tail)
	tcancel()
	twg.Wait()
	h.restartDead()
	h.leader = h.p.WaitPair(pairWithin)
	final := h.p.Converged(h.leader)

	ops := rec.Operations()
	st := rec.Stats()
	res.Operations, res.Unknown = st.OK+st.Unknown+st.Pending, st.Unknown+st.Pending
	t.Logf("history: %v; errors: %v", st, rec.Errors())

	// Split brain: only after a real two-way partition longer than the lease.
	for _, n := range []testutil.Zone{testutil.ZoneA, testutil.ZoneB} {
		if h.p.LogContains(n, "split brain") {
			res.SplitBrain = true
		}
	}
	if res.SplitBrain && !sc.splitBrain {
		t.Errorf("a split brain was reported without a two-way partition longer than the peer lease (%v)", peerLease)
	}

	// The store's history, from the leader, and that both nodes agree.
	history, err := readHistory(context.Background(), clis[h.leader], from, final)
	var compacted compactedError
	if errors.As(err, &compacted) && res.SplitBrain {
		// The merge after a split brain compacts the history below the
		// merge revision: the store keeps only what follows it.
		h.notef("history compacted below %d by the merge", compacted.rev)
		from = compacted.rev
		history, err = readHistory(context.Background(), clis[h.leader], from, final)
		if errors.As(err, &compacted) && compacted.rev == from {
			// The compaction revision itself is gone too.
			from++
			history, err = readHistory(context.Background(), clis[h.leader], from, final)
		}
	}
	if err != nil {
		t.Fatalf("reading the store's history: %v", err)
	}
	byRev := byRevision(history)

	// No acknowledged write lost: in the store's history or a conflict record.
	conflicts := map[int64][]ackedWrite{}
	for _, n := range []testutil.Zone{testutil.ZoneA, testutil.ZoneB} {
		c, sets, err := conflictWrites(h.p.DataDir(n))
		if err != nil {
			t.Errorf("reading node %v's conflict records: %v", n, err)
		}
		res.ConflictSets += sets
		for rev, ws := range c {
			conflicts[rev] = append(conflicts[rev], ws...)
		}
	}
	acked := ackedWrites(ops)
	res.Acked = len(acked)
	if from > init.Rev+1 {
		// Compacted by a merge: what the winner's store had below it is
		// known only from the watcher on the winner. The loser's writes
		// must be in its conflict records.
		rs, _, _, _ := watchers[h.leader].snapshot()
		for rev, evs := range byRevision(rs) {
			if rev < from {
				byRev[rev] = append(byRev[rev], evs...)
			}
		}
	}
	lost := lostWrites(acked, byRev, conflicts)
	res.Lost = len(lost)
	if len(lost) > 0 {
		t.Errorf("%d of %d acknowledged writes lost (in neither the store's history nor a conflict record), first: %v",
			len(lost), len(acked), lost[:min(len(lost), 10)])
	}

	// Watches: give the watchers time to reach the final revision.
	deadline := time.Now().Add(resumeWithin)
	for time.Now().Before(deadline) && (watchers[0].lastRev(from) < final || watchers[1].lastRev(from) < final) {
		time.Sleep(50 * time.Millisecond)
	}
	wcancel()
	wwg.Wait()
	for i := range watchers {
		rs, rewatches, compacted, errs := watchers[i].snapshot()
		res.WatchResumes += rewatches
		var ref []response = history
		if res.SplitBrain {
			// A side that lost its history saw events the store no
			// longer has; only the order checks apply.
			ref = nil
		}
		problems := validateWatch(rs, ref)
		if last := revisions(rs); ref != nil && (len(last) == 0 || last[len(last)-1] < final) {
			problems = append(problems, fmt.Sprintf("stopped at revision %v before the final %d", lastOf(last), final))
		}
		for _, r := range rs {
			res.WatchEvents += len(r.Events)
		}
		res.WatchProblems += len(problems)
		if len(problems) > 0 {
			t.Errorf("watcher on node %v (%d responses, %d re-watches, %d compacted, errors %v): %v",
				testutil.Zone(i), len(rs), rewatches, compacted, errs, problems)
		}
	}
	// Resumable from any revision, on both nodes.
	rng := rand.New(rand.NewPCG(seed, 7))
	for _, n := range []testutil.Zone{testutil.ZoneA, testutil.ZoneB} {
		for k := 0; k < resumeProbes && final > from; k++ {
			r := from + rng.Int64N(final-from+1)
			got, err := readHistory(context.Background(), clis[n], r, final)
			if errors.As(err, &compacted) && compacted.rev > r {
				// The node says r is compacted (after a snapshot install
				// or a merge it refuses what lies below them): a gap it
				// signals. The rest must replay from where it points.
				res.ProbesCompacted++
				r = compacted.rev
				got, err = readHistory(context.Background(), clis[n], r, final)
			}
			if err != nil {
				t.Errorf("watch on node %v from revision %d: %v", n, r, err)
				continue
			}
			want := []response{{Header: final}}
			for _, x := range history {
				for _, e := range x.Events {
					if e.Rev >= r {
						want[0].Events = append(want[0].Events, e)
					}
				}
			}
			if p := validateWatch(got, want); len(p) > 0 || len(revisions(got)) != len(revisions(want)) {
				t.Errorf("watch on node %v resumed from revision %d differs from the store's history: %v (%d revisions, want %d)",
					n, r, p, len(revisions(got)), len(revisions(want)))
			}
		}
	}

	// Linearizability, whenever dyad reported no split brain.
	switch {
	case res.SplitBrain:
		res.Linearizable = "skipped (split brain)"
	case linearize.Check(t, ops, checkTimeout):
		res.Linearizable, res.Checked = "ok", 1
	default:
		res.Linearizable, res.Checked = "FAILED", 1
	}
	res.Seconds = time.Since(start).Seconds()
	t.Logf("result: %+v; notes: %v", res, h.notes)
	return res
}

func lastOf(revs []int64) any {
	if len(revs) == 0 {
		return "none"
	}
	return revs[len(revs)-1]
}

// appendResult appends r as one JSON line to the file named by
// $DYAD_ROBUSTNESS_RESULTS, if set.
func appendResult(t *testing.T, r result) {
	path := os.Getenv(envResults)
	if path == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Logf("results: %v", err)
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Logf("results: %v", err)
		return
	}
	defer f.Close()
	b, _ := json.Marshal(r)
	f.Write(append(b, '\n'))
}

// signalNode sends sig to node and fails the test if it cannot.
func (h *harness) signalNode(node testutil.Zone, sig syscall.Signal) {
	h.t.Helper()
	h.p.Signal(node, sig)
	h.notef("%v to node %v", sig, node)
}
