package snapshot

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/dyad-db/dyad/test/testutil"
)

// buckets reads every bucket of a snapshot file (bbolt ignores the SHA-256
// trailer after its last page, as etcdutl does).
func buckets(t *testing.T, path string) map[string]map[string][]byte {
	t.Helper()
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("bbolt open %s: %v", path, err)
	}
	defer db.Close()
	out := map[string]map[string][]byte{}
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			m := map[string][]byte{}
			out[string(name)] = m
			return b.ForEach(func(k, v []byte) error {
				m[string(k)] = append([]byte(nil), v...)
				return nil
			})
		})
	})
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// diffBucket lists the entries of one bucket that differ between two files.
func diffBucket(wantLabel string, want map[string][]byte, gotLabel string, got map[string][]byte) []string {
	var out []string
	for _, k := range sortedKeys(want) {
		g, ok := got[k]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%q: only in %s (%q)", k, wantLabel, short(want[k])))
		case !bytes.Equal(want[k], g):
			out = append(out, fmt.Sprintf("%q: %s %q, %s %q", k, wantLabel, short(want[k]), gotLabel, short(g)))
		}
	}
	for _, k := range sortedKeys(got) {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%q: only in %s (%q)", k, gotLabel, short(got[k])))
		}
	}
	return out
}

func short(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + fmt.Sprintf("...(%d bytes)", len(b))
	}
	return string(b)
}

// TestSaveFromDyad: etcdctl snapshot save from a running dyad, then etcdutl
// snapshot status (3.6 and 3.5) on the file. The same history is written to
// a real etcd 3.5, whose snapshot is the reference for every field, and for
// the bytes of the MVCC ("key") and "lease" buckets, which must be identical.
func TestSaveFromDyad(t *testing.T) {
	for _, h := range []history{standard, endsCompactedDelete} {
		t.Run(h.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ref, _, refState := startSource(t, "etcd-3.5", h)
			dy, _, dyState := startSource(t, subject(), h)
			compareStates(t, "etcd-3.5", refState, subject(), dyState)

			refSnap := saveSnapshot(t, "etcdctl", ref, dir, "etcd.db")
			dySnap := saveSnapshot(t, "etcdctl", dy, dir, "dyad.db")
			dySnap35 := saveSnapshot(t, "etcdctl-3.5", dy, dir, "dyad-etcdctl35.db")

			fi, err := os.Stat(dySnap)
			if err != nil {
				t.Fatal(err)
			}
			refSt := snapshotStatus(t, "etcdutl", refSnap)
			st := snapshotStatus(t, "etcdutl", dySnap)
			t.Logf("etcdutl 3.6 snapshot status: etcd-3.5 %+v; %s %+v", refSt, subject(), st)
			if st.Revision != dyState.Rev {
				t.Errorf("etcdutl snapshot status revision = %d; dyad's current revision is %d (etcd 3.5's snapshot of the same history: %d)",
					st.Revision, dyState.Rev, refSt.Revision)
			}
			if st.Revision != refSt.Revision {
				t.Errorf("etcdutl snapshot status revision: dyad %d, etcd-3.5 %d", st.Revision, refSt.Revision)
			}
			if st.TotalKey != len(dyState.KVs) || st.TotalKey != refSt.TotalKey {
				t.Errorf("etcdutl snapshot status totalKey (live keys) = %d; dyad serves %d keys; etcd-3.5's snapshot: %d",
					st.TotalKey, len(dyState.KVs), refSt.TotalKey)
			}
			if st.TotalSize != fi.Size()-32 {
				t.Errorf("etcdutl snapshot status totalSize = %d; file is %d bytes = bbolt file + 32-byte SHA-256", st.TotalSize, fi.Size())
			}
			if st.Version != refSt.Version {
				if subject() == testutil.TargetDyad {
					t.Errorf("etcdutl snapshot status version (meta storageVersion): dyad %q, etcd-3.5 %q", st.Version, refSt.Version)
				} else {
					t.Logf("etcdutl snapshot status version: %s %q, etcd-3.5 %q (version skew, not checked)", subject(), st.Version, refSt.Version)
				}
			}

			bk := buckets(t, dySnap)
			refBk := buckets(t, refSnap)
			all := 0
			for _, b := range bk {
				all += len(b)
			}
			st35 := snapshotStatus(t, "etcdutl-3.5", dySnap)
			refSt35 := snapshotStatus(t, "etcdutl-3.5", refSnap)
			t.Logf("etcdutl 3.5 snapshot status: etcd-3.5 %+v; %s %+v", refSt35, subject(), st35)
			if st35.Revision != st.Revision || st35.Hash != st.Hash {
				t.Errorf("etcdutl 3.5 and 3.6 disagree on dyad's snapshot: 3.5 %+v, 3.6 %+v", st35, st)
			}
			if st35.TotalKey != all {
				t.Errorf("etcdutl 3.5 snapshot status totalKey = %d; the file holds %d entries in all buckets", st35.TotalKey, all)
			}
			if st3 := snapshotStatus(t, "etcdutl", dySnap35); st3.Revision != st.Revision || st3.TotalKey != st.TotalKey {
				t.Errorf("snapshot saved with etcdctl 3.5: status %+v, with etcdctl 3.6: %+v", st3, st)
			}

			// The MVCC history and the leases must be byte-identical.
			for _, name := range []string{"key", "lease"} {
				if d := diffBucket("etcd-3.5", refBk[name], subject(), bk[name]); len(d) > 0 {
					t.Errorf("bucket %q differs from etcd 3.5's snapshot of the same history (%d entries):\n  %s",
						name, len(d), strings.Join(d, "\n  "))
				}
			}
			for _, k := range []string{"finishedCompactRev", "scheduledCompactRev"} {
				if !bytes.Equal(refBk["meta"][k], bk["meta"][k]) {
					t.Errorf("meta %q: etcd-3.5 %q, dyad %q", k, refBk["meta"][k], bk["meta"][k])
				}
			}
			// Everything else is per-cluster state; log how it differs.
			for _, name := range sortedKeys(refBk) {
				if name == "key" || name == "lease" {
					continue
				}
				if _, ok := bk[name]; !ok {
					t.Errorf("bucket %q of etcd's schema is missing from dyad's snapshot", name)
					continue
				}
				if d := diffBucket("etcd-3.5", refBk[name], subject(), bk[name]); len(d) > 0 {
					t.Logf("bucket %q (cluster-specific, informational):\n  %s", name, strings.Join(d, "\n  "))
				}
			}
		})
	}
}
