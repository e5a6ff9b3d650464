package sim

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestQueueRunsByTimeThenOrder(t *testing.T) {
	var q Queue
	var got []int
	q.At(20, func() { got = append(got, 3) })
	q.At(10, func() { got = append(got, 1) })
	q.At(10, func() { got = append(got, 2) })
	q.At(30, func() {
		got = append(got, 4)
		q.At(5, func() { got = append(got, 5) }) // the past: runs now, not backwards
	})
	q.RunUntil(100, nil)
	want := []int{1, 2, 3, 4, 5}
	if len(got) != len(want) {
		t.Fatalf("ran %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ran %v, want %v", got, want)
		}
	}
	if q.Now() != 100 {
		t.Fatalf("Now = %d after RunUntil(100)", q.Now())
	}
}

func TestNetworkCutsLossesAndDelays(t *testing.T) {
	var q Queue
	cfg := NetConfig{MinDelay: 10, MaxDelay: 50, Drop: 1, Dup: 0}
	var arrived []int64
	net := NewNetwork(2, cfg, rand.New(rand.NewPCG(1, 2)), &q, func(p Packet) { arrived = append(arrived, q.Now()) })
	for range 20 {
		net.Send(Packet{From: 0, To: 1})
	}
	q.RunUntil(1000, nil)
	if len(arrived) != 20 {
		t.Fatalf("healthy network delivered %d of 20", len(arrived))
	}
	for _, at := range arrived {
		if at < 10 || at > 50 {
			t.Fatalf("a packet sent at 0 arrived at %d, outside [10, 50]", at)
		}
	}
	arrived = nil
	net.SetCut(0, 1, true)
	net.Send(Packet{From: 0, To: 1})
	net.Send(Packet{From: 1, To: 0})
	q.RunUntil(2000, nil)
	if len(arrived) != 1 {
		t.Fatalf("one direction cut: %d packets arrived, want the other direction's 1", len(arrived))
	}
	// A packet in flight when its direction is cut is lost too.
	arrived = nil
	net.HealAll()
	net.Send(Packet{From: 0, To: 1})
	net.SetCut(0, 1, true)
	q.RunUntil(3000, nil)
	if len(arrived) != 0 {
		t.Fatal("a packet in flight over a cut direction arrived")
	}
	net.HealAll()
	net.SetLossy(true) // Drop = 1
	net.Send(Packet{From: 0, To: 1})
	q.RunUntil(4000, nil)
	if len(arrived) != 0 || net.Dropped == 0 {
		t.Fatalf("lossy network with Drop 1 delivered %d", len(arrived))
	}
	net.cfg.Drop, net.cfg.Dup = 0, 1
	net.Send(Packet{From: 0, To: 1})
	q.RunUntil(5000, nil)
	if len(arrived) != 2 {
		t.Fatalf("lossy network with Dup 1 delivered %d copies, want 2", len(arrived))
	}
}

func TestClockDriftAndReboot(t *testing.T) {
	c := Clock{PPM: 1000}
	c.Reset(0, 5)
	if got := c.Local(int64(time.Second)); got != 5+int64(time.Second)+int64(time.Millisecond) {
		t.Fatalf("a +1000 ppm clock read %d after 1s from 5", got)
	}
	if v := c.Virtual(int64(time.Second) + int64(time.Millisecond)); v != int64(time.Second) {
		t.Fatalf("Virtual(1.001s) = %d, want 1s", v)
	}
	c.Reset(int64(time.Hour), 0)
	if got := c.Local(int64(time.Hour)); got != 1 {
		t.Fatalf("a rebooted clock reads %d, want 1 (never 0)", got)
	}
}

func TestDiskCrashLosesUnsynced(t *testing.T) {
	var d Disk[int, string]
	d.Append(1, 2, 3)
	d.SyncTo(2)
	d.Append(4)
	d.Meta = "m"
	d.Crash()
	if d.Len() != 2 || d.Lost != 2 || d.Meta != "m" {
		t.Fatalf("after a crash: %d entries, %d lost, meta %q; want 2, 2, m", d.Len(), d.Lost, d.Meta)
	}
	d.Append(5)
	if e, ok := d.At(3); !ok || e != 5 {
		t.Fatalf("entry 3 after the crash = %d %v, want 5", e, ok)
	}
}

func TestModelTellsStaleFromFresh(t *testing.T) {
	put := Input{Put: true, Key: "k", Value: "a"}
	get := Input{Key: "k"}
	var ok History
	ok.Add(0, 0, 10, put, Output{Rev: 1})
	ok.Add(1, 20, 30, get, Output{Rev: 1, Found: true, Value: "a", ModRev: 1})
	ok.Add(2, 5, 0, Input{Put: true, Key: "k", Value: "b"}, Output{Unknown: true})
	if kind, why := ok.Check(0); kind != "" {
		t.Fatalf("a fresh read: %s", why)
	}
	var stale History
	stale.Add(0, 0, 10, put, Output{Rev: 1})
	stale.Add(1, 20, 30, get, Output{Rev: 0})
	if kind, _ := stale.Check(0); kind != "not-linearizable" {
		t.Fatalf("a read that missed a write acknowledged before it began: %q", kind)
	}
}

func TestCheckerCatchesViolations(t *testing.T) {
	now := int64(0)
	clock := func() int64 { return now }
	var log []uint64 // write IDs by index - 1
	writeAt := func(i uint64) (uint64, bool) {
		if i == 0 || i > uint64(len(log)) {
			return 0, false
		}
		return log[i-1], true
	}
	leader := []View{{Up: true, Leads: true, Role: "solo", WriteAt: writeAt}, {Up: true, Role: "replica", WriteAt: writeAt}}

	c := NewChecker(2, clock)
	now = 10
	c.Ack(0, 7, 1, "k", 1, EpochID{Term: 1, Node: 1}, false)
	now = 20
	c.Read(1, false, "k", 15, Output{Rev: 0})
	if f := c.Failed(); f == nil || f.Kind != "stale-read" {
		t.Fatalf("a stale read: %v", f)
	}

	c = NewChecker(2, clock)
	c.Ack(0, 7, 1, "k", 1, EpochID{Term: 1, Node: 1}, false)
	c.Step(leader) // the leader's log lacks write 7
	if f := c.Failed(); f == nil || f.Kind != "lost-write" {
		t.Fatalf("a leader without an acknowledged write: %v", f)
	}
	c = NewChecker(2, clock)
	log = []uint64{7}
	c.Ack(0, 7, 1, "k", 1, EpochID{Term: 1, Node: 1}, false)
	c.Step(leader)
	if f := c.Failed(); f != nil {
		t.Fatalf("a leader holding the write: %v", f)
	}

	c = NewChecker(2, clock)
	c.Visible(0, 5)
	c.Visible(0, 4)
	if f := c.Failed(); f == nil || f.Kind != "revision-backwards" {
		t.Fatalf("a revision going back: %v", f)
	}

	c = NewChecker(2, clock)
	c.Ack(1, 8, 2, "k", 2, EpochID{Term: 5, Node: 2}, true)
	c.Ack(0, 9, 3, "k", 3, EpochID{Term: 4, Node: 1}, false)
	if f := c.Failed(); f == nil || f.Kind != "two-leaders" {
		t.Fatalf("an older epoch acknowledging after a newer one: %v", f)
	}

	// A late answer: the newer leader had applied the write (its replica
	// acknowledged it before taking over), and the thawed older leader
	// answers it after the newer one acknowledged its own.
	c = NewChecker(2, clock)
	c.Applied(1, 3, 9, 3, EpochID{Term: 4, Node: 1}, false)
	c.Applied(1, 4, 8, 4, EpochID{Term: 5, Node: 2}, true)
	c.Ack(1, 8, 4, "k", 4, EpochID{Term: 5, Node: 2}, true)
	c.Applied(0, 3, 9, 3, EpochID{Term: 4, Node: 1}, false)
	c.Ack(0, 9, 3, "k", 3, EpochID{Term: 4, Node: 1}, false)
	if f := c.Failed(); f != nil {
		t.Fatalf("a write of the newer leader's history answered late by the older one: %v", f)
	}
	// The same answer for a write the newer leader never applied is two
	// leaders.
	c = NewChecker(2, clock)
	c.Applied(1, 4, 8, 4, EpochID{Term: 5, Node: 2}, true)
	c.Ack(1, 8, 4, "k", 4, EpochID{Term: 5, Node: 2}, true)
	c.Applied(0, 3, 9, 3, EpochID{Term: 4, Node: 1}, false)
	c.Ack(0, 9, 3, "k", 3, EpochID{Term: 4, Node: 1}, false)
	if f := c.Failed(); f == nil || f.Kind != "two-leaders" {
		t.Fatalf("an older epoch acknowledging a write the newer leader lacks: %v", f)
	}

	// A write applied at two indexes took effect twice.
	c = NewChecker(2, clock)
	c.Applied(0, 1, 7, 1, EpochID{Term: 1, Node: 1}, false)
	c.Applied(1, 1, 7, 1, EpochID{Term: 1, Node: 1}, false)
	if f := c.Failed(); f != nil {
		t.Fatalf("one write applied at one index by both nodes: %v", f)
	}
	c.Applied(0, 2, 7, 2, EpochID{Term: 1, Node: 1}, false)
	if f := c.Failed(); f == nil || f.Kind != "duplicate-write" {
		t.Fatalf("a write applied at a second index: %v", f)
	}

	c = NewChecker(2, clock)
	c.Conflict(1, 7)
	if f := c.Failed(); f == nil || f.Kind != "made-up-split-brain" {
		t.Fatalf("conflict records without a partition: %v", f)
	}
	// After a two-way partition, a missing write must end in a conflict
	// record.
	c = NewChecker(2, clock)
	c.TwoWayCut()
	log = nil
	c.Ack(0, 7, 1, "k", 1, EpochID{Term: 1, Node: 1}, true)
	c.Step(leader)
	if c.Failed() != nil {
		t.Fatalf("judged before the end: %v", c.Failed())
	}
	c.Final(leader)
	if f := c.Failed(); f == nil || f.Kind != "lost-write" {
		t.Fatalf("a write lost after a partition, without a conflict record: %v", f)
	}
	// A replica's read after the merge misses a write that the losing
	// side acknowledged alone and kept as a conflict record; it still
	// must not miss one that is not.
	c = NewChecker(2, clock)
	c.TwoWayCut()
	now = 10
	c.Ack(1, 8, 2, "k", 2, EpochID{Term: 3, Node: 2}, true)
	c.Ack(1, 9, 3, "j", 3, EpochID{Term: 3, Node: 2}, true)
	c.Conflict(1, 8)
	now = 20
	c.Read(1, false, "k", 15, Output{Rev: 4})
	if f := c.Failed(); f != nil {
		t.Fatalf("a read missing a write kept as a conflict record: %v", f)
	}
	c.Read(1, false, "j", 15, Output{Rev: 4})
	if f := c.Failed(); f == nil || f.Kind != "stale-read" {
		t.Fatalf("a replica's read missing a write that is no conflict record: %v", f)
	}
}

// TestClockRateChangeAndBound: a rate change keeps the reading continuous
// and applies from then on; the checker fails a clock that runs beyond
// the drift bound or backwards, and not one within it.
func TestClockRateChangeAndBound(t *testing.T) {
	c := Clock{}
	c.Reset(0, 1)
	before := c.Local(int64(time.Second))
	c.SetRate(int64(time.Second), 2000)
	if got := c.Local(int64(time.Second)); got != before {
		t.Fatalf("the reading jumped from %d to %d at a rate change", before, got)
	}
	if got := c.Local(2*int64(time.Second)) - before; got != int64(time.Second)+2*int64(time.Millisecond) {
		t.Fatalf("a +2000 ppm clock ran %d in a second", got)
	}
	now := int64(0)
	ck := NewChecker(1, func() int64 { return now })
	ck.BoundDrift(5000)
	ck.Clock(0, 1, 1, 100)
	ck.Clock(0, 1, 1+int64(time.Second), 100+int64(time.Second)+4*int64(time.Millisecond))
	if f := ck.Failed(); f != nil {
		t.Fatalf("a clock 4000 ppm fast failed a 5000 ppm bound: %v", f)
	}
	ck.Clock(0, 1, 1+2*int64(time.Second), 100+2*int64(time.Second)+20*int64(time.Millisecond))
	if f := ck.Failed(); f == nil || f.Kind != "clock" {
		t.Fatalf("a clock 16000 ppm fast passed a 5000 ppm bound: %v", f)
	}
	ck = NewChecker(1, func() int64 { return now })
	ck.Clock(0, 1, 10, 500)
	ck.Clock(0, 1, 20, 400)
	if f := ck.Failed(); f == nil || f.Kind != "clock" {
		t.Fatalf("a clock that went back passed: %v", f)
	}
	ck = NewChecker(1, func() int64 { return now })
	ck.Clock(0, 1, 10, 500)
	ck.Clock(0, 2, 20, 3) // a reboot: the reading starts again
	if f := ck.Failed(); f != nil {
		t.Fatalf("a reboot's lower reading failed: %v", f)
	}
}

// TestListenerHearsThePair: a third party on the network (the room for a
// witness or observer) hears both nodes' broadcasts, and the pair runs
// and recovers as without it.
func TestListenerHearsThePair(t *testing.T) {
	for _, seed := range []uint64{2, 3} {
		cfg := Config{Listeners: 1}
		r := Run(Generate(seed, cfg), cfg)
		if r.Failure != nil {
			t.Fatalf("seed %d with a listener: %v", seed, r.Failure)
		}
		if len(r.Heard) != 1 || r.Heard[0][0] == 0 || r.Heard[0][1] == 0 {
			t.Fatalf("seed %d: the listener heard %v (per sender), want both nodes", seed, r.Heard)
		}
	}
}
