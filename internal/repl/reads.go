package repl

// Linearizable reads (docs/ARCHITECTURE.md, "Reads and headers"). The
// driver registers each read with ReadIndex as it arrives; the core
// answers it with a ReadState: served at an index (the driver reads once
// everything up to it is visible), or refused (etcd's "no leader"). These
// are the only rules for when a read may be served; the driver adds none.
//
// A read is served only by a node that may serve one now (mayServe):
//   - a node leading alone, at once: every write it acknowledged is in its
//     own state, and nobody else acknowledges writes while it leads alone
//     (it went solo only once its replica's read lease had run out);
//   - the primary while it holds its role lease, once its commit index
//     covers both the commit index it knew when the read arrived and the
//     last index it held when it started to lead: a leader acknowledges a
//     write only once its commit index covers it (and the index never runs
//     backwards while it leads), and every write acknowledged before it
//     led, by it or its peer, is in the log it started from. Entries it had
//     sequenced but not committed when the read arrived were not
//     acknowledged, so the read does not wait for them (as etcd's
//     ReadIndex waits for the commit index it knows, once its leader has
//     committed in its own term);
//   - the replica while it holds its read lease and is not replacing its
//     state from a snapshot, once what it had durable when the read arrived
//     is safe to show (replicaSafe).
//
// A node that may not serve refuses at once, except a node handing the
// primary role over (or just handed it over, until handoffUntil): its read
// is parked until the node serves again in its new role (the peer leads
// and this node follows it under a read lease), then registered as if it
// had arrived then. A parked read that finds the window closed is refused.
//
// A registered read whose node loses the lease it was registered under,
// or changes role, is refused: it is answered as a read arriving then
// would be, never held past what the lease vouched for. Within a hand-over
// window it is parked again instead.

// readWait is a read registered with ReadIndex.
type readWait struct {
	id, index uint64
	// last: on a leader, the last index it had sequenced when the read
	// arrived; the read waits for it too while the pair does not speak
	// ProtocolV3 (leaderIndex). durable: the leader's durable index then;
	// the read waits for it in a build that speaks ProtocolV4.
	last, durable uint64
	// parked: arrived while this node was handing over and could not
	// serve; index is not yet set.
	parked bool
}

// ReadIndex registers linearizable read id (chosen by the caller, unique
// among the reads not yet answered) at the caller's time now. A ReadState
// naming it comes in a later Ready (or this one): served, once the entries
// up to its Index are visible, or refused.
//
// A read that may not be served yet, arriving when nothing a pass over
// the pending reads looks at has changed since the last pass, is only
// queued: that pass left every pending read waiting, and it would leave
// them waiting again. The shortcut never answers a read, so at worst it
// delays one to the next pass, which every Tick runs. Without it a burst
// of reads arriving while a write is in flight (a replica's reads wait
// for the commit index to cover what it holds durable) cost a pass over
// all the earlier ones each, time quadratic in the burst: one turn of the
// replica's loop could then outlast a lease, and its primary, no longer
// hearing it, went solo.
func (n *Node) ReadIndex(id uint64, now int64) {
	n.advanceClock(now)
	switch {
	case n.mayServe():
		r := n.newRead(id)
		n.reads = append(n.reads, r)
		if n.settled == n.readsNow() && !n.readSafe(r) {
			return
		}
	case n.now < n.handoffUntil:
		n.reads = append(n.reads, readWait{id: id, parked: true})
	default:
		n.rd.ReadStates = append(n.rd.ReadStates, ReadState{ID: id, Refused: true})
		return
	}
	n.releaseReads()
}

// mayServe reports whether this node may serve a linearizable read now
// (the gate: the index to wait for comes from readIndex).
func (n *Node) mayServe() bool {
	switch n.role {
	case RoleSolo:
		return true
	case RolePrimary:
		return n.det.HoldsLease(n.now)
	case RoleReplica:
		return n.det.HoldsLease(n.now) && n.peer.Snap.Req == 0
	}
	return false
}

// newRead registers read id as arriving now. Its index is what it must
// see: on a leader its commit index, or the last index it held when it
// started to lead if that is higher; on the replica what it holds durable
// (every write its primary acknowledged is durable here first).
func (n *Node) newRead(id uint64) readWait {
	if n.role == RoleReplica {
		return readWait{id: id, index: n.persisted}
	}
	return readWait{id: id, index: max(n.commit, n.leadFrom), last: n.last, durable: n.persisted}
}

// leaderIndex is the index a leader's read r waits for. A replica that
// speaks only ProtocolV2 or older shows what it holds durable before the
// commit index covers it (its leader flushed first, then sent), so a read
// on it may already have seen an entry the leader has not committed; a
// later read on the leader must then see it too, and waits for the last
// index it had sequenced when it arrived, as such a pair always did. The
// version is checked when the read is answered, so a pair that speaks an
// older version by then is covered too.
//
// A replica of ProtocolV4 shows what both nodes hold durably
// (commitDurable), which may run ahead of this node's commit index by
// what it has flushed and the replica has not yet acknowledged; a read on
// it that saw such an entry ended after this node's flush of it, so a
// later read here, arriving after that flush, waits for the durable index
// it found (a build that speaks ProtocolV4 always does: readsWaitDurable).
// With no write in flight the durable index is the commit index, and the
// read costs no wait; with one, at most the rest of that write's round.
func (n *Node) leaderIndex(r readWait) uint64 {
	switch {
	case !n.SendsBeforeFlush():
		return max(r.index, r.last)
	case n.readsWaitDurable():
		return max(r.index, r.durable)
	}
	return r.index
}

// replicaSafe reports whether a replica may show its durable log up to
// index: only once the commit index it learnt covers it. A leader sends
// its entries before its own flush completes (parallel durability), so an
// entry durable here may not be on the leader's disk: a leader that
// crashes before its flush and leads again at once comes back without it,
// and this replica drops it (a new run of its leader: restart_lost_suffix,
// parallel_crash_restart). The commit index covers only entries durable
// on both nodes. The primary sends a heartbeat as soon as its commit index
// moves (updateCommit), so with no write in flight the commit index equals
// the durable one and a read costs no wait.
func (n *Node) replicaSafe(index uint64) bool {
	return index <= n.commit
}

// releaseReads answers the reads that may be answered now: parked ones
// whose node serves again (registered) or whose window closed (refused);
// registered ones whose node lost its lease (refused) or whose index is
// safe to show (served). Called whenever the commit index, the lease or
// the role may have changed, and on every tick.
func (n *Node) releaseReads() {
	serve := n.mayServe()
	k := 0
	for _, r := range n.reads {
		if r.parked {
			switch {
			case serve:
				r = n.newRead(r.id)
			case n.now >= n.handoffUntil:
				n.refuseRead(r.id)
				continue
			default:
				n.reads[k] = r
				k++
				continue
			}
		}
		switch {
		case !serve && n.now < n.handoffUntil:
			n.reads[k] = readWait{id: r.id, parked: true}
			k++
		case !serve:
			n.refuseRead(r.id)
		case n.readSafe(r):
			n.rd.ReadStates = append(n.rd.ReadStates, ReadState{ID: r.id, Index: n.readAt(r)})
		default:
			n.reads[k] = r
			k++
		}
	}
	clear(n.reads[k:])
	n.reads = n.reads[:k]
	n.settled = readsSettled{}
	if serve && !parked(n.reads) {
		n.settled = n.readsNow()
	}
}

// readSafe reports whether registered read r may be served now (the node
// may serve: mayServe), and readAt the index it is served at.
func (n *Node) readSafe(r readWait) bool {
	switch {
	case n.role.Leads():
		return n.leaderIndex(r) <= n.commit
	case n.role == RoleReplica:
		return n.replicaSafe(r.index)
	}
	return false
}

func (n *Node) readAt(r readWait) uint64 {
	if n.role.Leads() {
		return n.leaderIndex(r)
	}
	return r.index
}

// readsSettled is everything besides the read itself that decides
// whether a registered read is refused, parked or served: a pass over the
// pending reads that left all of them waiting (valid: it found the node
// serving and none parked) leaves them waiting again while this is
// unchanged. The lease is in it as its end: a node that may serve now
// under the same lease end as at the pass (pass time < leaseUntil, now <
// leaseUntil, and the clock never runs back) held it throughout; a lease
// renewed in between moved the end and makes the next read take a pass.
type readsSettled struct {
	valid      bool
	role       Role
	epoch      Epoch
	commit     uint64
	leaseUntil int64
	snapReq    uint64 // a replica serves only while no snapshot is asked
	sendsFirst bool   // SendsBeforeFlush (leaderIndex)
	waitsDur   bool   // readsWaitDurable (leaderIndex)
}

func (n *Node) readsNow() readsSettled {
	return readsSettled{valid: true, role: n.role, epoch: n.epoch, commit: n.commit,
		leaseUntil: n.det.leaseUntil, snapReq: n.peer.Snap.Req,
		sendsFirst: n.SendsBeforeFlush(), waitsDur: n.readsWaitDurable()}
}

func parked(rs []readWait) bool {
	for _, r := range rs {
		if r.parked {
			return true
		}
	}
	return false
}

// failReads answers the reads registered before a role change: the index
// they wait for belongs to the old role. They are refused, or parked while
// a hand-over window is open (the new role may serve them).
func (n *Node) failReads() {
	k := 0
	for _, r := range n.reads {
		if n.now < n.handoffUntil {
			n.reads[k] = readWait{id: r.id, parked: true}
			k++
			continue
		}
		n.refuseRead(r.id)
	}
	clear(n.reads[k:])
	n.reads = n.reads[:k]
	n.settled = readsSettled{} // parked reads await a pass
}

func (n *Node) refuseRead(id uint64) {
	n.rd.ReadStates = append(n.rd.ReadStates, ReadState{ID: id, Refused: true})
}

// ReadGrant lets a replica's driver serve linearizable reads without
// registering each with ReadIndex: the core decided ahead of time what
// ReadIndex would decide for any read arriving before Until (the caller's
// clock, the same one it gives Tick and ReadIndex). A read whose own
// clock reading, taken once as it arrives, is before Until is served at
// once at everything this node shows (at least Index: its durable log);
// any other read goes through ReadIndex. The zero grant covers nothing.
//
// It is granted only to a replica that holds its read lease, is not
// replacing its state from a snapshot, whose log was verified against its
// leader's, and whose commit index covers everything it holds durable
// (readGrant): what it shows is then committed, and every write its
// primary acknowledged was acknowledged by this replica first, which
// withdraws the grant in the Ready that sends that ack (Ready: an ack
// above the commit index handed out before; from ProtocolV4 that Ready may
// commit the entry too, but the driver shows it only after the ack is
// out) until the commit index covers it again and it is shown.
// Until is the read lease itself, so
// a grant never outlives it. A change that ends any of these conditions
// (a role change, a lease lost to a restarted peer, a snapshot request, a
// suffix to drop) narrows the grant in the very Ready that carries it
// out, and the driver publishes a narrower grant before it carries out
// anything else of that Ready (Ready, step 1).
//
// The primary gets no grant: it sequences writes the replica has not
// acknowledged yet, so its reads wait for its commit index and the
// release of what it covers (ReadIndex).
type ReadGrant struct {
	Until int64  // reads whose clock reading is before Until are covered
	Index uint64 // the index such a read sees at least
}

// Covers reports whether a read whose clock reading is now may be served
// under g without ReadIndex.
func (g ReadGrant) Covers(now int64) bool { return now < g.Until }

// Narrows reports whether g covers less than the grant old: the driver
// must publish g before it carries out the rest of its Ready.
func (g ReadGrant) Narrows(old ReadGrant) bool { return g.Until < old.Until }

// readGrant is the grant that ReadIndex's rules give now (see ReadGrant).
func (n *Node) readGrant() ReadGrant {
	if n.role != RoleReplica || !n.verified || !n.mayServe() || !n.replicaSafe(n.persisted) {
		return ReadGrant{}
	}
	return ReadGrant{Until: n.det.LeaseUntil(), Index: n.persisted}
}
