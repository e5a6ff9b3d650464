package sim

import "testing"

// TestScenarioRollingUpgrade: a pair of the older build (protocol versions
// up to ProtocolV2) is upgraded one node at a time under writes to the
// primary and reads on the replica. While either node is old, the leader
// flushes each batch before it sends it and the old replica shows what it
// persists; once both run this build they speak ProtocolV3 and the leader
// sends first. Every invariant holds throughout (runScenario fails on any).
// A leader that sent before its flush in the old pair fails it: the
// replica shows the write of 5 s, which the primary's crash then loses,
// and the restarted primary logs another write at that index
// (divergent-apply).
func TestScenarioRollingUpgrade(t *testing.T) {
	s := Script{Seed: 12, PPM: []int64{0, 0}, Old: []bool{true, true}}
	s.Faults = []Fault{
		// The old primary crashes during its flush of the write issued
		// at 5 s and comes back before its replica takes over: that
		// write was never sent, so the replica never showed it.
		{At: 5*sec + 50_000, Kind: FaultCrash, Node: 0},
		{At: 5*sec + sec/4, Kind: FaultRestart, Node: 0},
		{At: 6 * sec, Kind: FaultLeave, Node: 1},
		{At: 6 * sec, Kind: FaultBuild, Node: 1, Peer: 0},
		{At: 6*sec + sec/2, Kind: FaultRestart, Node: 1},
		{At: 10 * sec, Kind: FaultLeave, Node: 0},
		{At: 10 * sec, Kind: FaultBuild, Node: 0, Peer: 0},
		{At: 10*sec + sec/2, Kind: FaultRestart, Node: 0},
	}
	for _, n := range []int{0, 1} {
		s.Ops = append(s.Ops, opsEvery(4*sec, 18*sec, sec/10, n, true, n)...)
		s.Ops = append(s.Ops, opsEvery(4*sec, 18*sec, sec/10, 1-n, false, n)...)
	}
	r := runScenario(t, s)
	puts := served(r, true, 0, 20*sec)
	switch {
	case r.ShownEarly == 0:
		t.Fatal("the older replica showed nothing before its commit: the scenario tests nothing")
	case r.FlushedFirst == 0:
		t.Fatal("no batch was flushed before it was sent while a node was old")
	case r.FlushedFirst >= puts:
		t.Fatalf("%d batches flushed first for %d writes acknowledged: the upgraded pair never sent before its flush", r.FlushedFirst, puts)
	case served(r, true, 12*sec, 18*sec) == 0 || served(r, false, 12*sec, 18*sec) == 0:
		t.Fatal("the upgraded pair served no write or no read")
	}
	t.Logf("%d writes acknowledged, %d batches flushed before they were sent, %d entries shown early", puts, r.FlushedFirst, r.ShownEarly)
}
