package crash

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ack is an acknowledged put: its key (which is also its value) and the
// revision it was acknowledged at.
type ack struct {
	key string
	rev int64
}

// acks collects the puts that concurrent writers saw acknowledged.
type acks struct {
	mu   sync.Mutex
	list []ack
}

func (a *acks) add(key string, rev int64) {
	a.mu.Lock()
	a.list = append(a.list, ack{key, rev})
	a.mu.Unlock()
}

func (a *acks) len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.list)
}

// all is a copy of the acknowledged puts so far.
func (a *acks) all() []ack {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]ack(nil), a.list...)
}

// writeUntil starts n writers that put key(w, i) = key(w, i) for i = 0,
// 1, ... until ctx ends, each put with a 2 s timeout, and records every
// acknowledged put in into. A failed put's outcome is unknown, so it is
// not recorded; its writer then returns, or, with goOn, moves to its next
// key (a client of both zones fails over to the other). The returned
// function waits until every writer has returned.
func writeUntil(ctx context.Context, cli *clientv3.Client, n int, key func(w, i int) string, into *acks, goOn bool) (wait func()) {
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				k := key(w, i)
				c, cancel := context.WithTimeout(ctx, 2*time.Second)
				resp, err := cli.Put(c, k, k)
				cancel()
				switch {
				case err == nil:
					into.add(k, resp.Header.Revision)
				case !goOn:
					return
				}
			}
		}()
	}
	return wg.Wait
}
