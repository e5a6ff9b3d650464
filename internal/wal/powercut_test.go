package wal

import (
	"math/rand"
	"path/filepath"
	"testing"

	"github.com/dyad-db/dyad/test/testutil/powerfs"
)

// Entries appended after a Reset survive a power loss that drops every
// write not made durable (powerfs: the POSIX rule, directory entries
// included): the new segment's name is synced before the first append.
func TestAppendAfterResetSurvivesPowerLoss(t *testing.T) {
	powerfs.Need(t)
	backing, mnt := t.TempDir(), t.TempDir()
	f, err := powerfs.Mount(backing, mnt)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mnt, "member", "dyad-wal")
	j, _ := mustOpen(t, dir)
	if err := j.Append(batch(1, 3)); err != nil {
		t.Fatal(err)
	}
	if err := j.Reset(3); err != nil {
		t.Fatal(err)
	}
	if err := j.Append(batch(4, 2)); err != nil {
		t.Fatal(err)
	}
	j.Close()
	if _, err := f.Crash(powerfs.Clean, rand.New(rand.NewSource(1))); err != nil {
		t.Fatal(err)
	}
	f, err = powerfs.Mount(backing, mnt)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	j, es := mustOpen(t, dir)
	defer j.Close()
	sameIndexes(t, es, 4, 5)
}
