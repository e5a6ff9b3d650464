package twozone

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/dyad-db/dyad/test/testutil"
)

// saveSnapshot writes node i's etcd-format snapshot (Maintenance.Snapshot,
// what etcdctl snapshot save calls) to path.
func (z *zones) saveSnapshot(t *testing.T, i int, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, err := z.client(i).Snapshot(ctx)
	if err != nil {
		t.Fatalf("snapshot of %c: %v", 'a'+i, err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		t.Fatalf("snapshot of %c: %v", 'a'+i, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// The runbook "Restore a pair from a snapshot" (docs/OPERATIONS.md), step
// by step: a snapshot of a pair with writes, more writes, both nodes
// stopped, the snapshot restored on the preferred zone's node (a), which
// is started alone, then b started with an empty data dir. Both then hold
// exactly the snapshot's keys, and the pair takes writes again. The
// snapshot comes from node b, so the restored file names b's identity:
// each node must still have its own member ID afterwards.
func TestRestorePairFromSnapshot(t *testing.T) {
	z := newZones(t)
	z.start(0)
	z.start(1)
	leader := z.waitPair(30 * time.Second)
	var ids [2]uint64 // each node's member ID, which the restore must keep
	for i := range ids {
		ids[i], _ = z.leader(i)
	}
	putMany(t, z, leader, 300, "before")
	converged(t, z, leader)
	snap := filepath.Join(t.TempDir(), "backup.db")
	z.saveSnapshot(t, 1, snap)
	putMany(t, z, leader, 200, "after")

	z.kill(0)
	z.kill(1)
	for _, d := range []string{"a", "b"} {
		if err := os.RemoveAll(filepath.Join(z.dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	dirA := filepath.Join(z.dir, "a")
	if out, err := exec.Command(z.bin, "snapshot", "restore", snap, "--data-dir", dirA,
		"--name", "a", "--initial-cluster", z.initialCluster()).CombinedOutput(); err != nil {
		t.Fatalf("snapshot restore: %v: %s", err, out)
	}
	if out, err := exec.Command(z.bin, "force-primary", "--data-dir", dirA).CombinedOutput(); err != nil {
		t.Fatalf("force-primary: %v: %s", err, out)
	}
	z.start(0)
	z.waitLeading(0, 30*time.Second)
	z.start(1, "--initial-cluster-state", "existing")
	if got := z.waitPair(60 * time.Second); got != 0 {
		t.Fatalf("node %c leads after the restore, want a", 'a'+got)
	}
	converged(t, z, 0)
	for i := 0; i < 2; i++ {
		if m, l := z.leader(i); m != ids[i] || l != ids[0] {
			t.Errorf("node %c: member %x, leader %x; want member %x, leader %x (a)", 'a'+i, m, l, ids[i], ids[0])
		}
		if n := countKeys(t, z, i, "before"); n != 300 {
			t.Errorf("node %c holds %d of the snapshot's 300 keys", 'a'+i, n)
		}
		if n := countKeys(t, z, i, "after"); n != 0 {
			t.Errorf("node %c holds %d keys written after the snapshot, want 0", 'a'+i, n)
		}
	}
	putMany(t, z, 0, 10, "restored")
	converged(t, z, 0)
	if n := countKeys(t, z, 1, "restored"); n != 10 {
		t.Errorf("node b holds %d of 10 writes made after the restore", n)
	}
}

// initialCluster is the --initial-cluster the pair's nodes run with.
func (z *zones) initialCluster() string {
	return fmt.Sprintf("a=http://%s:2380,b=http://%s:2380", z.net.ReplIP(testutil.ZoneA), z.net.ReplIP(testutil.ZoneB))
}
