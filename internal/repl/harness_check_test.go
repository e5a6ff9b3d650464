package repl

import "fmt"

// The interaction harness's invariants, checked after every Ready.

// check records what x acknowledged with rd and checks the invariants
// that must hold after every step:
//   - a node's commit index never decreases within a run;
//   - a Ready that acknowledges an index above what the node had shown
//     carries no read grant: the driver sends the ack before it shows
//     the entries, and the primary may answer the write at once;
//   - a leader's commit index never passes its own durable log (its
//     messages may go out before its flush; the commit waits for it);
//   - two nodes never lead in the same epoch;
//   - a replica's commit index covers only entries its leader holds (the
//     same entry at the same index): it must not apply a suffix of its
//     own that the leader's log lacks;
//   - every entry a leader acknowledged is in the log of whichever node
//     leads later, at the same index and epoch, unless both nodes led
//     alone at once (a split brain: the loser's writes go to conflict
//     records, which the scenarios show).
func (h *harness) check(x *hnode, rd *Ready) {
	if x.n == nil {
		return
	}
	if rd.Commit < h.commits[x.n] {
		h.violate("%s: commit went back from %d to %d", x.name, h.commits[x.n], rd.Commit)
	}
	// What the node had shown before rd: the commit index of its Readies
	// so far (it never goes back).
	if shown := h.commits[x.n]; rd.ReadGrant != (ReadGrant{}) && acksAbove(rd, shown) {
		h.violate("%s: a Ready acknowledges beyond what was shown (%d) under a read grant", x.name, shown)
	}
	h.commits[x.n] = max(h.commits[x.n], rd.Commit)
	if x.n.role.Leads() && rd.Commit > uint64(len(x.log)) {
		h.violate("%s: leader's commit %d passes its own durable log (%d)", x.name, rd.Commit, len(x.log))
	}
	if !x.n.HasReady() {
		// Between Readies only: a grant the core withdrew (a flush
		// took the durable index past the commit index) is narrowed by
		// the driver first thing in the next Ready, before any of its
		// messages (the ack) leaves.
		h.checkGrant(x)
	}
	if x.n.role.Leads() {
		for i := h.ackedTo + 1; i <= rd.Commit && i <= uint64(len(x.log)); i++ {
			h.acked[i] = x.log[i-1]
			h.ackedTo = i
		}
	}
	y := h.peerOf(x)
	if x.n.role != RoleReplica {
		h.ownCommit[x.n] = rd.Commit
	}
	if y.n != nil && x.n.role == RoleReplica && y.n.role.Leads() {
		// Only what it committed as a replica: what it committed leading
		// alone may be a split brain's (conflict records).
		for i := h.ownCommit[x.n] + 1; i <= rd.Commit && i <= uint64(len(x.log)); i++ {
			if i > uint64(len(y.log)) || y.log[i-1].Epoch != x.log[i-1].Epoch || string(y.log[i-1].Data) != string(x.log[i-1].Data) {
				h.violate("%s: commit %d covers its entry %d (%s), which its leader %s does not hold", x.name, rd.Commit, i, x.log[i-1].Data, y.name)
				break
			}
		}
	}
	if y.n != nil && x.n.role.Leads() && y.n.role.Leads() && x.n.epoch == y.n.epoch {
		h.violate("%s and %s both lead epoch %s", x.name, y.name, x.n.epoch)
	}
	if y.n != nil && x.n.role == RoleSolo && y.n.role == RoleSolo {
		h.split = true // both acknowledge alone: a split brain
	}
	// Checked when a node starts leading: that is when an acknowledged
	// entry it lacks would be lost.
	if !x.n.role.Leads() || h.split || rd.RoleChange == nil {
		return
	}
	for i, e := range h.acked {
		if i > uint64(len(x.log)) || x.log[i-1].Epoch != e.Epoch || string(x.log[i-1].Data) != string(e.Data) {
			h.violate("%s leads without acknowledged entry %d (%s)", x.name, i, e.Data)
			delete(h.acked, i) // report it once
		}
	}
}

func (h *harness) violate(format string, args ...any) {
	h.violations = append(h.violations, fmt.Sprintf(format, args...))
}

// checkGrant checks the read grant x's driver publishes now: while it
// covers the present, ReadIndex would serve a read at once, and a read
// served under it sees every acknowledged entry.
func (h *harness) checkGrant(x *hnode) {
	if !x.grant.Covers(h.now) {
		return
	}
	if x.n.role != RoleReplica || !x.n.mayServe() || !x.n.replicaSafe(x.n.persisted) {
		h.violate("%s: a read grant is in force while ReadIndex would not serve at once", x.name)
		return
	}
	if h.split {
		// Both acknowledged alone at the same indexes: the losing side's
		// entries become conflict records, and acked (by index) no
		// longer names one history (as for leading, check).
		return
	}
	for i := uint64(1); i <= h.ackedTo; i++ {
		a := h.acked[i]
		if i > uint64(len(x.log)) || x.log[i-1].Epoch != a.Epoch || string(x.log[i-1].Data) != string(a.Data) {
			h.violate("%s: a read under its grant would miss acknowledged entry %d (%s)", x.name, i, a.Data)
			return
		}
	}
}
