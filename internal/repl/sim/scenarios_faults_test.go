package sim

import (
	"strings"
	"testing"
	"time"
)

// Scripted runs of the extended faults (faults.go): hand-overs and the
// fence command's outcomes, each asserting the role change and the
// writes its row of the role table names (docs/ARCHITECTURE.md). The pair
// forms by about 3.5 s: node 0 leads, node 1 follows.

// firstRole is the first role change of node to role at or after from
// (ok false: none).
func firstRole(r Result, node int, to string, from int64) (RoleEvent, bool) {
	for _, e := range r.Roles {
		if e.Node == node && e.To == to && e.At >= from {
			return e, true
		}
	}
	return RoleEvent{}, false
}

// leadsBetween reports whether node took a leading role in [from, to).
func leadsBetween(r Result, node int, from, to int64) bool {
	for _, e := range r.Roles {
		if e.Node == node && e.At >= from && e.At < to && (e.To == "primary" || e.To == "solo") {
			return true
		}
	}
	return false
}

// TestScenarioHandover: the synchronous primary hands its role over; the
// replica becomes primary at once (no lease waited out), the old primary
// follows it, and writes to the new primary are acknowledged.
func TestScenarioHandover(t *testing.T) {
	s := Script{Seed: 5, PPM: []int64{0, 0}}
	s.Faults = []Fault{{At: 6 * sec, Kind: FaultHandover, Node: 0}}
	s.Ops = append(opsEvery(5*sec, 6*sec, sec/10, 0, true, 0), opsEvery(7*sec, 8*sec, sec/10, 1, true, 0)...)
	r := runScenario(t, s)
	e, ok := firstRole(r, 1, "primary", 6*sec)
	if !ok || !strings.Contains(e.Reason, "handed its role over") {
		t.Fatalf("node 1 did not become primary by the hand-over (%+v, %v); roles: %+v", e, ok, r.Roles)
	}
	if e.At-6*sec > sec/4 {
		t.Fatalf("the hand-over took %v: it waited for something", time.Duration(e.At-6*sec))
	}
	if _, ok := firstRole(r, 0, "replica", 6*sec); !ok {
		t.Fatalf("the old primary does not follow the new one; roles: %+v", r.Roles)
	}
	if served(r, true, 7*sec, 8*sec) == 0 {
		t.Fatal("the new primary acknowledged no write")
	}
}

// TestScenarioFinalHandover: a primary whose storage failed hands over
// and stops; the replica leads alone at once and takes writes.
func TestScenarioFinalHandover(t *testing.T) {
	s := Script{Seed: 6, PPM: []int64{0, 0}}
	s.Faults = []Fault{{At: 6 * sec, Kind: FaultHandover, Node: 0, Peer: 1}}
	s.Ops = append(opsEvery(5*sec, 6*sec, sec/10, 0, true, 0), opsEvery(7*sec, 8*sec, sec/10, 1, true, 0)...)
	r := runScenario(t, s)
	e, ok := firstRole(r, 1, "solo", 6*sec)
	if !ok || !strings.Contains(e.Reason, "handed its role over") || e.At-6*sec > sec/4 {
		t.Fatalf("node 1 did not lead alone at once by the final hand-over (%+v, %v); roles: %+v", e, ok, r.Roles)
	}
	if served(r, true, 7*sec, 8*sec) == 0 {
		t.Fatal("the node that took over acknowledged no write")
	}
}

// TestScenarioHandoverMadeFinal: a planned hand-over is sent to a frozen
// replica, then the primary's storage fails (a final hand-over during the
// one under way). Nothing is left to send, so the node stops at once; it
// never leads again, and the replica takes the hand-over at its thaw.
func TestScenarioHandoverMadeFinal(t *testing.T) {
	s := Script{Seed: 6, PPM: []int64{0, 0}}
	s.Faults = []Fault{
		{At: 6 * sec, Kind: FaultFreeze, Node: 1, D: 2 * sec},
		{At: 6*sec + sec/20, Kind: FaultHandover, Node: 0},
		{At: 6*sec + sec/10, Kind: FaultHandover, Node: 0, Peer: 1},
	}
	r := runScenario(t, s)
	if leadsBetween(r, 0, 6*sec, int64(scenarioCfg.Duration)) {
		t.Fatalf("the node whose storage failed led again; roles: %+v", r.Roles)
	}
	if e, ok := firstRole(r, 1, "primary", 6*sec); !ok || !strings.Contains(e.Reason, "handed its role over") {
		t.Fatalf("the replica did not take the hand-over at its thaw (%+v, %v); roles: %+v", e, ok, r.Roles)
	}
}

// TestScenarioFenceFails: the primary crashes and the replica's fence
// command fails: the replica waits (it never leads while the faults
// last), and leads only once everything heals.
func TestScenarioFenceFails(t *testing.T) {
	s := Script{Seed: 7, PPM: []int64{0, 0}, Fence: true}
	s.Faults = []Fault{
		{At: 4 * sec, Kind: FaultFence, Node: 1, Peer: 1, D: sec / 10},
		{At: 6 * sec, Kind: FaultCrash, Node: 0},
	}
	s.Ops = opsEvery(9*sec, 12*sec, sec/10, 1, true, 0)
	r := runScenario(t, s)
	if e, ok := firstRole(r, 1, "waiting", 6*sec); !ok || e.Reason != "fence failed" {
		t.Fatalf("the replica did not wait after its fence command failed (%+v, %v); roles: %+v", e, ok, r.Roles)
	}
	if leadsBetween(r, 1, 6*sec, int64(scenarioCfg.Duration)) {
		t.Fatalf("the replica led after its fence command failed; roles: %+v", r.Roles)
	}
	if served(r, true, 9*sec, 12*sec) != 0 {
		t.Fatal("a write was acknowledged with no leader")
	}
}

// TestScenarioFenceSlow: the primary crashes and the replica's fence
// command takes 3 s: it promotes itself only once the command succeeded,
// and then takes writes.
func TestScenarioFenceSlow(t *testing.T) {
	s := Script{Seed: 8, PPM: []int64{0, 0}, Fence: true}
	s.Faults = []Fault{
		{At: 4 * sec, Kind: FaultFence, Node: 1, D: 3 * sec},
		{At: 6 * sec, Kind: FaultCrash, Node: 0},
	}
	s.Ops = opsEvery(11*sec, 12*sec, sec/10, 1, true, 0)
	r := runScenario(t, s)
	e, ok := firstRole(r, 1, "solo", 6*sec)
	if !ok || e.Reason != "primary lost" {
		t.Fatalf("the replica did not promote itself (%+v, %v); roles: %+v", e, ok, r.Roles)
	}
	if e.At < 6*sec+int64(time.Second)+3*sec {
		t.Fatalf("the replica promoted itself %v after the crash, before a lease and its 3 s fence command", time.Duration(e.At-6*sec))
	}
	if served(r, true, 11*sec, 12*sec) == 0 {
		t.Fatal("the promoted replica acknowledged no write")
	}
}

// TestScenarioLossyNetwork (ROBUSTNESS's delay-loss-reorder): for 6 s the
// network drops 10 % and duplicates 5 % of packets and delays each by up
// to 5 ms, reordering them. No lease runs out on such a link: neither
// node changes role, writes on the primary are acknowledged and reads on
// the replica served.
func TestScenarioLossyNetwork(t *testing.T) {
	s := Script{Seed: 9, PPM: []int64{0, 0}}
	s.Faults = []Fault{{At: 5 * sec, Kind: FaultLossy}, {At: 11 * sec, Kind: FaultHeal}}
	s.Ops = append(opsEvery(5*sec, 11*sec, sec/20, 0, true, 0), opsEvery(5*sec, 11*sec, sec/20, 1, false, 0)...)
	cfg := scenarioCfg
	cfg.Net = NetConfig{MinDelay: int64(50 * time.Microsecond), MaxDelay: int64(5 * time.Millisecond), Drop: 0.1, Dup: 0.05}
	r := Run(s, cfg)
	if r.Failure != nil {
		t.Fatal(r.Failure)
	}
	for _, e := range r.Roles {
		if e.At >= 5*sec && e.At < 11*sec {
			t.Fatalf("node %d changed role on a lossy link: %+v", e.Node, e)
		}
	}
	if w, rd := served(r, true, 5*sec, 11*sec), served(r, false, 5*sec, 11*sec); w < 60 || rd < 60 {
		t.Fatalf("%d writes acknowledged and %d reads served on the lossy link, want most of 120 each", w, rd)
	}
}

// TestScenarioSlowDisk (ROBUSTNESS's slow-disk-primary and
// slow-disk-replica): every sync on both nodes takes 100 ms. Writes are
// slower but acknowledged, and no node changes role once the pair formed.
func TestScenarioSlowDisk(t *testing.T) {
	s := Script{Seed: 10, PPM: []int64{0, 0}}
	s.Ops = append(opsEvery(5*sec, 10*sec, sec/10, 0, true, 0), opsEvery(5*sec, 10*sec, sec/10, 1, true, 1)...)
	cfg := scenarioCfg
	cfg.FsyncMin, cfg.FsyncMax = 100*time.Millisecond, 100*time.Millisecond
	r := Run(s, cfg)
	if r.Failure != nil {
		t.Fatal(r.Failure)
	}
	for _, e := range r.Roles {
		if e.At >= 5*sec {
			t.Fatalf("node %d changed role on a slow disk: %+v", e.Node, e)
		}
	}
	if served(r, true, 5*sec, 10*sec) < 50 {
		t.Fatalf("%d writes acknowledged on a slow disk, want most of 100", served(r, true, 5*sec, 10*sec))
	}
}

// TestScenarioCrashLosesUnsynced (ROBUSTNESS's crash-before-commit and
// crash-after-commit, primary and replica): under a stream of writes the
// replica, then the primary, crash with entries written but not yet
// synced, which their disks lose. No acknowledged write is lost (the
// checker), the replica takes over after the primary's crash, and the
// crashed nodes come back and follow.
func TestScenarioCrashLosesUnsynced(t *testing.T) {
	s := Script{Seed: 11, PPM: []int64{0, 0}}
	s.Faults = []Fault{
		{At: 5*sec + 3*sec/1000, Kind: FaultCrash, Node: 1},
		{At: 5*sec + sec/2, Kind: FaultRestart, Node: 1},
		{At: 9*sec + 3*sec/1000, Kind: FaultCrash, Node: 0},
		{At: 12 * sec, Kind: FaultRestart, Node: 0},
	}
	for _, from := range []int64{5*sec - sec/10, 9*sec - sec/10} {
		for t := from; t < from+sec/5; t += sec / 500 {
			s.Ops = append(s.Ops, TimedOp{At: t, Node: 0, Op: ClientOp{Put: true, Key: int(t/sec) % 4}})
		}
	}
	r := runScenario(t, s)
	if r.Lost == 0 {
		t.Fatal("no crash lost an unsynced entry: the scenario tests nothing")
	}
	if _, ok := firstRole(r, 1, "solo", 9*sec); !ok {
		t.Fatalf("the replica did not take over after the primary crashed; roles: %+v", r.Roles)
	}
	if _, ok := firstRole(r, 0, "replica", 12*sec); !ok {
		t.Fatalf("the old primary did not follow after its restart; roles: %+v", r.Roles)
	}
	t.Logf("%d unsynced entries lost in the crashes", r.Lost)
}

// TestScenarioFinalHandoverAtTheEnd: a primary's storage fails just
// before the faults end, while a write waits for the replica's ack that
// the cut 1->0 holds back, so its hand-over cannot be sent and it stops
// only after everything healed (3 leases after the hand-over began,
// adapter_faults.go). Its storage is then repaired like every other
// fault: it restarts and the pair forms again (Run's settle check: one
// leader and one replica, both up). The simulator once left such a node
// down through the settle phase and called that a failure to recover.
func TestScenarioFinalHandoverAtTheEnd(t *testing.T) {
	end := int64(scenarioCfg.Duration)
	failAt := end - sec + sec/10
	s := Script{Seed: 9, PPM: []int64{0, 0}}
	s.Faults = []Fault{
		{At: end - sec, Kind: FaultCut, Node: 1, Peer: 0},
		{At: failAt, Kind: FaultHandover, Node: 0, Peer: 1},
	}
	s.Ops = append(opsEvery(end-3*sec, end-sec, sec/10, 0, true, 0),
		TimedOp{At: end - sec + sec/20, Node: 0, Op: ClientOp{Put: true}})
	r := runScenario(t, s)
	if served(r, true, end-3*sec, end-sec) == 0 {
		t.Fatal("the pair acknowledged no write before the storage failed")
	}
	stopAt := failAt + 3*sec
	if stopAt <= end {
		t.Fatalf("the scenario is mistimed: node 0 stops at %v, before the end at %v", time.Duration(stopAt), time.Duration(end))
	}
	for _, e := range r.Roles {
		if e.Node == 0 && e.At >= stopAt && e.To != "waiting" {
			return // its new run took a role
		}
	}
	t.Fatalf("node 0 did not run again after its storage was repaired; roles: %+v", r.Roles)
}
