package server_test

import (
	"bytes"
	"sync/atomic"

	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/transport"
)

// lendingMem is an in-memory transport that lends every message it
// delivers, as ddsnet lends its batches (transport.Message.Recv): each
// message arrives in storage of its own, and Release overwrites its
// payload and its fields at once, as if the transport had reused them
// (ddsnet does so only when a whole batch is released, and poisons only
// in race builds). A node that released something it still uses then
// reads garbage, and the pair tests that run on it fail.
type lendingMem struct {
	*transport.Mem
	released *atomic.Int64
}

// lendingLoop makes a pair node's transport lend what it delivers.
func lendingLoop(rc *server.ReplConfig) {
	rc.Transport = lendingMem{Mem: rc.Transport.(*transport.Mem), released: new(atomic.Int64)}
}

// Start implements transport.Transport.
func (l lendingMem) Start(h transport.Handler) error {
	return l.Mem.Start(func(m *transport.Message) {
		lent := *m
		lent.Payload = bytes.Clone(m.Payload)
		lent.Recv = &poisoner{m: &lent, released: l.released}
		h(&lent)
	})
}

// poisoner is one lent message's storage.
type poisoner struct {
	m        *transport.Message
	released *atomic.Int64
}

// Release implements transport.Releaser.
func (p *poisoner) Release() {
	for i := range p.m.Payload {
		p.m.Payload[i] = 0xdb
	}
	*p.m = transport.Message{Class: transport.NumClasses, Kind: 0xdbdb, Version: 0xdbdb, From: 0xdbdb, Payload: p.m.Payload}
	p.released.Add(1)
}
