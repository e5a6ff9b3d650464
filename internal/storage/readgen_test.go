package storage

import (
	"fmt"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// viewTx returns the bbolt transaction a View's ReadTx reads under its
// layers.
func viewTx(tx ReadTx) *bolt.Tx {
	switch t := tx.(type) {
	case *layeredTx:
		return t.base.tx
	case boltTx:
		return t.tx
	}
	panic(fmt.Sprintf("a View's ReadTx of type %T", tx))
}

// openReadTxs is how many bbolt read transactions are open on b's file.
func openReadTxs(b *Backend) int { return b.db.Stats().OpenTxN }

// TestViewsShareAReadTxPerCommit walks a shared read transaction through
// its life: Views between two bbolt commits read one bbolt transaction;
// every kind of bbolt commit (of the applied layers, Update's) gives the
// next View a new one that holds the commit; a superseded transaction
// stays readable for the View still in it and is rolled back when that
// View returns; and a View while a bbolt write transaction runs reads a
// transaction of its own.
func TestViewsShareAReadTxPerCommit(t *testing.T) {
	put := func(k string) func(b *Backend) error {
		return func(b *Backend) error {
			return b.Apply(func(tx WriteTx) error { return tx.Put(BucketKey, []byte(k), []byte("v")) })
		}
	}
	tests := []struct {
		name string
		// between runs after a first View and before a second; the
		// second sees key "x" afterwards iff seen.
		between  func(b *Backend) error
		newTx    bool // the second View reads another bbolt transaction
		seenByTx bool // ... and finds "x" in bbolt itself, not in a layer
	}{
		{"nothing between", func(*Backend) error { return nil }, false, false},
		{"an Apply", put("x"), false, false},
		{"an Apply and its commit", func(b *Backend) error {
			if err := put("x")(b); err != nil {
				return err
			}
			return b.Commit()
		}, true, true},
		{"an Update", func(b *Backend) error {
			return b.Update(func(tx WriteTx) error { return tx.Put(BucketKey, []byte("x"), []byte("v")) })
		}, true, true},
		{"a Commit with nothing applied", func(b *Backend) error { return b.Commit() }, false, false},
		{"a defrag", func(b *Backend) error {
			if err := put("x")(b); err != nil {
				return err
			}
			return b.Defrag()
		}, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := openBatch(t, Options{BatchInterval: -1, NoSync: true})
			var first *bolt.Tx
			if err := b.View(func(tx ReadTx) error { first = viewTx(tx); return nil }); err != nil {
				t.Fatal(err)
			}
			if err := tc.between(b); err != nil {
				t.Fatal(err)
			}
			err := b.View(func(tx ReadTx) error {
				second := viewTx(tx)
				if got := second != first; got != tc.newTx {
					t.Errorf("the second View read a new bbolt transaction: %v, want %v", got, tc.newTx)
				}
				if got := (boltTx{second}).Get(BucketKey, []byte("x")) != nil; got != tc.seenByTx {
					t.Errorf("the second View's bbolt transaction holds x: %v, want %v", got, tc.seenByTx)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if n := openReadTxs(b); n != 1 {
				t.Errorf("%d bbolt read transactions open after the Views returned, want 1 (the shared one)", n)
			}
		})
	}
}

// A View that holds a shared transaction across a commit keeps reading
// the state it began with, Views after the commit read a new transaction
// with the commit in it, and the old one is rolled back when its last
// reader leaves.
func TestSupersededReadTxLivesUntilItsLastReader(t *testing.T) {
	b := openBatch(t, Options{BatchInterval: -1, NoSync: true})
	in, leave := make(chan *bolt.Tx), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- b.View(func(tx ReadTx) error {
			in <- viewTx(tx)
			<-leave
			if tx.Get(BucketKey, []byte("x")) != nil {
				return fmt.Errorf("the long View sees a write committed after it began")
			}
			return nil
		})
	}()
	old := waitFor(t, in, "the long View")
	if err := b.Apply(func(tx WriteTx) error { return tx.Put(BucketKey, []byte("x"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	err := b.View(func(tx ReadTx) error {
		if viewTx(tx) == old {
			t.Error("a View after the commit joined the superseded transaction")
		}
		if tx.Get(BucketKey, []byte("x")) == nil {
			t.Error("a View after the commit misses it")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := openReadTxs(b); n != 2 {
		t.Fatalf("%d bbolt read transactions open, want 2 (the long View's, the new shared one)", n)
	}
	close(leave)
	if err := waitFor(t, done, "the long View's return"); err != nil {
		t.Fatal(err)
	}
	if n := openReadTxs(b); n != 1 {
		t.Fatalf("%d bbolt read transactions open after the long View left, want 1: the superseded one was not rolled back", n)
	}
}

// A View while the applied layers are being committed (from inside the
// commit) reads a bbolt transaction of its own, not a shared one, and
// sees the batch being committed.
func TestViewDuringACommitReadsItsOwnTx(t *testing.T) {
	b := openBatch(t, Options{BatchInterval: -1, NoSync: true})
	var shared, during *bolt.Tx
	if err := b.View(func(tx ReadTx) error { shared = viewTx(tx); return nil }); err != nil {
		t.Fatal(err)
	}
	var hookErr error
	hook := func() {
		hookErr = b.View(func(tx ReadTx) error {
			during = viewTx(tx)
			if tx.Get(BucketKey, []byte("x")) == nil {
				return fmt.Errorf("a View during the commit misses the batch being committed")
			}
			return nil
		})
		b.ovmu.Lock()
		defer b.ovmu.Unlock()
		if b.gen != nil {
			hookErr = fmt.Errorf("a shared read transaction exists during a bbolt write")
		}
	}
	b.commitHook.Store(&hook)
	if err := b.Apply(func(tx WriteTx) error { return tx.Put(BucketKey, []byte("x"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.commitHook.Store(nil)
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if during == nil || during == shared {
		t.Fatal("the View during the commit read the superseded shared transaction")
	}
	if n := openReadTxs(b); n != 0 {
		t.Fatalf("%d bbolt read transactions open after the commit and before any View, want 0", n)
	}
}

// A commit that must grow the memory map waits for every open read
// transaction. The shared one, open with no reader in it, must not hold
// it up: it is superseded before the write begins.
func TestCommitThatRemapsDoesNotWaitForAnIdleSharedTx(t *testing.T) {
	b := openBatch(t, Options{BatchInterval: -1, NoSync: true, InitialMmapSize: 1 << 16})
	if err := b.View(func(ReadTx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 4096)
	if err := b.Apply(func(tx WriteTx) error {
		for i := range 256 { // 1 MiB: far past the 64 KiB map
			if err := tx.Put(BucketKey, []byte(fmt.Sprintf("k%04d", i)), val); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Commit() }()
	if err := waitFor(t, done, "the commit that grows the file"); err != nil {
		t.Fatal(err)
	}
}
