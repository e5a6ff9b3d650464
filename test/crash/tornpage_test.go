package crash

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/test/testutil"
)

// dataFile is where dyad keeps its bbolt file (etcd's layout).
func dataFile(dataDir string) string { return filepath.Join(dataDir, "member", "snap", "db") }

// keyRootPage returns the page size and the id of the key bucket's root
// page of a stopped node's data file.
func keyRootPage(t *testing.T, path string) (int64, int64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var root int64
	db.View(func(tx *bolt.Tx) error {
		root = int64(tx.Bucket([]byte("key")).Root())
		return nil
	})
	if root < 2 {
		t.Fatalf("key bucket is inline (root %d): write more keys", root)
	}
	return int64(db.Info().PageSize), root
}

// TestTornPageOnRestart writes through a real dyad, stops it cleanly,
// garbles one page of its data file as a disk that tears or loses a
// synced write would, and restarts it. A lost meta page must cost nothing
// (bbolt's other meta page; a clean stop leaves both current); a garbled
// data page must stop dyad from starting with a clear error. Either way
// dyad never serves data that differs from what was acknowledged.
func TestTornPageOnRestart(t *testing.T) {
	tests := []struct {
		name     string
		page     func(t *testing.T, path string) (int64, int64) // page size, page id
		wantFail bool
	}{
		{"meta page 0", func(t *testing.T, p string) (int64, int64) { ps, _ := keyRootPage(t, p); return ps, 0 }, false},
		{"meta page 1", func(t *testing.T, p string) (int64, int64) { ps, _ := keyRootPage(t, p); return ps, 1 }, false},
		{"key bucket root page", keyRootPage, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := testutil.StartDyad(t)
			cli := srv.Client(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			acked := map[string]int64{}
			for i := 0; i < 300; i++ {
				k := fmt.Sprintf("tp/%04d", i)
				resp, err := cli.Put(ctx, k, strings.Repeat(k, 20))
				if err != nil {
					t.Fatal(err)
				}
				acked[k] = resp.Header.Revision
			}
			if err := srv.Stop(); err != nil {
				t.Fatal(err)
			}
			path := dataFile(srv.DataDir())
			ps, pg := tt.page(t, path)
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			junk := make([]byte, ps)
			rand.New(rand.NewSource(pg)).Read(junk)
			_, err = f.WriteAt(junk, pg*ps)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			err = srv.Restart()
			if tt.wantFail {
				if err == nil {
					t.Fatal("dyad started on a data file with a garbled page")
				}
				if tail := srv.LogTail(); !strings.Contains(tail, "data file is corrupt") || strings.Contains(tail, "panic") {
					t.Fatalf("refused to start, but not with a clear corruption error:\n%s", tail)
				}
				return
			}
			if err != nil {
				t.Fatalf("restart after a lost meta page: %v\n%s", err, srv.LogTail())
			}
			cli = srv.Client(t)
			all, err := cli.Get(ctx, "tp/", clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			if len(all.Kvs) != len(acked) {
				t.Fatalf("%d keys after restart, %d acknowledged", len(all.Kvs), len(acked))
			}
			for _, kv := range all.Kvs {
				k := string(kv.Key)
				if kv.ModRevision != acked[k] || string(kv.Value) != strings.Repeat(k, 20) {
					t.Fatalf("%s: rev %d value %.20q, acknowledged at rev %d", k, kv.ModRevision, kv.Value, acked[k])
				}
			}
		})
	}
}
