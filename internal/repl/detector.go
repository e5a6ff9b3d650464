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
//
// Run order: two runs of the peer never overlap (they hold the same data
// file), but run IDs are random, and the network may hand this node a
// heartbeat of the peer's previous run after the first ones of its new
// run. Which of two runs is the newer is known only from evidence:
//   - a run that left (its leaving message) has ended;
//   - a run R is newer than a run Q when R echoes a send time of this
//     node's current run later than the arrival of a heartbeat of Q: R was
//     alive after Q was (provePast). Both times are on this node's own
//     clock, so nothing of the peer's clock is trusted. Echoes come only
//     from a peer that grants (a waiting node grants nothing), so this
//     proof may come late or never;
//   - otherwise a heartbeat of a run other than the current one is taken
//     as news when it is newer than every heartbeat taken from its run
//     before (or its run was never heard): the current run changes to it.
//     A superseded run is remembered with its newest SentAt, so its
//     duplicates and overtaken heartbeats are dropped, but it is not
//     ended: a late heartbeat of the previous run may have superseded the
//     live one (sim seed 427781), and the live run's next heartbeat makes
//     it current again. A dead run sent finitely many heartbeats, so the
//     live run wins after at most that many changes, and the proof above
//     stops them once the live run grants.
//
// Rules rejected (their hazards): a run order from a counter persisted in
// the data dir (the high bits of the run ID) breaks when a data dir is
// wiped or replaced (a fresh node's runs would look older than the dead
// one's, and be dropped for ever) and with peers whose runs are random
// (older versions); ending the run this node switches away from (the
// rule this one replaced) is right only if this node heard the old run
// before the new one, which fails when this node itself restarted or the
// old run's heartbeats were held up, and then the live run is dropped for
// ever; ordering by the peer's SentAt needs a peer clock that keeps
// counting across its restarts and is never stepped back, and the
// driver's is a monotonic clock that starts again near zero in every
// process.
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
	runningSince int64  // start of this node's current uninterrupted run
	peerSeen     int64  // when the newest peer heartbeat arrived (0: never)
	peerRun      uint64 // the run of the newest peer heartbeat taken as news (0: none yet, or a sender without runs)
	runHeardAt   int64  // when the newest heartbeat of peerRun arrived
	// runs: what this node knows of the peer's runs other than peerRun,
	// and of peerRun once it has left (a ring, runsNext its next slot;
	// run 0: an empty slot). A run that falls out of the ring is taken
	// as never heard.
	runs        [4]pastRun
	runsNext    int
	peerSentAt  int64 // newest peer SentAt in peerRun (peer's clock), echoed back
	echoSentAt  int64 // when a heartbeat first carried peerSentAt
	echoPending bool  // peerSentAt not yet sent back
	leaseUntil  int64 // own lease from the peer
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

// Heard records a heartbeat from the peer, received now, whose echo
// grants a lease.
func (d *Detector) Heard(h *Heartbeat, now int64) { d.HeardFrom(h, now, true) }

// HeardFrom records a heartbeat from the peer, received now; its echo
// extends this node's lease only if grants (the caller judges whether the
// sender's role makes its echo a promise to this node's role). Any echo
// of this run still proves the peer's runs as Heard does (provePast): it
// says the sender was alive after that send time, whatever its role.
func (d *Detector) HeardFrom(h *Heartbeat, now int64, grants bool) {
	if now > d.peerSeen {
		d.peerSeen = now
	}
	if h.Run != d.peerRun {
		// Another run of the peer, newer or older (see the type's
		// comment): it becomes the current one. The run it supersedes
		// is remembered, not ended.
		d.remember(d.peerRun, d.peerSentAt, d.runHeardAt)
		d.peerRun = h.Run
		d.peerSentAt = 0
		d.echoPending = false
		d.leaseUntil = 0
	}
	d.runHeardAt = now
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
	if h.Run != 0 && h.Echo > 0 {
		d.provePast(h.Echo)
	}
	if grants && h.Echo > 0 && h.Echo+int64(d.Lease) > d.leaseUntil {
		d.leaseUntil = h.Echo + int64(d.Lease)
	}
	d.noteLapse()
}

// pastRun is what a detector remembers of one run of its peer.
type pastRun struct {
	run     uint64
	sentAt  int64 // the newest SentAt taken from it (its own clock)
	heardAt int64 // when that heartbeat arrived (this node's clock)
	ended   bool  // it left, or a later run was proven (provePast)
}

// remember records the run superseded by another: its newest SentAt and
// when that arrived. Run 0 (none yet, or a sender without runs, whose
// clock restarts unseen) is not remembered.
func (d *Detector) remember(run uint64, sentAt, heardAt int64) {
	if run == 0 {
		return
	}
	if p := d.past(run); p != nil {
		p.sentAt, p.heardAt = max(p.sentAt, sentAt), max(p.heardAt, heardAt)
		return
	}
	d.runs[d.runsNext] = pastRun{run: run, sentAt: sentAt, heardAt: heardAt}
	d.runsNext = (d.runsNext + 1) % len(d.runs)
}

// past returns the record of run (nil: none).
func (d *Detector) past(run uint64) *pastRun {
	for i := range d.runs {
		if run != 0 && d.runs[i].run == run {
			return &d.runs[i]
		}
	}
	return nil
}

// provePast ends every superseded run heard before echo, a send time of
// this node's current run that the current peer run echoed: the current
// run was alive after echo (it received that heartbeat), the other run
// before it (it had sent what arrived then), and two runs of the peer
// never overlap, so the other run is the older and has ended. Strictly
// before: a heartbeat that arrived at echo itself could have been sent
// at that instant. Both times are on this node's clock, which only
// moves forward within its run (the detector lives for one run).
func (d *Detector) provePast(echo int64) {
	for i := range d.runs {
		if p := &d.runs[i]; p.run != 0 && p.run != d.peerRun && p.heardAt != 0 && p.heardAt < echo {
			p.ended = true
		}
	}
}

// Stale reports whether the heartbeat h must be ignored because of its
// run: a run known to have ended, or a superseded run whose heartbeat is
// no newer than one already taken from it (a duplicate, or overtaken in
// transit). Heartbeats of the current run are not judged here (the caller
// drops those overtaken by a newer one); those of a run never heard, or
// newer than everything heard from their run, are news: Heard makes
// their run the current one.
func (d *Detector) Stale(h *Heartbeat) bool {
	p := d.past(h.Run)
	switch {
	case p == nil:
		return false
	case p.ended:
		return true
	case h.Run == d.peerRun:
		return false
	}
	return h.SentAt <= p.sentAt
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

// Ended reports whether run is a run of the peer known to have ended: it
// said it was leaving, or a later run was proven (provePast). Its
// heartbeats still in flight are stale news (Stale). Only the last few
// runs are remembered; a heartbeat of an older one would have to outlive
// several restarts in transit.
func (d *Detector) Ended(run uint64) bool {
	p := d.past(run)
	return p != nil && p.ended
}

// PeerLeft records that the peer's current run stopped on purpose (its
// leaving message): it has ended. Its lease from this node was given up
// by the peer itself; what this node granted it is kept as it was.
func (d *Detector) PeerLeft() {
	if d.peerRun == 0 {
		return
	}
	d.remember(d.peerRun, d.peerSentAt, d.runHeardAt)
	d.past(d.peerRun).ended = true
}

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
