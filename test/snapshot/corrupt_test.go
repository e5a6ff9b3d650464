package snapshot

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/dyad-db/dyad/test/testutil"
)

// clearIntegrityError is what a refusal must mention: that the file failed
// an integrity check, not some incidental error.
var clearIntegrityError = regexp.MustCompile(`(?i)sha-?256|checksum|hash|corrupt|integrity|truncated|too (small|short)`)

// TestRestoreRefusesCorruptSnapshot: dyad snapshot restore checks the
// SHA-256 trailer; a damaged snapshot is refused with a clear error and
// leaves no data dir (or, if the dir existed, nothing inside it).
func TestRestoreRefusesCorruptSnapshot(t *testing.T) {
	dy, _, _ := startSource(t, testutil.TargetDyad, standard)
	dir := t.TempDir()
	good := saveSnapshot(t, "etcdctl", dy, dir, "good.db")
	orig, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	n := len(orig)

	flip := func(off int) func([]byte) []byte {
		return func(b []byte) []byte {
			b = append([]byte(nil), b...)
			b[off] ^= 0x01
			return b
		}
	}
	cases := []struct {
		name   string
		damage func([]byte) []byte
	}{
		{"flip one bit mid-file", flip(n / 2)},
		{"flip one bit in the first meta page", flip(20)},
		{"flip one bit in the last data page", flip(n - 32 - 100)},
		{"flip one bit in the SHA-256 trailer", flip(n - 1)},
		{"truncated by one byte", func(b []byte) []byte { return b[:n-1] }},
		{"trailer cut off", func(b []byte) []byte { return b[:n-32] }},
		{"truncated to 100 bytes", func(b []byte) []byte { return b[:100] }},
		{"empty file", func([]byte) []byte { return nil }},
		{"trailing garbage", func(b []byte) []byte { return append(append([]byte(nil), b...), 0) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap := filepath.Join(t.TempDir(), "bad.db")
			if err := os.WriteFile(snap, c.damage(orig), 0o600); err != nil {
				t.Fatal(err)
			}
			// Into a data dir that does not exist yet.
			dataDir := filepath.Join(t.TempDir(), "data")
			r := dyadRestore(t, snap, dataDir)
			checkRefused(t, r)
			if !notExist(dataDir) {
				t.Errorf("refused restore left %s behind: %v", dataDir, listTree(dataDir))
			}
			// Into an existing, empty data dir.
			empty := t.TempDir()
			r = dyadRestore(t, snap, empty)
			checkRefused(t, r)
			if l := listTree(empty); len(l) != 0 {
				t.Errorf("refused restore left files in the existing data dir: %v", l)
			}
		})
	}

	t.Run("missing snapshot file", func(t *testing.T) {
		dataDir := filepath.Join(t.TempDir(), "data")
		r := dyadRestore(t, filepath.Join(t.TempDir(), "nope.db"), dataDir)
		if r.err == nil {
			t.Fatalf("restore of a missing file succeeded:\n%s", r)
		}
		if !notExist(dataDir) {
			t.Errorf("failed restore left %s behind: %v", dataDir, listTree(dataDir))
		}
	})

	t.Run("data dir already holds a data file", func(t *testing.T) {
		dataDir := filepath.Join(t.TempDir(), "data")
		if r := dyadRestore(t, good, dataDir); r.err != nil {
			t.Fatalf("restore of the intact snapshot failed:\n%s", r)
		}
		before := snapshotTree(t, dataDir)
		r := dyadRestore(t, good, dataDir)
		if r.err == nil {
			t.Fatalf("restore over an existing data file succeeded:\n%s", r)
		}
		t.Logf("refused with: %s", strings.TrimSpace(r.stderr+r.stdout))
		if after := snapshotTree(t, dataDir); !equalTrees(before, after) {
			t.Errorf("refused restore changed the existing data dir: before %v, after %v", keys(before), keys(after))
		}
	})

	t.Run("control: the intact snapshot restores and serves", func(t *testing.T) {
		dataDir := filepath.Join(t.TempDir(), "data")
		if r := dyadRestore(t, good, dataDir); r.err != nil {
			t.Fatalf("restore of the intact snapshot failed:\n%s", r)
		}
		s := testutil.StartDyad(t, testutil.WithDataDir(dataDir))
		got := capture(t, s.Client(t), standard.compactRev)
		if got.Rev != standard.rev {
			t.Errorf("restored dyad is at revision %d, want %d", got.Rev, standard.rev)
		}
	})
}

func checkRefused(t *testing.T, r cmdResult) {
	t.Helper()
	if r.err == nil {
		t.Fatalf("dyad snapshot restore accepted a damaged snapshot:\n%s", r)
	}
	msg := strings.TrimSpace(r.stderr + "\n" + r.stdout)
	t.Logf("refused with: %s", msg)
	if !clearIntegrityError.MatchString(msg) {
		t.Errorf("the error does not say the snapshot failed an integrity check (want a match for %s):\n%s", clearIntegrityError, msg)
	}
}

// listTree lists every path under dir (relative), or nil if dir is absent.
func listTree(dir string) []string {
	var out []string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, rel)
		return nil
	})
	return out
}

func snapshotTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, p := range listTree(dir) {
		full := filepath.Join(dir, p)
		if st, err := os.Stat(full); err == nil && !st.IsDir() {
			b, err := os.ReadFile(full)
			if err != nil {
				t.Fatal(err)
			}
			out[p] = b
		} else {
			out[p+"/"] = nil
		}
	}
	return out
}

func equalTrees(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

func keys(m map[string][]byte) []string { return sortedKeys(m) }
