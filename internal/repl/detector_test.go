package repl

import (
	"testing"
	"time"
)

// TestDetectorPeerRuns: send times are comparable only within one run of
// a node. When the peer restarts, this node echoes the new run's clock
// (not the newest time of the old run), and the lease it held from the
// old run ends; an echo of another run of this node grants nothing.
func TestDetectorPeerRuns(t *testing.T) {
	const L = int64(time.Second)
	const self, oldRun, newRun = 0x5e1f, 0x01d, 0x2e3
	// own: an echo of this node's send time t0 in this run; stale: the
	// same time echoed for another run of this node.
	type hb struct {
		run, echoRun uint64
		sentAt       int64
		echoes       bool
	}
	for _, tc := range []struct {
		name        string
		heard       []hb
		wantEcho    int64
		wantEchoRun uint64
		wantLease   bool
	}{
		{"one run", []hb{{oldRun, 0, 5 * L, false}, {oldRun, 0, 6 * L, false}}, 6 * L, oldRun, false},
		{"a late heartbeat of the same run", []hb{{oldRun, 0, 6 * L, false}, {oldRun, 0, 5 * L, false}}, 6 * L, oldRun, false},
		{"the peer restarted: its new clock is echoed", []hb{{oldRun, 0, 9 * L, false}, {newRun, 0, L, false}}, L, newRun, false},
		{"the new run's clock goes on", []hb{{oldRun, 0, 9 * L, false}, {newRun, 0, L, false}, {newRun, 0, 2 * L, false}}, 2 * L, newRun, false},
		{"an echo of this run grants a lease", []hb{{oldRun, self, 5 * L, true}}, 5 * L, oldRun, true},
		{"an echo of another run of this node grants none", []hb{{oldRun, self + 1, 5 * L, true}}, 5 * L, oldRun, false},
		{"the peer's restart ends the lease of its old run", []hb{{oldRun, self, 5 * L, true}, {newRun, 0, L, false}}, L, newRun, false},
		{"the new run grants again", []hb{{oldRun, self, 5 * L, true}, {newRun, self, L, true}}, L, newRun, true},
		{"a sender without runs is trusted as before", []hb{{0, 0, 5 * L, true}}, 5 * L, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := int64(1)
			d := NewDetector(time.Second, 0, 1, t0)
			d.Run = self

			own, _ := d.Outgoing(t0)
			now := t0
			for _, h := range tc.heard {
				now++
				m := Heartbeat{Run: h.run, EchoRun: h.echoRun, SentAt: h.sentAt}
				if h.echoes {
					m.Echo = own
				}
				d.Heard(&m, now)
			}
			if _, echo := d.Outgoing(now); echo != tc.wantEcho || d.PeerRun() != tc.wantEchoRun {
				t.Errorf("echo %d of run %x, want %d of run %x", echo, d.PeerRun(), tc.wantEcho, tc.wantEchoRun)
			}
			if got := d.HoldsLease(now); got != tc.wantLease {
				t.Errorf("HoldsLease = %v, want %v", got, tc.wantLease)
			}
		})
	}
}

// TestDetectorRestartKeepsGrant: what this node granted the peer stands
// when the peer's run changes, so a late heartbeat of an earlier run can
// never shorten the lease of the current one.
func TestDetectorRestartKeepsGrant(t *testing.T) {
	const L = int64(time.Second)
	t0 := int64(1)
	d := NewDetector(time.Second, 0, 1, t0)

	d.Heard(&Heartbeat{Run: 2, SentAt: L}, t0)
	d.Outgoing(t0 + 1)                               // grants run 2 a lease until about t0+1+L
	d.Heard(&Heartbeat{Run: 1, SentAt: 9 * L}, t0+2) // late, from run 1
	d.Heard(&Heartbeat{Run: 2, SentAt: L + 1}, t0+3)
	if d.PeerLeaseExpired(t0 + 1 + L) {
		t.Fatal("a late heartbeat of the peer's earlier run ended the lease granted to its current run")
	}
	if !d.PeerLeaseExpired(t0 + 1 + L + 1) {
		t.Fatal("the granted lease outlived its bound")
	}
}

// TestDetectorLapsedFrozen: a freeze longer than Lease/2 during which
// this node's lease from its peer ran out is remembered until a grant
// reaches past the thaw; a grant for a send time before the freeze (a
// heartbeat that waited out the freeze in transit) does not clear it, and
// sets it if it ends within the freeze. A freeze that ends within the
// lease, a short stall across its end, and a freeze that begins once the
// lease has ended (with no grant in transit) do not set it.
func TestDetectorLapsedFrozen(t *testing.T) {
	const L = int64(time.Second)
	const self, peer = 0x5e1f, 0x9ee7
	for _, tc := range []struct {
		name       string
		from, thaw int64 // a freeze between two ticks (the lease ends at 1+L)
		late       bool  // then a heartbeat granted before the freeze arrives
		fresh      bool  // then a grant of a send time after the thaw arrives
		want       bool
	}{
		{"a freeze within the lease", 2, L / 2, false, false, false},
		{"a short stall across the lease's end", 3 * L / 4, 3*L/4 + 2*L/5, false, false, false},
		{"a freeze that begins after the lease ended", L + 2, 2 * L, false, false, false},
		{"a freeze past the lease", 2, 2 * L, false, false, true},
		{"a grant from before the freeze", 2, 2 * L, true, false, true},
		{"a grant in transit at a freeze after the lease ended", L + 2, 3 * L, true, false, true},
		{"a grant past the thaw", 2, 2 * L, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDetector(time.Second, 0, self, 1)
			own, _ := d.Outgoing(1)
			d.Heard(&Heartbeat{Run: peer, EchoRun: self, SentAt: 1, Echo: own}, 2) // lease until 1+L
			for now := int64(2); now < tc.from; now += L / 8 {
				d.Tick(now) // running
			}
			d.Tick(tc.from)
			d.Tick(tc.thaw)
			if tc.late {
				// Granted for a send time just before the freeze.
				before, _ := d.Outgoing(tc.from - 1)
				d.Heard(&Heartbeat{Run: peer, EchoRun: self, SentAt: 2, Echo: before}, tc.thaw)
			}
			if tc.fresh {
				after, _ := d.Outgoing(tc.thaw + 1)
				d.Heard(&Heartbeat{Run: peer, EchoRun: self, SentAt: 3, Echo: after}, tc.thaw+2)
			}
			if got := d.LapsedFrozen(); got != tc.want {
				t.Errorf("LapsedFrozen = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDetectorLapsedFrozenUngranted: a freeze longer than Lease/2 that
// begins while this node holds no lease at all counts as a lapse when the
// peer was heard within Lease/2 before it (a grant not made yet), until a
// grant reaches past the thaw; not when the peer was silent longer than
// that, nor for a short stall.
func TestDetectorLapsedFrozenUngranted(t *testing.T) {
	const L = int64(time.Second)
	const self, peer = 0x5e1f, 0x9ee7
	for _, tc := range []struct {
		name       string
		heard      int64 // the peer's heartbeat (no grant) arrives then
		from, thaw int64
		fresh      bool // then a grant of a send time after the thaw arrives
		want       bool
	}{
		{"heard just before the freeze", L, L + L/8, 3 * L, false, true},
		{"a grant past the thaw", L, L + L/8, 3 * L, true, false},
		{"silent for over half a lease before the freeze", 2, L, 3 * L, false, false},
		{"a short stall", L, L + L/8, L + L/8 + 2*L/5, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDetector(time.Second, 0, self, 1)
			for now := int64(2); now < tc.from; now += L / 8 {
				if now >= tc.heard && now-L/8 < tc.heard {
					d.Heard(&Heartbeat{Run: peer, SentAt: 1}, tc.heard) // no echo: no grant
				}
				d.Tick(now) // running
			}
			d.Tick(tc.from)
			d.Tick(tc.thaw)
			if tc.fresh {
				after, _ := d.Outgoing(tc.thaw + 1)
				d.Heard(&Heartbeat{Run: peer, EchoRun: self, SentAt: 2, Echo: after}, tc.thaw+2)
			}
			if got := d.LapsedFrozen(); got != tc.want {
				t.Errorf("LapsedFrozen = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDetectorLeaseNotRenewed: a peer heartbeat that arrives after the
// lease this node held has ended, echoing no newer send time, leaves the
// lease not renewed until a grant renews it; with no lease held it does
// not count.
func TestDetectorLeaseNotRenewed(t *testing.T) {
	const L = int64(time.Second)
	const self, peer = 0x5e1f, 0x9ee7
	d := NewDetector(time.Second, 0, self, 1)
	d.Heard(&Heartbeat{Run: peer, SentAt: 1}, 2) // no grant yet
	if d.LeaseNotRenewed() {
		t.Fatal("no lease held, yet not renewed")
	}
	own, _ := d.Outgoing(3)
	d.Heard(&Heartbeat{Run: peer, EchoRun: self, SentAt: 2, Echo: own}, 4) // lease until 3+L
	if d.LeaseNotRenewed() {
		t.Fatal("a fresh grant counts as not renewed")
	}
	d.Heard(&Heartbeat{Run: peer, EchoRun: self, SentAt: 3, Echo: own}, 3+L+1) // the same echo, after the lease
	if !d.LeaseNotRenewed() {
		t.Fatal("a heartbeat after the lease's end that renews nothing goes unnoticed")
	}
	newer, _ := d.Outgoing(3 + L + 2)
	d.Heard(&Heartbeat{Run: peer, EchoRun: self, SentAt: 4, Echo: newer}, 3+L+3)
	if d.LeaseNotRenewed() {
		t.Fatal("a renewed lease still counts as not renewed")
	}
}

// TestDetectorRunOrder: run IDs are random, and the network may hand a
// heartbeat of the peer's previous run over after the first ones of its
// new run. Such a late heartbeat must never end the new run: the new
// run's next heartbeat is taken and makes it the current run again. The
// old run's duplicates and overtaken heartbeats are dropped, and a run
// that left, or that a later run proved older by echoing a time after it
// was heard, is dropped for good.
func TestDetectorRunOrder(t *testing.T) {
	const L = int64(time.Second)
	const self, oldRun, newRun = 0x5e1f, 0x01d, 0x2e3
	type hb struct {
		run    uint64
		sentAt int64
		echo   int  // echoes a send time of this run: 0 none, 1 just made, 2 the first
		taken  bool // want: taken (not Stale)
	}
	for _, tc := range []struct {
		name    string
		leave   int // PeerLeft after this many heartbeats (0: never)
		heard   []hb
		wantRun uint64
	}{
		{"this node never heard the old run", 0, []hb{
			{newRun, L, 0, true}, {oldRun, 9 * L, 0, true}, {newRun, L + 1, 0, true},
		}, newRun},
		{"the old run's next heartbeat, overtaken by the new run's first, is news: the order is unknown", 0, []hb{
			{oldRun, 8 * L, 0, true}, {newRun, L, 0, true}, {oldRun, 9 * L, 0, true}, {newRun, L + 1, 0, true},
		}, newRun},
		{"the old run's duplicates and older heartbeats are dropped", 0, []hb{
			{oldRun, 8 * L, 0, true}, {newRun, L, 0, true}, {oldRun, 8 * L, 0, false}, {oldRun, 7 * L, 0, false},
		}, newRun},
		{"the new run's overtaken heartbeats do not bring it back", 0, []hb{
			{newRun, 2 * L, 0, true}, {oldRun, 9 * L, 0, true}, {newRun, L, 0, false},
		}, oldRun},
		{"an echo after the old run was heard proves the new run newer", 0, []hb{
			{oldRun, 8 * L, 0, true}, {newRun, L, 1, true}, {oldRun, 9 * L, 0, false},
		}, newRun},
		{"an echo of a time before the new run was heard proves nothing", 0, []hb{
			{newRun, L, 0, true}, {oldRun, 9 * L, 2, true}, {newRun, L + 1, 0, true},
		}, newRun},
		{"a run that left is dropped for good", 1, []hb{
			{oldRun, 8 * L, 0, true}, {oldRun, 9 * L, 0, false}, {newRun, L, 0, true}, {oldRun, 10 * L, 0, false},
		}, newRun},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := int64(1)
			d := NewDetector(time.Second, 0, self, now)
			first, _ := d.Outgoing(now)
			for i, h := range tc.heard {
				if i == tc.leave && tc.leave > 0 {
					d.PeerLeft()
				}
				now += 10
				m := Heartbeat{Run: h.run, SentAt: h.sentAt}
				switch h.echo {
				case 1: // this node's last heartbeat: the peer answers at once
					m.EchoRun, m.Echo = self, now-9
				case 2: // this node's first, sent before it heard anything
					m.EchoRun, m.Echo = self, first
				}
				taken := !d.Stale(&m)
				if taken {
					d.Heard(&m, now)
				}
				if taken != h.taken {
					t.Fatalf("heartbeat %d (run %x, sent %d): taken %v, want %v", i, h.run, h.sentAt, taken, h.taken)
				}
				d.Outgoing(now + 1) // this node's heartbeat, now+1 on its clock
			}
			if d.PeerRun() != tc.wantRun {
				t.Errorf("current run %x, want %x", d.PeerRun(), tc.wantRun)
			}
			if tc.wantRun == newRun && d.Ended(newRun) {
				t.Error("the new run is taken as ended")
			}
		})
	}
}

// TestDetectorEchoWithoutGrant: an echo the caller does not take as a
// grant (HeardFrom with grants false: a replica hearing a peer that is
// not its primary) extends no lease, yet still proves, as any echo of
// this run does, that the peer's earlier run has ended.
func TestDetectorEchoWithoutGrant(t *testing.T) {
	const L = int64(time.Second)
	const self, oldRun, newRun = 0x5e1f, 0x01d, 0x2e3
	for _, grants := range []bool{false, true} {
		d := NewDetector(time.Second, 0, 1, 1)
		d.Run = self
		old := Heartbeat{Run: oldRun, SentAt: 5 * L}
		d.HeardFrom(&old, 2, grants)
		own, _ := d.Outgoing(3) // sent after the old run was last heard
		d.HeardFrom(&Heartbeat{Run: newRun, EchoRun: self, SentAt: L, Echo: own}, 4, grants)
		if got := d.HoldsLease(4); got != grants {
			t.Errorf("grants %v: HoldsLease = %v, want %v", grants, got, grants)
		}
		late := Heartbeat{Run: oldRun, SentAt: 6 * L}
		if !d.Stale(&late) {
			t.Errorf("grants %v: a later heartbeat of the ended run is not stale", grants)
		}
	}
}
