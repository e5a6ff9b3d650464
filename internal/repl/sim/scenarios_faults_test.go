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
