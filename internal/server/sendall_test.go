package server_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/transport"
)

// Both nodes of a pair send the core's messages (entries, acks,
// heartbeats) only in the apply loop's SendAll of a turn, never one Send
// each, and each class still leaves in order: the primary's entries by
// rising index, the replica's acks never going back.
func TestPairSendsTheCoreMessagesWithSendAll(t *testing.T) {
	net := transport.NewMemNet()
	taps := [2]*server.SendTap{{}, {}}
	tap := func(i int) func(*server.ReplConfig) {
		return func(c *server.ReplConfig) {
			taps[i].Transport = c.Transport
			c.Transport = taps[i]
		}
	}
	a := pairNodeWith(t, net, t.TempDir(), 1, true, tap(0))
	b := pairNodeWith(t, net, t.TempDir(), 2, false, tap(1))
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)
	put(t, a.cli, "k", "first")
	waitLease(t, b)
	taps[0].Reset(nil)
	taps[1].Reset(nil)

	const writers, each = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 20*testLease)
				_, err := a.cli.Put(ctx, fmt.Sprintf("k%d", w), "v")
				cancel()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("put: %v", err)
	}

	core := map[uint16]bool{repl.KindEntries: true, repl.KindAck: true, repl.KindHeartbeat: true}
	count := map[uint16]int{}
	for n, tp := range taps {
		last := map[transport.Class]uint64{}
		for _, c := range tp.Calls() {
			for _, m := range c.Ms {
				if !core[m.Kind] {
					continue
				}
				count[m.Kind]++
				if !c.All {
					t.Fatalf("node %d sent a message of kind %d with Send, not in the loop's SendAll", n+1, m.Kind)
				}
				switch m.Class {
				case transport.Log:
					if m.Index <= last[m.Class] {
						t.Fatalf("node %d sent entries from index %d after entries from %d", n+1, m.Index, last[m.Class])
					}
				case transport.Ack:
					if m.Index < last[m.Class] {
						t.Fatalf("node %d acknowledged index %d after %d", n+1, m.Index, last[m.Class])
					}
				}
				last[m.Class] = m.Index
			}
		}
	}
	// Each write's entries and ack were seen (group commit may share them).
	if count[repl.KindEntries] == 0 || count[repl.KindAck] == 0 {
		t.Fatalf("%d entries messages and %d acks seen for %d writes", count[repl.KindEntries], count[repl.KindAck], writers*each)
	}
}
