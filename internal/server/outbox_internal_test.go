package server

import (
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// refusing is a Transport that takes every message but the one whose
// Index is refuse (ErrTimeout) and records the indexes it took.
type refusing struct {
	transport.Transport
	refuse uint64
	took   []uint64
}

func (r *refusing) Send(m *transport.Message) error {
	if m.Index == r.refuse {
		return transport.ErrTimeout
	}
	r.took = append(r.took, m.Index)
	return nil
}

// The core's messages of a turn wait in the outbox (sendCore) and leave in
// one SendAll (flushSends), in the order they were queued, with nothing
// sent before the flush; a message the transport refuses costs only
// itself, and a kind the wire does not carry is not queued.
func TestFlushSendsSendsTheTurnInOneSendAll(t *testing.T) {
	hb := func(i uint64) repl.Message {
		return repl.Message{Kind: repl.KindHeartbeat, Index: i, Heartbeat: repl.Heartbeat{}}
	}
	entries := func(i uint64) repl.Message {
		return repl.Message{Kind: repl.KindEntries, Index: i, Entries: []repl.Entry{{Index: i}}}
	}
	ack := func(i uint64) repl.Message { return repl.Message{Kind: repl.KindAck, Index: i} }
	tests := []struct {
		name   string
		queue  []repl.Message
		refuse uint64   // the index the transport refuses (0: none)
		want   []uint64 // indexes the transport took, in order
	}{
		{name: "entries and late heartbeats", queue: []repl.Message{hb(1), entries(2), hb(3), hb(4)}, want: []uint64{1, 2, 3, 4}},
		{name: "acks and a heartbeat", queue: []repl.Message{ack(1), hb(2), ack(3)}, want: []uint64{1, 2, 3}},
		{name: "a refused message costs only itself", queue: []repl.Message{entries(1), hb(2), entries(3)}, refuse: 2, want: []uint64{1, 3}},
		{name: "a kind the wire does not carry", queue: []repl.Message{ack(1), {Kind: 0xfff0, Index: 2}, ack(3)}, want: []uint64{1, 3}},
		{name: "nothing queued", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inner := &refusing{refuse: tt.refuse}
			tap := &SendTap{Transport: inner}
			s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil)), repl: &replState{tr: tap}}
			for i := range tt.queue {
				s.sendCore(&tt.queue[i])
			}
			if n := len(tap.Calls()); n != 0 {
				t.Fatalf("%d sends before the flush, want none", n)
			}
			s.flushSends()
			calls := tap.Calls()
			if len(tt.want) == 0 {
				if len(calls) != 0 {
					t.Fatalf("an empty outbox made %d sends", len(calls))
				}
				return
			}
			// A refusal makes flushSends send the rest in a second SendAll.
			wantCalls := 1
			if tt.refuse != 0 {
				wantCalls = 2
			}
			if len(calls) != wantCalls {
				t.Fatalf("%d calls, want %d: %+v", len(calls), wantCalls, calls)
			}
			for _, c := range calls {
				if !c.All {
					t.Fatalf("a message went out with Send, not SendAll: %+v", c)
				}
			}
			if !slices.Equal(inner.took, tt.want) {
				t.Fatalf("the transport took %v, want %v", inner.took, tt.want)
			}
			if len(s.repl.out) != 0 {
				t.Fatalf("%d messages left in the outbox after the flush", len(s.repl.out))
			}
		})
	}
}
