package server

import (
	"sync"

	"github.com/dyad-db/dyad/internal/transport"
)

// SendTap wraps a Transport for tests that look at what a node sends: On
// (when set) sees every message on the sender's goroutine, before it is
// passed on (the apply loop's sends run on the loop, so On may read the
// loop's state there), and every call is recorded, a SendAll as one
// group. Set Transport and On before the node starts.
type SendTap struct {
	transport.Transport
	// On runs with the tap's lock held; it must not call the tap.
	On func(m *transport.Message)

	mu    sync.Mutex
	calls []SentCall
}

// SentCall is one call a SendTap saw: the messages, and whether they came
// in one SendAll (false: a Send).
type SentCall struct {
	All bool
	Ms  []transport.Message // copies, payloads included
}

// Send implements transport.Transport.
func (t *SendTap) Send(m *transport.Message) error {
	t.see(false, []*transport.Message{m})
	return t.Transport.Send(m)
}

// SendAll implements transport.BatchSender.
func (t *SendTap) SendAll(ms []*transport.Message) (int, error) {
	t.see(true, ms)
	return transport.SendAll(t.Transport, ms)
}

func (t *SendTap) see(all bool, ms []*transport.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := SentCall{All: all}
	for _, m := range ms {
		if t.On != nil {
			t.On(m)
		}
		cp := *m
		cp.Payload = append([]byte(nil), m.Payload...)
		c.Ms = append(c.Ms, cp)
	}
	t.calls = append(t.calls, c)
}

// Calls returns the calls recorded since the last Reset.
func (t *SendTap) Calls() []SentCall {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]SentCall(nil), t.calls...)
}

// Reset forgets the calls recorded so far and runs f (if not nil) under
// the tap's lock, so that it may change what On reads.
func (t *SendTap) Reset(f func()) {
	t.With(func() {
		t.calls = nil
		if f != nil {
			f()
		}
	})
}

// With runs f under the tap's lock, so that it may read or change what On
// reads and writes.
func (t *SendTap) With(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f()
}
