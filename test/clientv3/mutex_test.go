package clientv3

import (
	"context"
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// TestMutexContention: while one session holds the lock a second one
// blocks; it acquires as soon as the first unlocks.
func TestMutexContention(t *testing.T) {
	srv := startServer(t)
	ctx := testCtx(t)
	s1, cli := newSession(t, srv, 30)
	s2, _ := newSession(t, srv, 30)
	m1 := concurrency.NewMutex(s1, "/lock/")
	m2 := concurrency.NewMutex(s2, "/lock/")

	if err := m1.Lock(ctx); err != nil {
		t.Fatalf("m1.Lock: %v", err)
	}
	lock2 := goAsync(func() error { return m2.Lock(ctx) })
	waitKeys(t, cli, "/lock/", 2) // m2 has queued its key and waits on m1's
	lock2.pending(t, "m2.Lock while m1 holds the lock")

	// The holder's ownership compare (its key's create revision) holds.
	resp, err := cli.Txn(ctx).If(m1.IsOwner()).Then(clientv3.OpPut("/guarded", "by m1")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("txn guarded by m1.IsOwner: succeeded=%v err=%v; want success", resp != nil && resp.Succeeded, err)
	}
	// The holder is the queued key with the lowest create revision.
	first, err := cli.Get(ctx, "/lock/", clientv3.WithFirstCreate()...)
	if err != nil || len(first.Kvs) != 1 || string(first.Kvs[0].Key) != m1.Key() {
		t.Fatalf("first-created key under /lock/ = %v (err %v), want m1's %s", first, err, m1.Key())
	}

	if err := m1.Unlock(ctx); err != nil {
		t.Fatalf("m1.Unlock: %v", err)
	}
	if err := lock2.wait(t, "m2.Lock after m1.Unlock"); err != nil {
		t.Fatalf("m2.Lock: %v", err)
	}
	resp, err = cli.Txn(ctx).If(m2.IsOwner()).Then(clientv3.OpPut("/guarded", "by m2")).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("txn guarded by m2.IsOwner after acquiring: succeeded=%v err=%v", resp != nil && resp.Succeeded, err)
	}
	if err := m2.Unlock(ctx); err != nil {
		t.Fatalf("m2.Unlock: %v", err)
	}
	waitKeys(t, cli, "/lock/", 0)
}

// TestMutexLockOrder: waiters acquire in the order they queued (by create
// revision), not in any other order.
func TestMutexLockOrder(t *testing.T) {
	srv := startServer(t)
	ctx := testCtx(t)
	s1, cli := newSession(t, srv, 30)
	s2, _ := newSession(t, srv, 30)
	s3, _ := newSession(t, srv, 30)
	m1 := concurrency.NewMutex(s1, "/order/")
	m2 := concurrency.NewMutex(s2, "/order/")
	m3 := concurrency.NewMutex(s3, "/order/")

	if err := m1.Lock(ctx); err != nil {
		t.Fatalf("m1.Lock: %v", err)
	}
	lock2 := goAsync(func() error { return m2.Lock(ctx) })
	waitKeys(t, cli, "/order/", 2)
	lock3 := goAsync(func() error { return m3.Lock(ctx) })
	waitKeys(t, cli, "/order/", 3)
	lock2.pending(t, "m2.Lock")
	lock3.pending(t, "m3.Lock")

	// Keys are ordered by creation: m1 < m2 < m3.
	resp, err := cli.Get(ctx, "/order/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	wantKeys := []string{m1.Key(), m2.Key(), m3.Key()}
	for i, kv := range resp.Kvs {
		if string(kv.Key) != wantKeys[i] {
			t.Fatalf("queue position %d = %s, want %s", i, kv.Key, wantKeys[i])
		}
	}

	if err := m1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lock2.wait(t, "m2.Lock after m1.Unlock"); err != nil {
		t.Fatalf("m2.Lock: %v", err)
	}
	waitKeys(t, cli, "/order/", 2)
	lock3.pending(t, "m3.Lock while m2 holds the lock")
	if err := m2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lock3.wait(t, "m3.Lock after m2.Unlock"); err != nil {
		t.Fatalf("m3.Lock: %v", err)
	}
	if err := m3.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestMutexTryLock: TryLock fails fast with ErrLocked while another session
// holds the lock, leaves no waiter key behind, and succeeds once it is free.
func TestMutexTryLock(t *testing.T) {
	srv := startServer(t)
	ctx := testCtx(t)
	s1, cli := newSession(t, srv, 30)
	s2, _ := newSession(t, srv, 30)
	m1 := concurrency.NewMutex(s1, "/try/")
	m2 := concurrency.NewMutex(s2, "/try/")

	if err := m1.TryLock(ctx); err != nil {
		t.Fatalf("m1.TryLock on a free lock: %v", err)
	}
	if err := m2.TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("m2.TryLock while m1 holds: err = %v, want ErrLocked", err)
	}
	waitKeys(t, cli, "/try/", 1) // m2's attempt removed its key
	// Re-entry by the holder's session is allowed (same lease, same key).
	if err := concurrency.NewMutex(s1, "/try/").TryLock(ctx); err != nil {
		t.Fatalf("TryLock by the holding session: %v", err)
	}
	if err := m1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m2.TryLock(ctx); err != nil {
		t.Fatalf("m2.TryLock after unlock: %v", err)
	}
	if err := m2.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestMutexSessionLossReleasesLock: when the holder's session lease is
// revoked (its process died), its key goes and the waiter acquires.
func TestMutexSessionLossReleasesLock(t *testing.T) {
	srv := startServer(t)
	ctx := testCtx(t)
	// A short TTL so the holder's client notices the lost lease quickly
	// (keep-alives go out every TTL/3).
	s1, cli := newSession(t, srv, 5)
	s2, _ := newSession(t, srv, 30)
	m1 := concurrency.NewMutex(s1, "/loss/")
	m2 := concurrency.NewMutex(s2, "/loss/")
	if err := m1.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	lock2 := goAsync(func() error { return m2.Lock(ctx) })
	waitKeys(t, cli, "/loss/", 2)
	lock2.pending(t, "m2.Lock")

	if _, err := cli.Revoke(ctx, s1.Lease()); err != nil {
		t.Fatalf("revoke holder's lease: %v", err)
	}
	if err := lock2.wait(t, "m2.Lock after the holder's lease was revoked"); err != nil {
		t.Fatalf("m2.Lock: %v", err)
	}
	select {
	case <-s1.Done():
	case <-timeAfter():
		t.Fatal("holder's session not done after its lease was revoked")
	}
	resp, err := cli.Txn(ctx).If(m1.IsOwner()).Then(clientv3.OpPut("/x", "y")).Commit()
	if err != nil || resp.Succeeded {
		t.Fatalf("txn guarded by the dead holder: succeeded=%v err=%v; want failure", resp != nil && resp.Succeeded, err)
	}
}
