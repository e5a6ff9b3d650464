package snapshot

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dyad-db/dyad/test/testutil"
)

// TestDyadSnapshotSaveAndStatus: `dyad snapshot save` takes a snapshot of
// dyad and of a real etcd 3.5 holding the same history, and `dyad snapshot
// status` reports for each exactly what etcdutl 3.6 reports (hash,
// revision, live keys, size). A copy with one byte changed fails dyad's
// status.
func TestDyadSnapshotSaveAndStatus(t *testing.T) {
	dyad := testutil.BuildDyad(t)
	dir := t.TempDir()
	ref, _, _ := startSource(t, "etcd-3.5", standard)
	dy, _, dyState := startSource(t, subject(), standard)
	var files []string
	for _, s := range []*testutil.Server{ref, dy} {
		path := filepath.Join(dir, string(s.Kind())+".db")
		mustRun(t, dyad, "snapshot", "save", "--endpoints", s.HostPort(), path)
		files = append(files, path)
	}
	for _, path := range files {
		want := snapshotStatus(t, "etcdutl", path)
		r := mustRun(t, dyad, "snapshot", "status", path, "-w", "json")
		var got snapStatus
		if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &got); err != nil {
			t.Fatalf("dyad snapshot status output %q: %v", r.stdout, err)
		}
		want.Version = ""
		if got != want {
			t.Errorf("%s: dyad snapshot status %+v, etcdutl snapshot status %+v", filepath.Base(path), got, want)
		}
		if got.Revision != dyState.Rev {
			t.Errorf("%s: revision %d, the history ends at %d", filepath.Base(path), got.Revision, dyState.Rev)
		}
	}

	// One byte changed in the middle of the database part.
	b, err := os.ReadFile(files[1])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	bad := filepath.Join(dir, "bad.db")
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := run(t, dyad, "snapshot", "status", bad); r.err == nil || !strings.Contains(r.stderr, "SHA-256") {
		t.Fatalf("dyad snapshot status of a changed copy:\n%s\nwant a failure naming the SHA-256 check", r)
	}
}
