package sim

import (
	"errors"

	"github.com/dyad-db/dyad/internal/repl"
)

// The adapter's side of the extended faults (faults.go): hand-overs, the
// fence command, and the invariants that need the core's answers.

var errFenceFailed = errors.New("fence command failed")

// handOver asks the node, if it runs, to hand its primary role over
// (final: its storage failed, so it stops once the hand-over is sent, or
// at once if it may not hand over).
func (n *node) handOver(final bool) {
	if n.n == nil || !n.idle() {
		return
	}
	err := n.n.Handover(final)
	n.w.tracef("node %d hands over (final %v): %v", n.idx, final, err)
	if final {
		if err != nil {
			n.storageStop()
			return
		}
		n.finalHandover = true
		// A hand-over that never gets sent ends at the core's ack
		// timeout (2 leases); the node gives up a lease after that.
		gen := n.gen
		n.w.q.After(3*int64(n.w.cfg.Lease), func() {
			if n.gen == gen && n.n != nil {
				n.storageStop()
			}
		})
	}
	n.process()
	if final && n.n != nil && !n.n.HandingOver() {
		// A planned hand-over already sent became final: nothing is left
		// to send, and the server stops as soon as HandingOver turns
		// false. Left running, this node went back to the role rules and
		// led on its replica's "replica" heartbeat while the replica took
		// the hand-over at its thaw (seed 228476).
		n.stop(false)
	}
}

// runFence runs the fence command Ready.Fence asked for: it ends after
// the node's current fence outcome's duration and reports to the core.
func (n *node) runFence() {
	fc, gen := n.fence, n.gen
	n.w.tracef("node %d runs its fence command (fails %v, takes %.3fs)", n.idx, fc.fail, float64(fc.d)/1e9)
	n.w.q.After(fc.d, func() {
		if n.gen != gen {
			return
		}
		ran := n.later(func() {
			var err error
			if fc.fail {
				err = errFenceFailed
			}
			// The outcome counts only for a replica: a node whose role
			// changed while the command ran (a hand-over made it lead)
			// ignores it.
			asked := n.n.Role() == repl.RoleReplica
			n.fenceOK = err == nil
			n.n.Fenced(err)
			n.process()
			n.fenceOK = false
			if asked && err != nil && n.n != nil && n.n.Role().Leads() {
				n.w.check.Fail("fence", "node %d leads after its fence command failed", n.idx)
			}
		})
		if ran {
			n.w.step()
		}
	})
}

// checkRoleChange checks a role change against the extended faults'
// invariants, and stops a node after its final hand-over.
func (n *node) checkRoleChange(rc *repl.RoleChange) {
	if n.w.script.Fence && rc.From == repl.RoleReplica && rc.To.Leads() && !rc.AdoptForwards && !n.fenceOK {
		n.w.check.Fail("unfenced-promotion", "node %d promoted itself (%s) without a fence command that succeeded", n.idx, rc.Reason)
	}
	if n.finalHandover && !rc.To.Leads() {
		// Its storage failed: it stops once it no longer leads (the
		// hand-over, sent in this Ready, is on the wire).
		gen := n.gen
		n.w.q.After(0, func() {
			if n.gen == gen && n.n != nil {
				n.storageStop()
			}
		})
	}
}

// storageStop stops a node whose storage failed (a final hand-over).
// Once the faults have ended (World.healed) the failure is repaired like
// every other fault: the node restarts from its disk at once, as
// OPERATIONS.md tells the operator to (fix the disk, restart the node;
// it rejoins). Without this a stop scheduled before the end but due after
// it would leave the node down through the settle phase, which no fault
// schedule intends.
func (n *node) storageStop() {
	n.stop(false)
	if n.w.healed {
		n.w.tracef("node %d: its storage is repaired; it restarts", n.idx)
		n.restart(false)
	}
}

// handoverDone takes a hand-over's outcome: a node told "done" no longer
// leads (its peer does, in a newer epoch).
func (n *node) handoverDone(res *repl.HandoverResult) {
	n.w.tracef("node %d: hand-over (final %v) ends: %v", n.idx, res.Final, res.Err)
	if res.Err == nil && n.n.Role().Leads() {
		n.w.check.Fail("handover", "node %d still leads (%s) after its hand-over was answered done", n.idx, n.n.Role())
	}
}
