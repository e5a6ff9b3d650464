package server_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/internal/mvcc"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/storage"
)

// seedDataFile builds a small data file holding every kind of record a node
// reads back when it opens: keys (current, overwritten, deleted), a lease
// with a key, a user and a role, a compaction and the meta records.
func seedDataFile(f *testing.F) []byte {
	cfg := testConfig(f)
	n := startNode(f, cfg)
	c := context.Background()
	lg, err := n.cli.Grant(c, 600)
	if err != nil {
		f.Fatal(err)
	}
	for _, kv := range [][2]string{{"a", "1"}, {"b", "2"}, {"a", "3"}, {"\xff\x00", "bin"}} {
		if _, err := n.cli.Put(c, kv[0], kv[1]); err != nil {
			f.Fatal(err)
		}
	}
	if _, err := n.cli.Put(c, "leased", "x", clientv3.WithLease(lg.ID)); err != nil {
		f.Fatal(err)
	}
	if _, err := n.cli.Delete(c, "b"); err != nil {
		f.Fatal(err)
	}
	if _, err := n.cli.Compact(c, 3); err != nil {
		f.Fatal(err)
	}
	if _, err := n.cli.UserAdd(c, "u", "p"); err != nil {
		f.Fatal(err)
	}
	if _, err := n.cli.RoleAdd(c, "r"); err != nil {
		f.Fatal(err)
	}
	if _, err := n.cli.RoleGrantPermission(c, "r", "a", "b", clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		f.Fatal(err)
	}
	n.stop()
	b, err := os.ReadFile(server.DBPath(cfg.DataDir))
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// recordBuckets are the buckets whose records a node decodes when it opens
// a data file (its own, or a snapshot the replica installs).
var recordBuckets = [][]byte{storage.BucketKey, storage.BucketMeta, storage.BucketLease, storage.BucketAlarm,
	storage.BucketAuth, storage.BucketAuthUsers, storage.BucketAuthRoles, storage.BucketLog, storage.BucketEpochs}

// FuzzOpenDataFile writes one fuzzed record (a bucket, a key and a value,
// replacing a real record when the key exists) into a valid data file, then
// opens a node on it and reads everything back. Opening must fail with an
// error or give a node that answers reads; never a panic. The damage is to
// records, which dyad decodes; bbolt's own page structure is bbolt's to
// check, and bbolt panics on a damaged one (etcd alike), which is why
// snapshots travel with a checksum.
func FuzzOpenDataFile(f *testing.F) {
	good := seedDataFile(f)
	rev := func(main int64) []byte { return mvcc.RevBytes(mvcc.Revision{Main: main}) }
	f.Add(uint8(0), rev(2), []byte{0xff})                   // a key revision with a garbled value
	f.Add(uint8(0), []byte{1, 2, 3}, []byte("x"))           // a malformed revision key
	f.Add(uint8(1), storage.MetaConsistentIndex, []byte{1}) // a short meta integer
	f.Add(uint8(1), storage.MetaFinishedCompact, []byte("bad"))
	f.Add(uint8(1), storage.MetaScheduledCompct, rev(1<<40))
	f.Add(uint8(2), []byte{0, 0, 0, 0, 0, 0, 0, 7}, []byte{0x08})
	f.Add(uint8(3), []byte{0x08, 0x01}, []byte{})
	f.Add(uint8(5), []byte("u"), []byte{0x0a, 0xff})
	f.Add(uint8(6), []byte("r"), []byte{0x12, 0x03, 0x08})
	f.Add(uint8(7), []byte{0, 0, 0, 0, 0, 0, 0, 1}, []byte{0x01, 0x02})
	f.Add(uint8(8), []byte{0}, []byte{})
	f.Fuzz(func(t *testing.T, bucket uint8, key, value []byte) {
		if int(bucket) >= len(recordBuckets) || len(key) == 0 {
			return
		}
		cfg := testConfig(t)
		cfg.UnsafeNoFsync = true // damage, not durability, is under test
		path := server.DBPath(cfg.DataDir)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, good, 0o600); err != nil {
			t.Fatal(err)
		}
		db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(recordBuckets[bucket]).Put(key, value)
		})
		db.Close()
		if err != nil {
			return // bbolt refuses the key (too long)
		}
		srv, err := server.New(cfg)
		if err != nil {
			return
		}
		defer srv.Close()
		c := context.Background()
		if _, err := srv.Range(c, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Serializable: true}); err != nil {
			return
		}
		_, _ = srv.LeaseLeases(c)
		_, _ = srv.HashKV(c, &pb.HashKVRequest{})
	})
}
