package repl

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"
)

// Every write is encoded with AppendEntry into the log and the journal on
// both nodes, and batches with EncodeEntries to the replica: each must
// allocate its buffer once, whatever the fields hold.
func TestEntryEncodingAllocatesOnce(t *testing.T) {
	e := Entry{Index: 1 << 62, Epoch: Epoch{Term: 1 << 62, Node: 0xfeed}, Origin: 0xffffffffffffffff, ReqID: 1 << 63,
		Time: -1 << 62, Solo: true, Rev: -1 << 62, Data: bytes.Repeat([]byte("x"), 300)}
	if n := testing.AllocsPerRun(100, func() { AppendEntry(nil, &e) }); n != 1 {
		t.Errorf("AppendEntry into nil: %.1f allocations, want 1", n)
	}
	es := make([]Entry, 16)
	for i := range es {
		es[i] = e
		es[i].Index = e.Index + uint64(i)
	}
	if n := testing.AllocsPerRun(100, func() { EncodeEntries(es) }); n != 1 {
		t.Errorf("EncodeEntries of %d entries: %.1f allocations, want 1", len(es), n)
	}
}

func TestEntriesRoundTrip(t *testing.T) {
	es := []Entry{
		{Index: 7, Epoch: Epoch{Term: 3, Node: 0xfeed}, Origin: 9, ReqID: 0, Time: -1, Data: nil},
		{Index: 8, Epoch: Epoch{Term: 3, Node: 0xfeed}, Origin: 0xffffffffffffffff, ReqID: 1 << 60, Time: time.Now().UnixNano(), Solo: true, Rev: 1 << 40, Data: bytes.Repeat([]byte("x"), 70000)},
		{Index: 9, Epoch: Epoch{Term: 4, Node: 1}, Merge: true, Rev: 77, Data: MergeData(77)},
	}
	got, err := DecodeEntries(EncodeEntries(es))
	if err != nil {
		t.Fatal(err)
	}
	for i := range es {
		if got[i].Index != es[i].Index || got[i].Epoch != es[i].Epoch || got[i].Origin != es[i].Origin ||
			got[i].ReqID != es[i].ReqID || got[i].Time != es[i].Time || got[i].Solo != es[i].Solo ||
			got[i].Merge != es[i].Merge || got[i].Rev != es[i].Rev || !bytes.Equal(got[i].Data, es[i].Data) {
			t.Fatalf("entry %d: got %+v", i, got[i].Epoch)
		}
	}
	if r, err := got[2].MergeRev(); err != nil || r != 77 {
		t.Fatalf("merge revision: %d %v", r, err)
	}
	bad := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"truncated", EncodeEntries(es)[:20]},
		{"trailing", append(EncodeEntries(es), 0)},
		{"not consecutive", EncodeEntries([]Entry{{Index: 1}, {Index: 3}})},
	}
	for _, tt := range bad {
		if _, err := DecodeEntries(tt.b); err == nil {
			t.Errorf("%s: decoded without error", tt.name)
		}
	}
}

func TestMessagesRoundTrip(t *testing.T) {
	hb := Heartbeat{Role: RolePrimary, Epoch: Epoch{5, 1}, Applied: 10, Commit: 9, Rev: 42, SentAt: 123, Echo: 99, LedLast: true, CatchingUp: true, MaxTerm: 6, EpochStart: 4, SoloFrom: 8, HeardAgo: 250 * time.Millisecond, Run: 0xfeed, EchoRun: 1 << 63}
	if got, err := DecodeHeartbeat(hb.Encode()); err != nil || got != hb {
		t.Fatalf("heartbeat: %+v %v", got, err)
	}
	f := Forward{Op: ForwardWrite, ReqID: 77, Data: []byte("req")}
	if got, err := DecodeForward(f.Encode()); err != nil || got.Op != f.Op || got.ReqID != f.ReqID || string(got.Data) != "req" {
		t.Fatalf("forward: %+v %v", got, err)
	}
	rp := Reply{ReqID: 3, TTL: -1, Err: ReplyLeaseNotFound}
	if got, err := DecodeReply(rp.Encode()); err != nil || got != rp {
		t.Fatalf("reply: %+v %v", got, err)
	}
	c := CatchupReq{From: 100, Prev: Epoch{4, 2}}
	if got, err := DecodeCatchupReq(c.Encode()); err != nil || got != c {
		t.Fatalf("catchup: %+v %v", got, err)
	}
	h := []EpochRecord{{Epoch{1, 1}, 1, true}, {Epoch{2, 1}, 5, false}}
	if got, err := DecodeEpochs(EncodeEpochs(h)); err != nil || len(got) != 2 || got[0] != h[0] || got[1] != h[1] {
		t.Fatalf("epochs: %+v %v", got, err)
	}
	if _, err := DecodeHeartbeat(hb.Encode()[:5]); err == nil {
		t.Fatal("truncated heartbeat decoded")
	}
}

// HeardAgo travels to the millisecond, "never" survives, and a heartbeat
// from a sender that does not report it reads as hearing.
func TestHeartbeatHeardAgo(t *testing.T) {
	const within = 500 * time.Millisecond
	tests := []struct {
		name  string
		ago   time.Duration
		want  time.Duration
		hears bool
	}{
		{"just now", 0, 0, true},
		{"sub-millisecond is cut", 1500 * time.Microsecond, time.Millisecond, true},
		{"at the bound", within, within, true},
		{"past the bound", within + time.Millisecond, within + time.Millisecond, false},
		{"never", -1, -1, false},
	}
	for _, tt := range tests {
		hb := Heartbeat{Role: RoleReplica, HeardAgo: tt.ago}
		got, err := DecodeHeartbeat(hb.Encode())
		if err != nil || got.HeardAgo != tt.want || got.Hears(within) != tt.hears {
			t.Errorf("%s: decoded HeardAgo %v (hears %v), err %v; want %v (hears %v)", tt.name, got.HeardAgo, got.Hears(within), err, tt.want, tt.hears)
		}
	}
	old := Heartbeat{Role: RoleReplica, HeardAgo: -1}
	b := old.Encode()
	// A sender older still has no runs (two 8-byte fields at the end).
	b = b[:len(b)-16]
	got, err := DecodeHeartbeat(b[:len(b)-1]) // the field is one byte here
	if err != nil || !got.Hears(0) {
		t.Errorf("heartbeat without HeardAgo: %+v %v; want it taken as hearing", got, err)
	}
	huge := append(append([]byte(nil), b[:len(b)-1]...), binary.AppendUvarint(nil, 1<<63)...)
	if _, err := DecodeHeartbeat(huge); err == nil {
		t.Error("a HeardAgo past a Duration's range decoded")
	}
}

func TestSoloSuffix(t *testing.T) {
	const self, peer = 1, 2
	tests := []struct {
		name    string
		own     []EpochRecord
		leader  []EpochRecord
		applied uint64
		want    bool
	}{
		{"synchronous suffix only", []EpochRecord{{Epoch{3, self}, 1, false}}, []EpochRecord{{Epoch{3, self}, 1, false}, {Epoch{4, peer}, 5, true}}, 9, false},
		{"solo epoch with entries", []EpochRecord{{Epoch{3, self}, 1, false}, {Epoch{5, self}, 8, true}}, []EpochRecord{{Epoch{3, self}, 1, false}, {Epoch{4, peer}, 5, true}}, 9, true},
		{"solo epoch without entries", []EpochRecord{{Epoch{2, self}, 1, true}, {Epoch{3, self}, 1, false}}, []EpochRecord{{Epoch{3, self}, 1, false}}, 4, false},
		{"solo epoch the leader knows", []EpochRecord{{Epoch{5, self}, 1, true}}, []EpochRecord{{Epoch{5, self}, 1, true}, {Epoch{6, peer}, 4, false}}, 3, false},
		{"solo epoch starting past applied", []EpochRecord{{Epoch{5, self}, 10, true}}, nil, 9, false},
		{"the peer's solo epoch", []EpochRecord{{Epoch{5, peer}, 1, true}}, nil, 9, false},
	}
	for _, tt := range tests {
		if got := SoloSuffix(tt.own, tt.leader, self, tt.applied); got != tt.want {
			t.Errorf("%s: SoloSuffix = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestDivergence(t *testing.T) {
	const a, b = 1, 2
	tests := []struct {
		name        string
		own, leader []EpochRecord
		applied     uint64
		want        uint64
	}{
		{"prefix", []EpochRecord{{Epoch{1, a}, 1, false}}, []EpochRecord{{Epoch{1, a}, 1, false}, {Epoch{2, b}, 9, true}}, 6, 6},
		{"both went solo", []EpochRecord{{Epoch{1, a}, 1, false}, {Epoch{2, a}, 8, true}}, []EpochRecord{{Epoch{1, a}, 1, false}, {Epoch{3, b}, 6, true}}, 12, 5},
		{"own solo epoch adopted shared entries", []EpochRecord{{Epoch{1, a}, 1, false}, {Epoch{2, a}, 5, true}}, []EpochRecord{{Epoch{1, a}, 1, false}, {Epoch{3, b}, 7, true}}, 9, 4},
		{"nothing shared", []EpochRecord{{Epoch{1, a}, 1, true}}, []EpochRecord{{Epoch{1, b}, 1, true}}, 3, 0},
		{"empty", nil, []EpochRecord{{Epoch{1, b}, 1, true}}, 0, 0},
	}
	for _, tt := range tests {
		if got := Divergence(tt.own, tt.leader, tt.applied); got != tt.want {
			t.Errorf("%s: Divergence = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestSoloFromAndYield(t *testing.T) {
	const a, b = 1, 2
	h := []EpochRecord{{Epoch{1, a}, 1, false}, {Epoch{2, b}, 5, true}, {Epoch{3, a}, 9, true}, {Epoch{4, a}, 12, true}}
	if got := SoloFrom(h, a); got != 9 {
		t.Errorf("SoloFrom(a) = %d, want 9", got)
	}
	if got := SoloFrom(h, b); got != 0 {
		t.Errorf("SoloFrom(b) = %d, want 0", got)
	}
	if got := SoloFrom(h[:1], a); got != 0 {
		t.Errorf("SoloFrom of a synchronous epoch = %d, want 0", got)
	}
	yield := []struct {
		wrote, peerWrote, preferred, want bool
	}{
		{false, true, true, true},   // nothing of ours to keep: catch up
		{true, false, false, false}, // the peer has nothing to keep
		{true, true, true, false},   // both: the preferred zone wins
		{true, true, false, true},
		{false, false, true, false}, // neither: the preferred zone leads
		{false, false, false, true},
	}
	for _, tt := range yield {
		if got := YieldAfterSplit(tt.wrote, tt.peerWrote, tt.preferred); got != tt.want {
			t.Errorf("YieldAfterSplit(%v, %v, %v) = %v, want %v", tt.wrote, tt.peerWrote, tt.preferred, got, tt.want)
		}
	}
}

func TestDetector(t *testing.T) {
	const L = int64(time.Second)
	now := int64(1)
	d := NewDetector(time.Second, 100*time.Millisecond, 1, now)

	if d.HoldsLease(now) || !d.PeerLeaseExpired(now) {
		t.Fatal("a fresh detector holds or grants a lease")
	}
	// The peer echoes our send time: we hold a lease until then + L.
	sent, _ := d.Outgoing(now)
	d.Heard(&Heartbeat{SentAt: 500, Echo: sent}, now+10)
	if !d.HoldsLease(sent+L-1) || d.HoldsLease(sent+L) {
		t.Fatal("own lease not timed from the echoed send time")
	}
	// We echo the peer's send time in our next heartbeat: the peer's
	// lease from us ends at most L + drift after that.
	at := now + 20
	if _, echo := d.Outgoing(at); echo != 500 {
		t.Fatalf("echo = %d, want 500", echo)
	}
	if d.PeerLeaseExpired(at+L) || !d.PeerLeaseExpired(at+L+int64(100*time.Millisecond)+1) {
		t.Fatal("peer lease bound wrong")
	}
	// Re-echoing the same (stale) send time does not extend the bound.
	d.Outgoing(at + L)
	if !d.PeerLeaseExpired(at + 2*L) {
		t.Fatal("a stale echo extended the peer's lease")
	}
	// Silence for a full lease of running time: dead; a freeze of this
	// node restarts the count.
	d.Tick(now + 10)
	if d.PeerDead(now + 10 + L/2) {
		t.Fatal("dead too early")
	}
	for ts := now + 10; ts <= now+10+L+L/8; ts += L / 8 {
		d.Tick(ts)
	}
	if !d.PeerDead(now + 10 + L + L/8) {
		t.Fatal("not dead after a lease of silence")
	}
	frozenUntil := now + 10 + 3*L
	d.Tick(frozenUntil) // a gap of ~2L: this node was frozen
	if d.PeerDead(frozenUntil + L/2) {
		t.Fatal("a node's own freeze counted against its peer")
	}
	// With a freeze grace, nothing is declared dead until it has passed.
	t0 := int64(1)
	g := NewDetector(time.Second, 0, 1, t0)
	g.FreezeGrace = 3 * time.Second
	g.Tick(t0 + 2*L) // a freeze of ~2L
	if g.PeerDead(t0+2*L+2*L) || !g.InFreezeGrace(t0+2*L+2*L) {
		t.Fatal("peer declared dead within the freeze grace")
	}
	if !g.PeerDead(t0 + 2*L + 3*L + 1) {
		t.Fatal("peer not dead after the freeze grace and a lease of silence")
	}
}

// TestDetectorFreezeGraceFrom: a stall shorter than FreezeGraceFrom only
// restarts the count of the peer's silence; a longer freeze also starts the
// grace.
func TestDetectorFreezeGraceFrom(t *testing.T) {
	L := int64(time.Second)
	for _, tc := range []struct {
		name      string
		gap       int64
		wantGrace bool
	}{
		{"tick interval, no freeze", L / 10, false},
		{"short stall", L / 2, false},
		{"just below the threshold", L - 1, false},
		{"at the threshold", L, true},
		{"SIGSTOP of three leases", 3 * L, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := int64(1)
			d := NewDetector(time.Second, 0, 1, t0)
			d.FreezeGrace = 3 * time.Second
			d.FreezeGraceFrom = time.Second
			d.Tick(t0)
			at := t0 + tc.gap
			d.Tick(at)
			if got := d.InFreezeGrace(at); got != tc.wantGrace {
				t.Fatalf("InFreezeGrace after a gap of %v = %v, want %v", time.Duration(tc.gap), got, tc.wantGrace)
			}
			stalled := tc.gap > L/4
			if got := d.RunningSince() == at; got != stalled {
				t.Fatalf("running count restarted = %v, want %v", got, stalled)
			}
			// Dead after a lease of silence from the restart, plus the
			// grace where one began.
			deadAt := at + L + 1
			if tc.wantGrace {
				deadAt = at + 3*L
			}
			if !stalled {
				deadAt = t0 + L + 1
			}
			for ts := at; ts < deadAt; ts += L / 8 {
				d.Tick(ts)
			}
			d.Tick(deadAt)
			if !d.PeerDead(deadAt) {
				t.Fatalf("peer not dead at %v after the gap", time.Duration(deadAt-at))
			}
		})
	}
}

func TestHandoverRoundTrip(t *testing.T) {
	for _, h := range []Handover{
		{Epoch: Epoch{7, 0xabc}, Last: 1234},
		{Epoch: Epoch{8, 1}, Last: 1, Final: true},
		{Epoch: Epoch{9, 2}, Last: 99, Refused: true},
	} {
		if got, err := DecodeHandover(h.Encode()); err != nil || got != h {
			t.Fatalf("handover %+v: got %+v %v", h, got, err)
		}
	}
	h := Handover{Epoch: Epoch{7, 1}, Last: 3}
	if _, err := DecodeHandover(h.Encode()[:4]); err == nil {
		t.Fatal("truncated handover decoded")
	}
}

// TestDetectorPeerDeaf: a peer that reports not hearing this node for over
// Lease/2 is deaf to it, unless a freeze of this node within that time
// explains the silence (all of it but Lease/2 at most); a peer that never heard it is deaf once this node
// has run for Lease/2.
func TestDetectorPeerDeaf(t *testing.T) {
	L := time.Second
	for _, tc := range []struct {
		name     string
		runFor   time.Duration // this node's run since its last freeze
		heardAgo time.Duration // what the peer reports (-1: never)
		want     bool
	}{
		{"peer hears this node", 10 * L, 100 * time.Millisecond, false},
		{"at Lease/2", 10 * L, L / 2, false},
		{"past Lease/2", 10 * L, L/2 + time.Millisecond, true},
		{"a full lease", 10 * L, L, true},
		{"this node froze within the silence", 300 * time.Millisecond, L, false},
		{"this node froze before the silence", L, 800 * time.Millisecond, true},
		{"a short freeze early in a long silence", 3 * L, 4 * L, true},
		{"this node ran for only Lease/2 since its freeze", L / 2, 4 * L, false},
		{"never heard, this node just started", L / 4, -1, false},
		{"never heard, this node sent for a while", L, -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t0 := int64(1)
			d := NewDetector(L, 0, 1, t0)

			d.Tick(t0 + int64(10*L)) // a freeze: running since t0+10L
			now := t0 + int64(10*L) + int64(tc.runFor)
			h := Heartbeat{Role: RoleReplica, HeardAgo: tc.heardAgo}
			if got := d.PeerDeaf(&h, now); got != tc.want {
				t.Fatalf("PeerDeaf = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestDetectorSilence: the silence a heartbeat reports runs on this node's
// own running time, and is -1 before the peer was ever heard.
func TestDetectorSilence(t *testing.T) {
	L := int64(time.Second)
	t0 := int64(1)
	d := NewDetector(time.Second, 0, 1, t0)

	if got := d.Silence(t0); got != -1 {
		t.Fatalf("Silence before hearing = %v, want -1", got)
	}
	d.Heard(&Heartbeat{SentAt: 1}, t0)
	d.Tick(t0 + L/8)
	if got := d.Silence(t0 + L/4); got != time.Duration(L/4) {
		t.Fatalf("Silence = %v, want %v", got, time.Duration(L/4))
	}
	d.Tick(t0 + 2*L) // a freeze: the count restarts
	if got := d.Silence(t0 + 2*L + L/8); got != time.Duration(L/8) {
		t.Fatalf("Silence after a freeze = %v, want %v", got, time.Duration(L/8))
	}
	if got := d.HeardAgo(t0 + 2*L + L/8); got != time.Duration(2*L+L/8) {
		t.Fatalf("HeardAgo = %v, want the raw %v", got, time.Duration(2*L+L/8))
	}
}

// TestDetectorSilenceBeforeFreeze: a node that had already reported not
// hearing its peer (a silence over Lease/2 of its running time) when it
// froze reports the whole silence after the thaw, until it hears the peer
// again.
func TestDetectorSilenceBeforeFreeze(t *testing.T) {
	L := int64(time.Second)
	t0 := int64(1)
	d := NewDetector(time.Second, 0, 1, t0)
	d.Heard(&Heartbeat{SentAt: 1}, t0)
	for now := t0 + L/8; now <= t0+L; now += L / 8 {
		d.Tick(now) // running, hearing nothing
	}
	d.Tick(t0 + 3*L) // a freeze of two leases
	if got := d.Silence(t0 + 3*L + L/8); got != time.Duration(3*L+L/8) {
		t.Fatalf("Silence after a freeze begun deaf = %v, want %v", got, time.Duration(3*L+L/8))
	}
	d.Tick(t0 + 3*L + L/8)
	d.Tick(t0 + 5*L) // a second freeze: still deaf
	if got := d.Silence(t0 + 5*L + L/8); got != time.Duration(5*L+L/8) {
		t.Fatalf("Silence after a second freeze = %v, want %v", got, time.Duration(5*L+L/8))
	}
	d.Heard(&Heartbeat{SentAt: 2}, t0+5*L+L/4)
	if got := d.Silence(t0 + 5*L + L/2); got != time.Duration(L/4) {
		t.Fatalf("Silence once heard again = %v, want %v", got, time.Duration(L/4))
	}
	d.Tick(t0 + 5*L + L/2)
	d.Tick(t0 + 7*L) // a freeze begun hearing: the count restarts
	if got := d.Silence(t0 + 7*L + L/8); got != time.Duration(L/8) {
		t.Fatalf("Silence after a freeze begun hearing = %v, want %v", got, time.Duration(L/8))
	}
}

// TestDetectorSilenceStalledLoop: a node whose loop stalls again and again
// (a slow fsync) takes its peer's heartbeats late, stamped long before it
// handles them, but never runs Lease/2 without one: each stall restarts
// its silence, however old the newest heartbeat is.
func TestDetectorSilenceStalledLoop(t *testing.T) {
	L := int64(time.Second)
	t0 := int64(1)
	d := NewDetector(time.Second, 0, 1, t0)
	d.Heard(&Heartbeat{SentAt: 1}, t0)
	now := t0
	for i := int64(1); i <= 4; i++ {
		now += 2 * L // stalled in fsync
		d.Tick(now)
		// The loop takes one queued heartbeat, which arrived early in
		// the first stall, and stalls again right after.
		d.Heard(&Heartbeat{SentAt: 1 + i}, t0+i*L/64)
		now += L / 8
		d.Tick(now)
		if got := d.Silence(now); got != time.Duration(L/8) {
			t.Fatalf("stall %d: Silence = %v, want %v (counted from the thaw)", i, got, time.Duration(L/8))
		}
	}
}
