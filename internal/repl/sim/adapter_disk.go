package sim

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/dyad-db/dyad/internal/repl"
)

// The adapter's durable side: the hard state and log on the fake disk,
// group syncs reported as Persisted, truncation of an unacknowledged
// suffix, and catch-up and snapshot service from the disk.

// truncate drops the log after index keep in place (Ready.Truncate), with
// the epoch records that start after it, as one durable step, and reports
// the outcome. Nothing above keep was applied (only committed entries
// are, and the core asks only for a suffix it never committed), so the
// store is rebuilt only if that ever fails to hold, and the checker then
// sees the revision go back.
func (n *node) truncate(keep uint64) {
	m := &n.disk.Meta
	if keep > uint64(n.disk.Len()) {
		n.n.Truncated(repl.RestartState{}, fmt.Errorf("truncate after %d: the log ends at %d", keep, n.disk.Len()))
		return
	}
	n.disk.TruncateAfter(int(keep))
	eps := m.epochs[:0:0]
	for _, r := range m.epochs {
		if r.Start <= keep {
			eps = append(eps, r)
		}
	}
	m.epochs = eps
	m.commit = min(m.commit, keep)
	if n.applied > n.disk.Applied {
		n.rebuild(n.disk.Applied)
		n.w.check.Visible(n.idx, n.rev)
	}
	n.w.tracef("node %d dropped its log after %d in place", n.idx, keep)
	n.n.Truncated(n.restartState(), nil)
}

// persist writes the hard state at once and appends the entries; a sync
// reports them Persisted later.
func (n *node) persist(rd *repl.Ready) {
	hs := &rd.HardState
	m := &n.disk.Meta
	if hs.Term != 0 {
		m.term = max(m.term, hs.Term)
	}
	m.followed = max(m.followed, hs.Followed)
	if len(rd.Entries) > 0 {
		m.commit = rd.Commit
	}
	if len(hs.Drop) > 0 || len(hs.Put) > 0 {
		eps := make([]repl.EpochRecord, 0, len(m.epochs)+len(hs.Put))
		for _, r := range m.epochs {
			if !containsEpoch(hs.Drop, r.Epoch) {
				eps = append(eps, r)
			}
		}
		eps = append(eps, hs.Put...)
		sort.SliceStable(eps, func(i, j int) bool { return eps[i].Epoch.Less(eps[j].Epoch) })
		m.epochs = eps
	}
	n.took(rd.Entries)
	for _, e := range rd.Entries {
		if n.written(e) {
			continue // flushed before it was proposed (flushFirst)
		}
		if e.Index != uint64(n.disk.Len())+1 {
			n.w.check.Fail("driver", "node %d was asked to write entry %d after %d", n.idx, e.Index, n.disk.Len())
			return
		}
		n.disk.Append(e)
	}
	if len(rd.Entries) > 0 && !n.syncing {
		n.sync()
	}
}

func containsEpoch(rs []repl.EpochRecord, e repl.Epoch) bool {
	for _, r := range rs {
		if r.Epoch == e {
			return true
		}
	}
	return false
}

// sync starts a sync of everything written so far (group commit).
func (n *node) sync() {
	w := n.w
	n.syncing = true
	upto, gen := n.disk.Len(), n.gen
	d := int64(w.cfg.FsyncMin) + w.rng.Int64N(int64(w.cfg.FsyncMax-w.cfg.FsyncMin)+1)
	w.q.After(d, func() {
		if n.gen != gen {
			return
		}
		n.disk.SyncTo(upto)
		n.later(func() {
			n.syncing = false
			n.showPersisted()
			if e, ok := n.disk.At(uint64(n.disk.Synced())); ok {
				n.n.Persisted(e.Index, e.Rev)
			}
			n.process()
			if n.disk.Len() > n.disk.Synced() && !n.syncing {
				n.sync()
			}
		})
		w.step()
	})
}

// serve answers a catch-up or snapshot request from the disk.
func (n *node) serve(s repl.ServeRequest) {
	to := int(s.To) - 1
	if to < 0 || to >= len(n.w.nodes) || to == n.idx {
		return
	}
	if s.Snapshot {
		n.snaps[s.ID] = snapshot{
			log:     append([]repl.Entry(nil), n.disk.Log()[:n.applied]...),
			meta:    meta{epochs: append([]repl.EpochRecord(nil), n.disk.Meta.epochs...), term: n.disk.Meta.term, commit: min(n.disk.Meta.commit, n.applied)},
			applied: n.applied,
		}
		chunk := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(n.idx)), s.ID)
		n.w.net.Send(Packet{From: n.idx, To: to, Payload: repl.Message{Kind: repl.KindSnapChunk, From: n.id, To: s.To, Term: s.ID, Flags: repl.FlagLast, Chunk: chunk}})
		return
	}
	c := s.Catchup
	log := n.disk.Log()
	last := uint64(len(log))
	m := repl.Message{Kind: repl.KindCatchup, From: n.id, To: s.To, Term: s.ID, Index: c.From}
	switch {
	case c.From > 1 && (c.From-1 > last || log[c.From-2].Epoch != c.Prev):
		m.Flags, m.Epochs = repl.FlagDiverged, append([]repl.EpochRecord(nil), n.disk.Meta.epochs...)
	case c.From >= 1 && c.From <= n.catchupEnd():
		m.Entries = append([]repl.Entry(nil), log[c.From-1:min(n.catchupEnd(), c.From-1+64)]...)
	}
	n.w.net.Send(Packet{From: n.idx, To: to, Payload: m})
}

// install installs the snapshot whose last chunk is c.
func (n *node) install(c repl.SnapshotChunk) {
	if len(c.Data) != 16 {
		n.n.Installed(repl.RestartState{}, repl.ErrStaleSnapshot)
		return
	}
	from, id := binary.BigEndian.Uint64(c.Data), binary.BigEndian.Uint64(c.Data[8:])
	var snap snapshot
	ok := false
	if from < uint64(len(n.w.nodes)) {
		snap, ok = n.w.nodes[from].snaps[id]
	}
	if !ok || snap.applied < c.Floor {
		n.n.Installed(repl.RestartState{}, repl.ErrStaleSnapshot)
		return
	}
	snap.meta.term = max(snap.meta.term, n.disk.Meta.term)
	snap.meta.followed = max(snap.meta.followed, n.disk.Meta.followed)
	n.disk.Replace(snap.log, snap.meta, snap.applied)
	n.gen++
	n.syncing = false
	n.rebuild(n.disk.Applied)
	n.n.Installed(n.restartState(), nil)
	n.w.check.Visible(n.idx, n.rev)
	n.w.tracef("node %d installs a snapshot up to index %d (rev %d)", n.idx, n.applied, n.rev)
	n.scheduleTick(int64(n.w.cfg.Lease / 8))
}
