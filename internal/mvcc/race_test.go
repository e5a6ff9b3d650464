package mvcc

import (
	"context"
	"fmt"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/dyad-db/dyad/internal/storage"
)

// TestReadsStayInsideTheirSnapshot races readers against a writer that
// commits and then marks each revision durable, the order the server uses.
// Every Range must find the values of the revisions its index walk names
// (no "in index but not on disk"), and History must return every revision
// it claims to have covered, so a watcher resuming after its last revision
// never skips one.
func TestReadsStayInsideTheirSnapshot(t *testing.T) {
	be, s := openTest(t)
	const writes = 3000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer cancel()
		for i := 0; i < writes; i++ {
			var rev int64
			err := be.Update(func(tx storage.WriteTx) error {
				w := s.Write(tx)
				if _, err := w.Put([]byte(fmt.Sprintf("k%d", i%7)), []byte(fmt.Sprint(i)), 0); err != nil {
					return err
				}
				rev = w.Rev()
				return nil
			})
			if err != nil {
				return err
			}
			s.MarkDurable(rev)
		}
		return nil
	})
	for r := 0; r < 3; r++ {
		g.Go(func() error {
			for gctx.Err() == nil {
				res, rev, err := s.Range([]byte("k"), []byte("l"), RangeOptions{})
				if err != nil {
					return fmt.Errorf("range: %w", err)
				}
				for _, kv := range res.KVs {
					if kv.ModRevision > rev {
						return fmt.Errorf("range at %d returned %s modified at %d", rev, kv.Key, kv.ModRevision)
					}
				}
			}
			return nil
		})
	}
	g.Go(func() error {
		next := s.ReadableRev() + 1
		for gctx.Err() == nil {
			evs, last, err := s.History(next, 1<<62, 0)
			if err != nil {
				return fmt.Errorf("history from %d: %w", next, err)
			}
			for _, ev := range evs {
				if ev.Kv.ModRevision != next {
					return fmt.Errorf("history: got revision %d, want %d", ev.Kv.ModRevision, next)
				}
				next++
			}
			if last >= next {
				return fmt.Errorf("history claims revisions up to %d but returned events only up to %d", last, next-1)
			}
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}
