package server_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/internal/server"
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

// FuzzOpenDataFile opens a node on a damaged data file (a snapshot the
// replica installs or an etcd snapshot being migrated has the same format)
// and reads everything back. The fuzzer's bytes are edits to a valid file:
// each 3-byte group writes one byte at a 16-bit page-scaled offset, so the
// damage lands anywhere while most of the file stays well formed. Opening
// must fail with an error or give a node that answers reads; never a panic.
func FuzzOpenDataFile(f *testing.F) {
	good := seedDataFile(f)
	f.Add([]byte{})
	f.Add([]byte{0x10, 0x00, 0xff})                   // meta page 0
	f.Add([]byte{0x10, 0x10, 0x00, 0x20, 0x10, 0x01}) // page headers
	f.Fuzz(func(t *testing.T, edits []byte) {
		file := bytes.Clone(good)
		for len(edits) >= 3 {
			off := int(binary.LittleEndian.Uint16(edits)) * len(file) >> 16
			file[off] = edits[2]
			edits = edits[3:]
		}
		cfg := testConfig(t)
		cfg.UnsafeNoFsync = true // damage, not durability, is under test
		if err := os.MkdirAll(filepath.Dir(server.DBPath(cfg.DataDir)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(server.DBPath(cfg.DataDir), file, 0o600); err != nil {
			t.Fatal(err)
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
	})
}
