package sim

import (
	"fmt"

	"github.com/dyad-db/dyad/internal/repl"
)

// Mixed versions (Config.Mixed): a node may run an older build, one that
// speaks protocol versions up to ProtocolV2 or ProtocolV3 only
// (Script.OldMax), and a rolling upgrade
// (or its rollback) restarts a node as the other build (FaultBuild). The
// driver's write path depends on the version the pair speaks
// (repl.Node.SendsBeforeFlush, internal/server's leadBatch):
//
//   - from ProtocolV3 on, a leader proposes its batch, sends it, and
//     reports it Persisted once its own flush ends: both zones flush at
//     once (propose, persist and sync below);
//   - below it (an older peer, or a peer not heard from yet), a leader
//     flushes its batch first and only then proposes and sends it, its
//     loop waiting for the flush (flushFirst, finishFlush).
//
// A ProtocolV3 build is the core itself with that range: its replica
// commits what its leader's commit index covers, its leader's reads wait
// for no durable index, and a pair with it speaks 3 (no durable commit).
// A ProtocolV2 build's replica shows an entry as soon as it persists it
// (not once the commit index covers it): showPersisted models that, so that a
// leader that sent before its own flush to such a replica, then lost the
// batch in a crash and led again, is caught taking back a write the
// replica served (the visible revision goes back, or another write is
// applied at the same index).

// olderBuild is what the script's older build speaks: up to OldMax.
func (s *Script) olderBuild() repl.ProtocolRange {
	return repl.ProtocolRange{Min: repl.ProtocolV1, Max: max(s.OldMax, repl.ProtocolV2)}
}

// flushFirst logs e as a leader whose pair speaks below ProtocolV3: the
// entry is written at the position the core will give it and synced, the
// loop waiting; finishFlush then proposes it, reports it Persisted and
// sends it.
func (n *node) flushFirst(e repl.Entry) error {
	if n.n.HandingOver() {
		return repl.ErrHandingOver
	}
	e.Index, e.Epoch, e.Solo = n.n.Next()
	if e.Index != uint64(n.disk.Len())+1 {
		n.w.check.Fail("driver", "node %d would flush entry %d after %d", n.idx, e.Index, n.disk.Len())
		return repl.ErrNotLeader
	}
	n.disk.Append(e)
	n.flushing, n.flush = true, []repl.Entry{e}
	n.w.stats.FlushedFirst++
	w, gen, upto := n.w, n.gen, n.disk.Len()
	d := int64(w.cfg.FsyncMin) + w.rng.Int64N(int64(w.cfg.FsyncMax-w.cfg.FsyncMin)+1)
	w.q.After(d, func() {
		if n.gen != gen || !n.flushing {
			return
		}
		n.disk.SyncTo(upto)
		n.flushDone = true
		if n.up() {
			n.finishFlush()
			n.drain()
		} // else frozen: the loop resumes at the thaw, with finishFlush
		w.step()
	})
	return nil
}

// finishFlush ends the flush of the node's own batch: it is durable, and
// the core sequences it (at the position it was written at: nothing else
// reached the core meanwhile), counts it durable and sends it.
func (n *node) finishFlush() {
	if !n.flushing {
		return
	}
	es := n.flush
	n.flushing, n.flushDone, n.flush = false, false, nil
	n.disk.SyncTo(int(es[len(es)-1].Index))
	if err := n.n.Propose(es); err != nil {
		n.w.check.Fail("driver", "node %d: the core refused the batch it flushed: %v", n.idx, err)
		return
	}
	last := es[len(es)-1]
	n.n.Persisted(last.Index, last.Rev)
	n.process()
}

// written reports whether the core's entry e is already on the disk: a
// batch flushed before it was proposed (flushFirst).
func (n *node) written(e repl.Entry) bool {
	d, ok := n.disk.At(e.Index)
	if !ok {
		return false
	}
	if d.Epoch != e.Epoch || d.ReqID != e.ReqID || d.Rev != e.Rev {
		n.w.check.Fail("driver", "node %d: entry %d of the core differs from the one it flushed", n.idx, e.Index)
	}
	return true
}

// took notes entries an older build's replica took from its leader: it
// shows them once they are synced (showPersisted).
func (n *node) took(es []repl.Entry) {
	if n.oldRun && len(es) > 0 && n.n.Role() == repl.RoleReplica {
		n.showTo = max(n.showTo, es[len(es)-1].Index)
	}
}

// showPersisted applies, on an older build's replica, what it took from
// its leader and has synced, before the commit index covers it.
func (n *node) showPersisted() {
	if !n.oldRun || n.w.script.olderBuild().Max >= repl.ProtocolV3 || n.n.Role() != repl.RoleReplica {
		return
	}
	for i := n.applied + 1; i <= min(n.showTo, uint64(n.disk.Synced())); i++ {
		e, _ := n.disk.At(i)
		n.apply(e)
		n.w.stats.ShownEarly++
	}
}

// catchupEnd is the end of what the node serves in catch-up: all it
// wrote when it sends batches before its flush, else only what is
// synced (what the driver reads from its data file).
func (n *node) catchupEnd() uint64 {
	if n.n != nil && n.n.SendsBeforeFlush() {
		return uint64(n.disk.Len())
	}
	return uint64(n.disk.Synced())
}

func (n *node) buildName() string {
	if n.oldRun {
		return fmt.Sprintf("older build (%v)", n.w.script.olderBuild())
	}
	return "this build"
}
