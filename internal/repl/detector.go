package repl

import "time"

// Detector times, on the node's own monotonic clock (read by the caller and
// passed in as now, in ns; it never reads a clock itself), the leases the two
// nodes hold from each other, and decides when the peer is dead. It is
// owned by the apply loop (not safe for concurrent use).
//
// The lease rule: a node holds a lease from its peer until E + Lease, where
// E is the newest of its own heartbeat send times that the peer has echoed
// back. Every reading is on the node's own clock, so clocks of the two
// machines are never compared. The peer's lease from this node ends, in
// real time, no later than the moment this node sent its newest fresh echo
// plus Lease; Drift covers clock rate differences.
//
// The replica's read lease and the primary's role lease are the same
// mechanism seen from the two sides.
//
// Runs: every detector has a run identity (Run), sent in every heartbeat
// with the run whose send time is echoed (EchoRun). A restarted node's
// clock starts again near zero, so send times of two runs cannot be
// compared: an echo counts only for the run that sent the time, and when
// the peer's run changes nothing of its earlier run carries over (the
// echoed time restarts, and the lease this node held from the earlier run
// ends: that run's promise died with it). What this node granted the
// earlier run is kept as it was (PeerLeaseExpired stays as late as it
// was): a late heartbeat of the earlier run can then never shorten the
// lease of the later one.
type Detector struct {
	Lease time.Duration
	Drift time.Duration
	// FreezeGrace is how long, after this node notices its own freeze, it
	// declares nothing dead: the transport may need that long to find the
	// peer again (DDS drops a participant silent past its own lease).
	FreezeGrace time.Duration
	// FreezeGraceFrom is the shortest freeze that starts FreezeGrace (0:
	// every freeze does). A shorter stall (a loaded machine, a slow fsync)
	// only restarts the count of the peer's silence: the transport has not
	// lost the peer, so waiting out the grace would only lengthen a real
	// failover.
	FreezeGraceFrom time.Duration
	graceUntil      int64
	// Run identifies this detector's run (chosen by the caller at random,
	// never 0).
	Run uint64

	lastTick     int64
	runningSince int64     // start of this node's current uninterrupted run
	peerSeen     int64     // when the newest peer heartbeat arrived (0: never)
	peerRun      uint64    // the run of the newest peer heartbeat (0: none yet, or a sender without runs)
	ended        [4]uint64 // runs of the peer known to have ended (a ring; 0: empty slot)
	endedNext    int
	peerSentAt   int64 // newest peer SentAt in peerRun (peer's clock), echoed back
	echoSentAt   int64 // when a heartbeat first carried peerSentAt
	echoPending  bool  // peerSentAt not yet sent back
	leaseUntil   int64 // own lease from the peer
	// lapsedFrozen: this node's lease from the peer ran out during its
	// last freeze longer than Lease/2, (frozeFrom, thawedAt]
	// (LapsedFrozen).
	lapsedFrozen        bool
	frozeFrom, thawedAt int64
	// deafFrom is peerSeen when this node last stalled (a Tick gap over
	// Lease/4) already reporting the peer's silence as deafness (over
	// Lease/2, Silence); 0: none. While no newer heartbeat is heard
	// (peerSeen == deafFrom), stalls do not restart that count.
	deafFrom int64
}

// NewDetector returns a detector for the run run (random, never 0: see
// the type's comment) that has not heard from its peer, started at now on
// the caller's monotonic clock (ns, >= 1).
func NewDetector(lease, drift time.Duration, run uint64, now int64) *Detector {
	return &Detector{Lease: lease, Drift: drift, Run: run, lastTick: now, runningSince: now}
}

// Tick is called from the apply loop several times per Lease. A gap longer
// than Lease/4 means this node itself was frozen (SIGSTOP, a stall in
// fsync, a VM pause): the peer's silence is counted again from now. It
// returns the gap since the previous Tick (ns).
func (d *Detector) Tick(now int64) (gap int64) {
	gap = now - d.lastTick
	if gap > int64(d.Lease/4) {
		if d.peerSeen != 0 && d.Silence(d.lastTick) > d.Lease/2 {
			d.deafFrom = d.peerSeen
		}
		d.runningSince = now
		if gap >= int64(d.FreezeGraceFrom) {
			d.graceUntil = now + int64(d.FreezeGrace)
		}
		if gap > int64(d.Lease/2) {
			d.frozeFrom, d.thawedAt = d.lastTick, now
			// No lease held when the freeze began, though the peer
			// was heard just before (LapsedFrozen).
			if d.leaseUntil <= d.frozeFrom && d.peerSeen != 0 && d.frozeFrom-d.peerSeen <= int64(d.Lease/2) {
				d.lapsedFrozen = true
			}
			d.noteLapse()
		}
	}
	d.lastTick = now
	return gap
}

// Outgoing returns the SentAt and Echo to put in a heartbeat sent now (its
// EchoRun is PeerRun).
func (d *Detector) Outgoing(now int64) (sentAt, echo int64) {
	if d.echoPending {
		d.echoSentAt = now
		d.echoPending = false
	}
	return now, d.peerSentAt
}

// PeerRun is the peer's run whose send time Outgoing echoes.
func (d *Detector) PeerRun() uint64 { return d.peerRun }

// Heard records a heartbeat from the peer, received now.
func (d *Detector) Heard(h *Heartbeat, now int64) {
	if now > d.peerSeen {
		d.peerSeen = now
	}
	if h.Run != d.peerRun {
		// Another run of the peer (see the type's comment). The old
		// one has ended: two runs of a node never overlap (they hold
		// the same data file).
		d.endRun(d.peerRun)
		d.peerRun = h.Run
		d.peerSentAt = 0
		d.echoPending = false
		d.leaseUntil = 0
	}
	if h.SentAt > d.peerSentAt {
		d.peerSentAt = h.SentAt
		d.echoPending = true
	}
	// An echo of another run's send time says nothing about this run. A
	// peer that predates run identities (Run 0) echoes without naming
	// the run, as before.
	if h.Run != 0 && h.EchoRun != d.Run {
		return
	}
	if h.Echo > 0 && h.Echo+int64(d.Lease) > d.leaseUntil {
		d.leaseUntil = h.Echo + int64(d.Lease)
	}
	d.noteLapse()
}

// noteLapse sets lapsedFrozen when the lease ends within the last freeze
// or within Lease/2 after its thaw (a grant sent before the freeze may
// arrive only at the thaw, having waited it out in transit: it counts as
// held from before the freeze), and clears it once a grant reaches past
// that. Lease/2 after the thaw: this node's count of the peer's silence
// restarted at the thaw, so for that long its reports said it heard the
// peer, and a lease ending then told the peer nothing either (sim seeds
// 426635, 713606, 131484, 403732, 233076: a cut of the primary ->
// replica direction, a freeze of the replica that began before its
// reports said so, and the primary, its acks overdue, going solo while
// the replica, told nothing, took over).
func (d *Detector) noteLapse() {
	switch {
	case d.leaseUntil > d.thawedAt+int64(d.Lease/2):
		d.lapsedFrozen = false
	case d.leaseUntil > d.frozeFrom:
		d.lapsedFrozen = true
	}
}

// LapsedFrozen reports whether this node's lease from its peer ran out
// during a freeze of its own longer than Lease/2 or within Lease/2 after
// it (noteLapse), and no grant has reached past that since. Its reports of not hearing the peer
// (HeardAgo) stopped while it was frozen and count again only from the
// thaw, so the peer, hearing nothing from it for most of a lease (a few
// lost heartbeats make up the rest), may have taken it for dead and, the
// lease having ended, led alone without being told to hold off.
// Heartbeats heard at the thaw prove nothing: they may have waited out
// the freeze in transit (their grants then end before the thaw).
//
// A freeze that began while this node held no lease at all, though it
// had heard the peer within Lease/2 before (a lease not granted yet: the
// primary went synchronous moments before), counts alike: its reports
// said it heard the peer, so they gave the peer no reason to hold off.
//
// Shorter stalls, common on a loaded machine, and freezes that begin
// after the lease has ended while the peer was not heard (this node was
// running when it lapsed, and its reports of not hearing the peer went
// out) do not count: holding a replica back for them would turn the
// failover of a single fault into a wait for the operator.
func (d *Detector) LapsedFrozen() bool { return d.lapsedFrozen }

// endRun records that the peer's run has ended.
func (d *Detector) endRun(run uint64) {
	if run == 0 || d.Ended(run) {
		return
	}
	d.ended[d.endedNext] = run
	d.endedNext = (d.endedNext + 1) % len(d.ended)
}

// Ended reports whether run is a run of the peer known to have ended (it
// said it was leaving, or a later run was heard): its heartbeats still in
// flight are stale news and must be ignored. Only the last few ended runs
// are remembered; a heartbeat of an older one would have to outlive
// several restarts in transit.
func (d *Detector) Ended(run uint64) bool {
	for _, r := range d.ended {
		if r != 0 && r == run {
			return true
		}
	}
	return false
}

// PeerLeft records that the peer's current run stopped on purpose (its
// leaving message). Its lease from this node was given up by the peer
// itself; what this node granted it is kept as it was.
func (d *Detector) PeerLeft() { d.endRun(d.peerRun) }

// PeerKnowsRun reports whether the heartbeat h echoes a send time of this
// run: the peer has heard this run, and so has dropped any lease it held
// from an earlier run of this node.
func (d *Detector) PeerKnowsRun(h *Heartbeat) bool { return h.EchoRun == d.Run && h.Echo > 0 }

// LeaseNotRenewed reports whether the newest peer heartbeat arrived
// after the lease this node held from the peer had ended, without
// renewing it: the peer had heard nothing from this node for a lease (or
// echoed nothing new). 0 leases (none held yet, or forgotten) do not count.
func (d *Detector) LeaseNotRenewed() bool {
	return d.leaseUntil != 0 && d.peerSeen > d.leaseUntil
}

// HoldsLease reports whether the peer's echoes still vouch for this node.
func (d *Detector) HoldsLease(now int64) bool { return now < d.leaseUntil }

// PeerHeard reports whether a heartbeat from the peer arrived within the
// last Lease (no freeze discount: what the peer said is that recent).
func (d *Detector) PeerHeard(now int64) bool {
	return d.peerSeen != 0 && now-d.peerSeen <= int64(d.Lease)
}

// HeardAgo is how long ago the newest peer heartbeat arrived (-1: never).
func (d *Detector) HeardAgo(now int64) time.Duration {
	if d.peerSeen == 0 {
		return -1
	}
	return time.Duration(now - d.peerSeen)
}

// Silence is how long the peer has been silent on this node's own running
// time, for the HeardAgo of an outgoing heartbeat; -1: never heard. A
// stall of this node (a Tick gap) restarts the count, as it does for
// PeerDead, unless the count had already passed Lease/2 when the stall
// began: the heartbeats sent before it then told the peer that this node
// does not hear it (PeerDeaf), and the stall has not changed that. Restarted
// at the thaw, it said "heard a moment ago" to a primary holding off for
// this node, which led again while this node went on to take over (sim
// seed 9049, freeze_heardago).
//
// The rule looks only at what this node reported before the stall, not at
// when it last heard the peer: a replica whose loop is stalled again and
// again on a slow fsync takes its peer's heartbeats late (they queue behind
// entries), so its newest one may be long past, yet between stalls it never
// ran Lease/2 without one; it still hears the peer, and reporting the raw
// silence made its primary wait for a takeover that never came.
func (d *Detector) Silence(now int64) time.Duration {
	if d.peerSeen == 0 {
		return -1
	}
	since := max(d.peerSeen, d.runningSince)
	if d.deafFrom == d.peerSeen {
		since = d.peerSeen
	}
	return time.Duration(now - since)
}

// PeerDeaf reports whether the heartbeat h, received at now, says that the
// peer has not heard this node for over Lease/2 although this node ran
// without a freeze for over Lease/2 of that time (so it sent heartbeats
// the peer did not hear): the link from this node to the peer is
// failing, and the peer is about to declare it dead. A freeze of this
// node explains the silence only up to its end: a short stall early in a
// long silence does not (sim seed 267933: it did, the primary went solo
// beside a replica that had long reported not hearing it and promoted).
func (d *Detector) PeerDeaf(h *Heartbeat, now int64) bool {
	if h.Hears(d.Lease / 2) {
		return false
	}
	// Since HeardAgo > Lease/2, the running part of the silence is over
	// Lease/2 exactly when this node has run for that long (or for
	// ever, never heard).
	return now-d.runningSince > int64(d.Lease/2)
}

// EchoStale reports whether the peer's heartbeat h, received at at,
// echoes none of this node's send times from the last Lease/2 of this
// node's running time before at: the peer had not heard this node for
// over half a lease when it sent h, whatever its HeardAgo says (a stall
// of the peer restarts the count HeardAgo reports, Silence; the echo is
// this node's own clock reading, and no stall of the peer resets it).
// Only an echo of this run counts: another run's send times are on
// another clock, and a peer that grants nothing (waiting, or a primary
// withholding the lease) echoes nothing. A stall of this node restarts
// the count, as for PeerDead.
func (d *Detector) EchoStale(h *Heartbeat, at int64) bool {
	if !d.PeerKnowsRun(h) {
		return false
	}
	return at-max(h.Echo, d.runningSince) > int64(d.Lease/2)
}

// NewestEchoStale is EchoStale for the newest peer heartbeat h, taken
// when it arrived.
func (d *Detector) NewestEchoStale(h *Heartbeat) bool { return d.EchoStale(h, d.peerSeen) }

// RunningSince is the start of this node's current uninterrupted run:
// timeouts measured by the node start no earlier.
func (d *Detector) RunningSince() int64 { return d.runningSince }

// PeerDead reports whether the peer is silent for a full Lease of this
// node's uninterrupted running time.
func (d *Detector) PeerDead(now int64) bool {
	if now < d.graceUntil {
		return false
	}
	since := d.peerSeen
	if d.runningSince > since {
		since = d.runningSince
	}
	return now-since > int64(d.Lease)
}

// InFreezeGrace reports whether this node is within FreezeGrace of a
// freeze it noticed.
func (d *Detector) InFreezeGrace(now int64) bool { return now < d.graceUntil }

// PeerLeaseExpired reports whether the peer can no longer hold a lease
// from this node: every echo this node sent is older than Lease + Drift.
func (d *Detector) PeerLeaseExpired(now int64) bool {
	if d.echoSentAt == 0 {
		return true
	}
	return now > d.echoSentAt+int64(d.Lease+d.Drift)
}

// ForgetPeer drops the lease this node holds (after a role change that
// must not reuse it).
func (d *Detector) ForgetPeer() { d.leaseUntil, d.lapsedFrozen = 0, false }

// LeaseUntil is the detector time until which this node holds its peer's
// lease (0: none).
func (d *Detector) LeaseUntil() int64 { return d.leaseUntil }
