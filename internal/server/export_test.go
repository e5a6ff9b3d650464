package server

import "github.com/dyad-db/dyad/internal/repl"

// InjectStorageFault makes the node's storage commits and journal appends
// fail while f returns an error (a disk that cannot persist); nil f
// removes the fault.
func InjectStorageFault(s *Server, f func() error) {
	s.be.InjectFault(f)
	s.journal.InjectFault(f)
}

// InjectJournalFault makes the node's journal appends alone fail while f
// returns an error; nil f removes the fault.
func InjectJournalFault(s *Server, f func() error) { s.journal.InjectFault(f) }

// SpeakProtocols makes a node built from c speak the protocol versions r
// only, as a build of those versions would.
func SpeakProtocols(c *ReplConfig, r repl.ProtocolRange) { c.build = r }

// AppliedIndex is the index of the last entry the node applied.
func AppliedIndex(s *Server) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appliedIdx
}

// JournalLast is the index of the last entry in the node's journal. Only
// the apply loop touches the journal: call it from there (a transport's
// Send).
func JournalLast(s *Server) uint64 { return s.journal.Last() }

// AppliedIndexLoop is AppliedIndex for a caller on the apply loop.
func AppliedIndexLoop(s *Server) uint64 { return s.appliedIdx }

// QueuedProposals is how many proposals wait for the apply loop to take
// them.
func QueuedProposals(s *Server) int { return len(s.proposals) }

// QueueRead queues a linearizable read for the apply loop without
// waiting for its answer (the answer goes to a buffered channel nobody
// reads); false when the queue is full.
func QueueRead(s *Server) bool {
	select {
	case s.repl.reads.c <- &readReq{done: make(chan error, 1)}:
		s.wakeLoop()
		return true
	default:
		return false
	}
}
