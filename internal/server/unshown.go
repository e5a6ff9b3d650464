package server

import "go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

// The replica's entries that are applied and durable here but not yet
// covered by the commit index it learnt. The primary sends a batch before
// its own flush completes (leadBatch), so an entry durable here may be
// missing from the primary's disk after a crash, and dropped from this
// log when the primary leads again (repl: a new run of the leader). Such
// an entry is shown to readers, sent to watchers, compacted by and
// answered to the forwarded write it carries only once the commit index
// covers it: the commit index covers only entries durable on both nodes.
//
// r.unshown is owned by the apply loop (applyFollowed appends, handleReady
// shows, dropSuffix and installSnapshot drop).

// unshown is one such entry.
type unshown struct {
	index uint64
	// from is the store's revision before the entry was applied, plus
	// one; rev the revision once it is.
	from, rev int64
	events    []mvccEvent
	job       *compactJob
	merge     bool
	// fwd is the forwarded write this node waits on that the entry
	// carries (nil: none), answered with result once shown.
	fwd    *proposal
	result applyResult
}

// showCommitted makes the entries up to commit visible, in log order, and
// answers the forwarded writes among them (apply loop, every Ready, in
// any role: a replica promoted commits what it holds).
func (s *Server) showCommitted(commit uint64) {
	r := s.repl
	n := 0
	for n < len(r.unshown) && r.unshown[n].index <= commit {
		n++
	}
	if n == 0 {
		return
	}
	shown := r.unshown[:n]
	var evs []mvccEvent
	merged := false
	for i := range shown {
		evs = append(evs, shown[i].events...)
		merged = merged || shown[i].merge
	}
	// From the first revision these entries made: revisions below it
	// that the hub never got (batches a step-down left applied but
	// invisible, now confirmed by the new primary's log) are visible
	// from now on too; their watchers replay them from history.
	from, rev := shown[0].from, shown[n-1].rev
	s.store.MarkDurable(rev)
	s.hub.NotifyFrom(from, rev, evs)
	if merged {
		s.hub.Reset()
		s.log.Warn("merged after a split brain: every watch was cancelled as compacted", "revision", rev)
	}
	s.signalVisible()
	for i := range shown {
		if j := shown[i].job; j != nil {
			s.compactc <- *j
		}
		if p := shown[i].fwd; p != nil {
			p.done <- shown[i].result
		}
	}
	r.unshown = append(r.unshown[:0], r.unshown[n:]...)
}

// dropUnshown forgets the entries after keep, which this node no longer
// holds (a dropped suffix, a snapshot installed: keep 0). A forwarded write
// among them gets "request timed out": a later primary may or may not
// apply it, and its caller gets no guess.
func (s *Server) dropUnshown(keep uint64) {
	r := s.repl
	k := 0
	for _, u := range r.unshown {
		if u.index <= keep {
			r.unshown[k] = u
			k++
			continue
		}
		if u.fwd != nil {
			u.fwd.done <- applyResult{err: rpctypes.ErrGRPCTimeout}
		}
	}
	clear(r.unshown[k:])
	r.unshown = r.unshown[:k]
}
