package snapshot

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/dyad-db/dyad/test/testutil"
)

// TestMigrateIn: a real etcd (3.5 and 3.6) → etcdctl snapshot save → dyad
// snapshot restore → dyad serves exactly what etcd served and continues from
// there.
func TestMigrateIn(t *testing.T) {
	for _, etcd := range []string{"etcd-3.5", "etcd-3.6"} {
		for _, h := range []history{standard, endsCompactedDelete} {
			t.Run(fmt.Sprintf("%s/%s", etcd, h.name), func(t *testing.T) {
				t.Parallel()
				src, _, want := startSource(t, etcd, h)
				dir := t.TempDir()
				snap := saveSnapshot(t, "etcdctl", src, dir, "etcd.db")
				// Stop etcd: the restored dyad must not depend on it.
				if err := src.Stop(); err != nil {
					t.Logf("stopping %s: %v", etcd, err)
				}

				dataDir := filepath.Join(dir, "dyad-data")
				if r := dyadRestore(t, snap, dataDir); r.err != nil {
					t.Fatalf("dyad snapshot restore of %s's snapshot failed:\n%s", etcd, r)
				}
				dy := testutil.StartDyad(t, testutil.WithDataDir(dataDir))
				cli := dy.Client(t)
				got := capture(t, cli, h.compactRev)
				compareStates(t, etcd, want, "dyad", got)
				continueWrites(t, cli, want)

				// And the same after a restart (nothing only in memory).
				if err := dy.Restart(); err != nil {
					t.Fatalf("restart dyad: %v", err)
				}
				after := capture(t, dy.Client(t), h.compactRev)
				if after.Rev != want.Rev+2 {
					t.Errorf("after restart dyad is at revision %d, want %d", after.Rev, want.Rev+2)
				}
			})
		}
	}
}

// TestRollback: dyad → etcdctl snapshot save → etcdutl snapshot restore (3.6
// and 3.5) → a real etcd of the same version serves exactly what dyad
// served and continues from there.
func TestRollback(t *testing.T) {
	for _, v := range []struct{ etcdutl, etcd string }{
		{"etcdutl", "etcd-3.6"},
		{"etcdutl-3.5", "etcd-3.5"},
	} {
		for _, h := range []history{standard, endsCompactedDelete} {
			t.Run(fmt.Sprintf("%s/%s", v.etcd, h.name), func(t *testing.T) {
				t.Parallel()
				testutil.RequireBinary(t, v.etcdutl)
				testutil.RequireBinary(t, v.etcd)
				src, _, want := startSource(t, subject(), h)
				dir := t.TempDir()
				snap := saveSnapshot(t, "etcdctl", src, dir, "dyad.db")
				if err := src.Stop(); err != nil {
					t.Errorf("stopping dyad: %v", err)
				}

				dataDir := filepath.Join(dir, "etcd-data")
				peerURL := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
				etcdutlRestore(t, v.etcdutl, snap, dataDir, peerURL)
				e := startRestoredEtcd(t, v.etcd, dataDir, peerURL)
				cli := e.Client(t)
				got := capture(t, cli, h.compactRev)
				compareStates(t, "dyad", want, v.etcd, got)
				continueWrites(t, cli, want)
			})
		}
	}
}
