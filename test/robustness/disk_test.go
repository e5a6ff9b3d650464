package robustness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/dyad-db/dyad/internal/testenv"
	"github.com/dyad-db/dyad/test/testutil"
)

// smallDisk mounts a tmpfs of size bytes as node's data dir, for the
// full-disk faults. The nodes are killed and the filesystem unmounted when
// the test ends.
func smallDisk(h *harness, node testutil.Zone, size string) string {
	h.t.Helper()
	dir := filepath.Join(h.t.TempDir(), "disk-"+node.String())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0755", "dyadt-robust", dir).CombinedOutput(); err != nil {
		testenv.Missing(h.t, fmt.Sprintf("a tmpfs for the full-disk fault (mount: %v: %s)", err, bytes.TrimSpace(out)),
			"run as root (mount -t tmpfs)")
	}
	h.t.Cleanup(func() {
		// Registered after the pair: runs before its cleanup, so the
		// nodes are killed here first (their files keep the mount busy).
		h.p.Kill(testutil.ZoneA)
		h.p.Kill(testutil.ZoneB)
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			h.t.Errorf("umount %s: %v: %s", dir, err, bytes.TrimSpace(out))
		}
	})
	data := filepath.Join(dir, "data")
	h.p.SetDataDir(node, data)
	return dir
}

// fill writes a file into dir until the filesystem is full and returns
// its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			t.Fatalf("filling %s: %v", dir, err)
		}
	}
	// The last partial write may leave a few bytes: take them too.
	for _, n := range []int{4096, 512, 1} {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				break
			}
		}
	}
	return path
}
