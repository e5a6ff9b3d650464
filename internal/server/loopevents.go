package server

import (
	"context"
	"time"

	"github.com/dyad-db/dyad/internal/transport"
)

// loopSources are the channels the apply loop takes its turns from (all
// nil for a single node, which takes proposals and ctx only).
type loopSources struct {
	tick      <-chan time.Time
	inbox     <-chan *transport.Message
	handoverc <-chan *handover
	fenced    <-chan error
	recvReady <-chan struct{} // a batching transport has messages (inbox.go)
	reads     <-chan *readReq
}

// loopEvent is one event of the loop's sources.
type loopEvent struct {
	kind evKind
	p    *proposal
	m    *transport.Message
	q    *readReq
	h    *handover
	err  error
}

type evKind uint8

const (
	evNone     evKind = iota
	evStop            // ctx ended
	evProposal        // p
	evMessage         // m
	evReads           // q
	evTick
	evHandover // h
	evFenced   // err
	evRecv     // the transport's Ready: taken by resumeRecv at the top of the next turn
)

// next takes one event of src, props (nil while the node does not lead)
// and ctx; block: wait for one, otherwise return ok false at once when
// none is ready. One select, the same for both, so that the loop picks
// among ready sources alike whether it waits in a select or in C.
func (src *loopSources) next(ctx context.Context, props <-chan *proposal, block bool) (ev loopEvent, ok bool) {
	if block {
		select {
		case <-ctx.Done():
			return loopEvent{kind: evStop}, true
		case p := <-props:
			return loopEvent{kind: evProposal, p: p}, true
		case m := <-src.inbox:
			return loopEvent{kind: evMessage, m: m}, true
		case q := <-src.reads:
			return loopEvent{kind: evReads, q: q}, true
		case <-src.tick:
			return loopEvent{kind: evTick}, true
		case h := <-src.handoverc:
			return loopEvent{kind: evHandover, h: h}, true
		case err := <-src.fenced:
			return loopEvent{kind: evFenced, err: err}, true
		case <-src.recvReady:
			return loopEvent{kind: evRecv}, true
		}
	}
	select {
	case <-ctx.Done():
		return loopEvent{kind: evStop}, true
	case p := <-props:
		return loopEvent{kind: evProposal, p: p}, true
	case m := <-src.inbox:
		return loopEvent{kind: evMessage, m: m}, true
	case q := <-src.reads:
		return loopEvent{kind: evReads, q: q}, true
	case <-src.tick:
		return loopEvent{kind: evTick}, true
	case h := <-src.handoverc:
		return loopEvent{kind: evHandover, h: h}, true
	case err := <-src.fenced:
		return loopEvent{kind: evFenced, err: err}, true
	case <-src.recvReady:
		return loopEvent{kind: evRecv}, true
	default:
		return loopEvent{}, false
	}
}

// handle runs ev's turn (not evStop: the loop leaves for that).
func (s *Server) handle(ev loopEvent) {
	switch ev.kind {
	case evProposal:
		s.leadBatch(ev.p)
	case evMessage:
		s.onMessage(ev.m)
	case evReads:
		s.registerReads(ev.q)
	case evTick:
		s.onTick()
		s.m.Ticks.Inc()
	case evHandover:
		s.startHandover(ev.h)
	case evFenced:
		s.onFenced(ev.err)
	case evRecv:
		// Taken by resumeRecv at the top of the next turn.
	}
}
