package server_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/storage"
	"github.com/dyad-db/dyad/internal/transport"
	"github.com/dyad-db/dyad/internal/wal"
)

// copyDir copies the files under src into dst (created), as a crash would
// find them: the node may still run, so the copy is taken while no write
// is in flight.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// consistentIndex reads the data file of the stopped node at dir.
func consistentIndex(t *testing.T, dir string) uint64 {
	t.Helper()
	be, err := storage.Open(server.DBPath(dir), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	var c uint64
	be.View(func(tx storage.ReadTx) error {
		c = storage.Uint64(tx.Get(storage.BucketMeta, storage.MetaConsistentIndex))
		return nil
	})
	return c
}

// journaled returns the entries in the journal of the stopped node at dir.
func journaled(t *testing.T, dir string) []repl.Entry {
	t.Helper()
	j, ents, err := wal.Open(server.JournalDir(dir), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	return ents
}

// getRev reads k and its mod revision (0: absent).
func getRev(t *testing.T, cli *clientv3.Client, k string) (string, int64) {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := cli.Get(c, k)
	if err != nil {
		t.Fatalf("get %s: %v", k, err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
}

// A node that stopped with batches in its journal that its data file
// lacks (a crash between the journal's fdatasync and the data file's
// commit) replays them at the next start: every key is back at the
// revision it was written at, with the same consistent_index, and the
// journal is empty afterwards. The data dir is made so: the data file as
// it stood after the first writes, the journal of a later run that took
// more. An offline command (force-primary) replays it first.
func TestJournalReplaysWhatTheDataFileLacks(t *testing.T) {
	cfg := testConfig(t)
	dir1, dir2 := cfg.DataDir, t.TempDir()
	n := startNode(t, cfg)
	for i := range 5 {
		put(t, n.cli, fmt.Sprintf("k%02d", i), fmt.Sprintf("v%d", i))
	}
	n.stop()
	copyDir(t, dir1, dir2)

	n = startNode(t, cfg)
	revs := map[string]int64{}
	for i := 5; i < 40; i++ {
		k := fmt.Sprintf("k%02d", i)
		revs[k] = put(t, n.cli, k, fmt.Sprintf("v%d", i))
	}
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := n.cli.Delete(c, "k00"); err != nil {
		t.Fatal(err)
	}
	lease, err := n.cli.Grant(c, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.cli.Put(c, "leased", "x", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	_, rev, _ := n.srv.Store().Revs()
	idx := server.AppliedIndex(n.srv)
	if err := os.RemoveAll(server.JournalDir(dir2)); err != nil {
		t.Fatal(err)
	}
	copyDir(t, server.JournalDir(dir1), server.JournalDir(dir2))
	n.stop()

	before := consistentIndex(t, dir2)
	if before >= idx {
		t.Fatalf("setup: the copied data file is at %d, not behind the journal's %d", before, idx)
	}
	// force-primary (on a copy) sees the journaled tail: its solo epoch
	// starts after the last entry, not inside the tail.
	dir3 := t.TempDir()
	copyDir(t, dir2, dir3)
	rec, err := server.ForcePrimary(dir3)
	if err != nil || rec.Start != idx+1 {
		t.Fatalf("force-primary on a data dir with a journaled tail: epoch %+v, %v; want it to start at %d", rec, err, idx+1)
	}
	if got := consistentIndex(t, dir3); got != idx {
		t.Fatalf("consistent_index %d after force-primary, want the journal's %d", got, idx)
	}

	cfg2 := cfg
	cfg2.DataDir = dir2
	n2 := startNode(t, cfg2)
	if got := server.AppliedIndex(n2.srv); got != idx {
		t.Fatalf("applied index %d after the replay, want %d", got, idx)
	}
	if _, got, _ := n2.srv.Store().Revs(); got != rev {
		t.Fatalf("revision %d after the replay, want %d", got, rev)
	}
	for i := 1; i < 40; i++ {
		k := fmt.Sprintf("k%02d", i)
		v, mod := getRev(t, n2.cli, k)
		if v != fmt.Sprintf("v%d", i) || (revs[k] != 0 && mod != revs[k]) {
			t.Fatalf("%s=%q at %d after the replay, want v%d at %d", k, v, mod, i, revs[k])
		}
	}
	if v, _ := getRev(t, n2.cli, "k00"); v != "" {
		t.Fatalf("k00=%q after the replay, want it deleted", v)
	}
	ttl, err := n2.cli.TimeToLive(c, lease.ID, clientv3.WithAttachedKeys())
	if err != nil || ttl.TTL <= 0 || len(ttl.Keys) != 1 {
		t.Fatalf("the replayed lease: %+v, %v; want it alive with its key", ttl, err)
	}
	n2.stop()
	if got := consistentIndex(t, dir2); got != idx {
		t.Fatalf("consistent_index %d after the replay and a stop, want %d", got, idx)
	}
	if ents := journaled(t, dir2); len(ents) != 0 {
		t.Fatalf("the journal holds %d entries after a clean stop, want none", len(ents))
	}
}

// A journal that starts above consistent_index+1 leaves entries nobody
// holds: the node refuses to start and names both indexes.
func TestJournalRefusesAGap(t *testing.T) {
	cfg := testConfig(t)
	n := startNode(t, cfg)
	put(t, n.cli, "a", "1")
	n.stop()
	c := consistentIndex(t, cfg.DataDir)

	req := &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("b"), Value: []byte("2")}}
	data, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	j, _, err := wal.Open(server.JournalDir(cfg.DataDir), wal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Append([]repl.Entry{{Index: c + 2, Data: data}}); err != nil {
		t.Fatal(err)
	}
	j.Close()

	s, err := server.New(cfg)
	if err == nil {
		s.Close()
		t.Fatalf("a node started with a journal starting at %d over a data file at %d", c+2, c)
	}
	for _, want := range []string{fmt.Sprintf("starts at entry %d", c+2), fmt.Sprintf("up to %d", c)} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("start refused with %q, want it to say %q", err, want)
		}
	}
}

// A suffix dropped on rejoin (entries the replica never acknowledged)
// leaves the journal too: a node that crashed right after the drop does
// not bring the dropped entries back when it starts.
func TestJournalForgetsATruncatedSuffix(t *testing.T) {
	net := transport.NewMemNet()
	dirA := t.TempDir()
	a, b := startPair(t, net, dirA, t.TempDir())
	put(t, a.cli, "k", "acked")

	net.Block(1, 2, true) // A's entries no longer reach B
	putUnacknowledged(t, a.cli, "k")
	waitRole(t, b, repl.RoleSolo)
	waitRole(t, a, repl.RoleWaiting)
	net.Block(1, 2, false)
	n := restartCopyAfter(t, a, b, dirA, "dropped its unacknowledged suffix", func() bool {
		return promtest.ToFloat64(a.cfg.Metrics.SuffixesDropped) >= 1
	})
	if v, _ := getRev(t, n.cli, "k"); v != "acked" {
		t.Fatalf("after a crash right after the drop, k=%q, want the acknowledged value", v)
	}
}

// A snapshot install (the suffix also granted a lease, so it cannot be
// dropped in place) empties the journal before the data file is
// replaced: a node that crashed right after the install does not replay
// its old entries over the leader's file.
func TestJournalForgetsWhatASnapshotReplaced(t *testing.T) {
	net := transport.NewMemNet()
	dirA := t.TempDir()
	a, b := startPair(t, net, dirA, t.TempDir())
	put(t, a.cli, "k", "acked")

	net.Block(1, 2, true) // A's entries no longer reach B
	grantUnacknowledged(t, a.cli, 4242)
	waitRole(t, b, repl.RoleSolo)
	net.Block(1, 2, false)
	n := restartCopyAfter(t, a, b, dirA, "installed its peer's snapshot", func() bool {
		return counter(t, a.cfg.Metrics.SnapshotsInstalled) >= 1
	})
	if c := n.srv.Lessor().Count(); c != 0 {
		t.Fatalf("after a crash right after the install, %d leases, want none (the grant was never acknowledged)", c)
	}
}

// A journal append that fails is a storage failure, as a failed commit
// is: the batch is refused, and the node refuses everything after.
func TestJournalAppendFailureStopsTheNode(t *testing.T) {
	n := startNode(t, testConfig(t))
	put(t, n.cli, "before", "1")
	server.InjectJournalFault(n.srv, func() error { return syscall.EIO })
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := n.cli.Put(c, "during", "2"); err == nil {
		t.Fatal("a write whose journal append failed was acknowledged")
	}
	server.InjectJournalFault(n.srv, nil)
	if _, err := n.cli.Put(c, "after", "3"); err == nil {
		t.Fatal("a node whose journal failed acknowledged a later write")
	}
	if err := n.srv.Healthy(); err == nil {
		t.Fatal("a node whose journal failed reports healthy")
	}
}

// oldSingleFixture is the data dir of a single node written by dyad at
// commit 9e26e39, before the journal: 30 puts k00=v0 ... k29=v29 (at
// revisions 2 to 31), then k05 deleted, then a clean stop.
const oldSingleFixture = "testdata/single-9e26e39.tar.gz"

// untar extracts the gzipped tar archive at path into dir.
func untar(t *testing.T, path, dir string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Clean(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o700); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			w, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(w, tr); err != nil {
				t.Fatal(err)
			}
			w.Close()
		}
	}
}

// A data dir written before the journal existed opens with every write in
// it at its revision, gets an empty journal, and takes new writes.
func TestJournalOpensADataDirFromBeforeIt(t *testing.T) {
	root := t.TempDir()
	untar(t, oldSingleFixture, root)
	dir := filepath.Join(root, "single")
	if _, err := os.Stat(server.JournalDir(dir)); !os.IsNotExist(err) {
		t.Fatalf("the fixture already has a journal (%v)", err)
	}
	cfg := testConfig(t)
	cfg.DataDir = dir
	n := startNode(t, cfg)
	for i := range 30 {
		k, want := fmt.Sprintf("k%02d", i), fmt.Sprintf("v%d", i)
		if i == 5 {
			want = ""
		}
		v, mod := getRev(t, n.cli, k)
		if v != want || want != "" && mod != int64(i+2) {
			t.Fatalf("%s=%q at %d, want %q at %d", k, v, mod, want, i+2)
		}
	}
	if rev := put(t, n.cli, "new", "1"); rev != 33 {
		t.Fatalf("a new write at revision %d, want 33", rev)
	}
	n.stop()
	if _, err := os.Stat(server.JournalDir(dir)); err != nil {
		t.Fatalf("no journal after the first start: %v", err)
	}
	if ents := journaled(t, dir); len(ents) != 0 {
		t.Fatalf("the journal holds %d entries after a clean stop, want none", len(ents))
	}
}

// oldPairFixture holds the data dirs of a pair ("primary", "replica")
// written by dyad's code at commit 9e26e39, before the journal: an
// in-memory pair took 20 puts, k00=v0 ... k19=v19, and both nodes stopped
// cleanly.
const oldPairFixture = "testdata/pair-9e26e39.tar.gz"

// A pair's data dirs from before the journal open with every write in
// them: the pair forms again, both nodes read all 20 keys, a new write
// replicates, and each node has a journal.
func TestJournalOpensPairDataDirsFromBeforeIt(t *testing.T) {
	root := t.TempDir()
	untar(t, oldPairFixture, root)
	dirA, dirB := filepath.Join(root, "primary"), filepath.Join(root, "replica")
	net := transport.NewMemNet()
	a := pairNode(t, net, dirA, 1, true)
	b := pairNode(t, net, dirB, 2, false)
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)
	waitLease(t, b)
	for _, n := range []*node{a, b} {
		for i := range 20 {
			k, want := fmt.Sprintf("k%02d", i), fmt.Sprintf("v%d", i)
			if v, _ := get(t, n.cli, k); v != want {
				t.Fatalf("%s reads %s=%q, want %q", n.cfg.Name, k, v, want)
			}
		}
	}
	rev := put(t, a.cli, "new", "1")
	if v, got := get(t, b.cli, "new"); v != "1" || got < rev {
		t.Fatalf("the replica reads new=%q at %d after a write at %d", v, got, rev)
	}
	for _, d := range []string{dirA, dirB} {
		if _, err := os.Stat(server.JournalDir(d)); err != nil {
			t.Fatalf("no journal in %s after the start: %v", d, err)
		}
	}
}

// TestJournalRestoresWritesTheDataFileNeverCommitted takes a copy of a
// running node's data dir whose data file has committed nothing since
// the node started (the background commit is off and the batch limit out
// of reach), as a crash would leave it, and starts a node on the copy:
// every acknowledged write comes back, from the journal alone.
func TestJournalRestoresWritesTheDataFileNeverCommitted(t *testing.T) {
	cfg := testConfig(t)
	cfg.BackendBatchInterval = -1
	cfg.BackendBatchLimit = 1 << 30
	n := startNode(t, cfg)
	revs := map[string]int64{}
	for i := range 30 {
		k := fmt.Sprintf("k%02d", i)
		revs[k] = put(t, n.cli, k, fmt.Sprintf("v%d", i))
	}
	crashed := t.TempDir()
	copyDir(t, cfg.DataDir, crashed)
	n.stop()

	if c, last := consistentIndex(t, crashed), len(journaled(t, crashed)); c >= uint64(len(revs)) || last < len(revs) {
		t.Fatalf("the copy's data file is at index %d and its journal holds %d entries: the test needs the writes in the journal only", c, last)
	}
	cfg.DataDir = crashed
	n = startNode(t, cfg)
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for k, rev := range revs {
		r, err := n.cli.Get(c, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Kvs) != 1 || r.Kvs[0].ModRevision != rev {
			t.Fatalf("%s after the restart: %v, want it at revision %d", k, r.Kvs, rev)
		}
	}
}

// restartCopyAfter waits (up to 40 leases) until done says the old
// primary a went through what, then until it follows again, and starts a
// single node on a copy of a's data dir taken at that moment, as a crash
// there would leave it; the pair is stopped.
func restartCopyAfter(t *testing.T, a, b *node, dirA, what string, done func() bool) *node {
	t.Helper()
	deadline := time.Now().Add(40 * testLease)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("the old primary never %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitRole(t, a, repl.RoleReplica)
	crashed := t.TempDir()
	copyDir(t, dirA, crashed)
	a.stop()
	b.stop()
	cfg := testConfig(t)
	cfg.DataDir = crashed
	return startNode(t, cfg)
}

// TestJournalStaysWithinItsBound writes four times the journal's bound
// with the background commit off and the batch limit out of reach, so
// that only the bound can commit the data file and empty the journal. A
// copy taken while the node runs (a crash) must show both: a data file
// that moved on and a journal holding less than all the writes; a start
// on the copy brings every write back at its revision.
func TestJournalStaysWithinItsBound(t *testing.T) {
	const bound, size, writes = 64 << 10, 4 << 10, 64 // 256 KiB of values
	cfg := testConfig(t)
	cfg.BackendBatchInterval = -1
	cfg.BackendBatchLimit = 1 << 30
	cfg.JournalMaxBytes = bound
	n := startNode(t, cfg)
	revs := map[string]int64{}
	for i := range writes {
		k := fmt.Sprintf("k%02d", i)
		revs[k] = put(t, n.cli, k, strings.Repeat(string(rune('a'+i%26)), size))
	}
	crashed := t.TempDir()
	copyDir(t, cfg.DataDir, crashed)
	n.stop()

	c, held := consistentIndex(t, crashed), journaled(t, crashed)
	if c == 0 {
		t.Fatalf("the data file never committed: the journal's bound of %d bytes did not hold (%d entries journaled)", bound, len(held))
	}
	var bytes int
	for _, e := range held {
		bytes += len(e.Data)
	}
	if len(held) >= writes || bytes > 2*bound {
		t.Fatalf("the journal holds %d entries, %d bytes of data: want fewer than the %d writes and at most twice the bound %d", len(held), bytes, writes, bound)
	}
	cfg.DataDir = crashed
	n = startNode(t, cfg)
	for k, rev := range revs {
		if _, got := getRev(t, n.cli, k); got != rev {
			t.Fatalf("%s after the restart is at revision %d, want %d", k, got, rev)
		}
	}
}
