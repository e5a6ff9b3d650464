package powerfs

import (
	"bytes"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func mount(t *testing.T) (*FS, string, string) {
	t.Helper()
	Need(t)
	dir, mnt := t.TempDir(), t.TempDir()
	f, err := Mount(dir, mnt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, dir, mnt
}

func write(t *testing.T, path string, data []byte, syncFile bool) {
	t.Helper()
	fd, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if _, err := fd.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if syncFile {
		if err := fd.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestCleanCrashKeepsExactlyWhatWasSynced checks each durability rule of
// the model: synced data survives, unsynced data and size are rolled back,
// an entry whose directory was not fsynced vanishes even if its data was,
// and a rename over an old file is undone unless the directory was synced.
func TestCleanCrashKeepsExactlyWhatWasSynced(t *testing.T) {
	f, dir, mnt := mount(t)
	old := bytes.Repeat([]byte("o"), 10000)
	write(t, filepath.Join(mnt, "synced"), old, true)
	write(t, filepath.Join(mnt, "changed"), old, true)
	write(t, filepath.Join(mnt, "renamed-over"), old, true)
	syncDir(t, mnt)

	write(t, filepath.Join(mnt, "synced"), bytes.Repeat([]byte("n"), 5000), true)
	write(t, filepath.Join(mnt, "changed"), bytes.Repeat([]byte("n"), 20000), false)
	write(t, filepath.Join(mnt, "new-no-dirsync"), old, true)
	write(t, filepath.Join(mnt, "tmp"), []byte("replacement"), true)
	if err := os.Rename(filepath.Join(mnt, "tmp"), filepath.Join(mnt, "renamed-over")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mnt, "synced")); err != nil {
		t.Fatal(err)
	}
	rep, err := f.Crash(Clean, rand.New(rand.NewSource(1)))
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	want := map[string][]byte{
		"synced":       append(bytes.Repeat([]byte("n"), 5000), old[5000:]...),
		"changed":      old,
		"renamed-over": old,
	}
	for name, w := range want {
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got, w) {
			t.Errorf("%s: %d bytes, want %d bytes of the synced content", name, len(got), len(w))
		}
	}
	for _, name := range []string{"new-no-dirsync", "tmp"} {
		if _, err := os.Stat(filepath.Join(root, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s survived without a directory fsync (%v)", name, err)
		}
	}
	if rep.DirOpsUndone != 4 || rep.FilesReverted == 0 {
		t.Errorf("report %+v: want 4 directory operations undone and a file reverted", rep)
	}
}

// TestDirSyncMakesRenameDurable is the other half: after the directory
// fsync the rename and the new file stay.
func TestDirSyncMakesRenameDurable(t *testing.T) {
	f, dir, mnt := mount(t)
	write(t, filepath.Join(mnt, "tmp"), []byte("replacement"), true)
	if err := os.Rename(filepath.Join(mnt, "tmp"), filepath.Join(mnt, "final")); err != nil {
		t.Fatal(err)
	}
	syncDir(t, mnt)
	if _, err := f.Crash(Clean, rand.New(rand.NewSource(1))); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "root", "final"))
	if err != nil || string(got) != "replacement" {
		t.Fatalf("final = %q, %v; want the synced replacement", got, err)
	}
}

// TestRenamedDirKeepsItsUnsyncedEntries: a file created in a directory
// that is then renamed, with only the rename made durable (the parent
// fsynced, the directory itself not), is gone after a crash, from where
// the directory now is; the renamed directory stays. (etcd's WAL creates
// its first segment so: in dir.tmp, renamed to dir, the parent synced.)
func TestRenamedDirKeepsItsUnsyncedEntries(t *testing.T) {
	f, dir, mnt := mount(t)
	if err := os.Mkdir(filepath.Join(mnt, "d.tmp"), 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(mnt, "d.tmp", "seg"), []byte("record"), true)
	if err := os.Rename(filepath.Join(mnt, "d.tmp"), filepath.Join(mnt, "d")); err != nil {
		t.Fatal(err)
	}
	syncDir(t, mnt)
	rep, err := f.Crash(Clean, rand.New(rand.NewSource(1)))
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	if st, err := os.Stat(filepath.Join(root, "d")); err != nil || !st.IsDir() {
		t.Fatalf("the durably renamed directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "d", "seg")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the entry its directory never synced survived the crash (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(root, "d.tmp")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old name is back (%v)", err)
	}
	if rep.DirOpsUndone != 1 {
		t.Fatalf("report %+v: want the one create undone", rep)
	}
}

// TestTornCrashMixesSectors checks that a torn crash keeps some unsynced
// sectors and loses others, each sector whole.
func TestTornCrashMixesSectors(t *testing.T) {
	f, dir, mnt := mount(t)
	old := bytes.Repeat([]byte("o"), 64<<10)
	write(t, filepath.Join(mnt, "f"), old, true)
	syncDir(t, mnt)
	write(t, filepath.Join(mnt, "f"), bytes.Repeat([]byte("n"), 64<<10), false)
	rep, err := f.Crash(Torn, rand.New(rand.NewSource(7)))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "root", "f"))
	if err != nil || len(got) != len(old) {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	var olds, news int
	for s := 0; s < len(got); s += sectorSize {
		sec := got[s : s+sectorSize]
		switch {
		case bytes.Equal(sec, old[:sectorSize]):
			olds++
		case bytes.Equal(sec, bytes.Repeat([]byte("n"), sectorSize)):
			news++
		default:
			t.Fatalf("sector at %d is torn inside itself", s)
		}
	}
	if olds == 0 || news == 0 || rep.SectorsKept != news || rep.SectorsLost != olds {
		t.Fatalf("old %d new %d sectors, report %+v: want a mix that matches the report", olds, news, rep)
	}
}

// TestTriggers checks both triggers: the N-th write fails and cuts power,
// and after the N-th fsync everything fails.
func TestTriggers(t *testing.T) {
	f, _, mnt := mount(t)
	fd, err := os.Create(filepath.Join(mnt, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	f.Arm(Trigger{AfterSync: 2})
	for i := 0; i < 2; i++ {
		if _, err := fd.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := fd.Sync(); err != nil {
			t.Fatalf("sync %d: %v", i+1, err)
		}
	}
	select {
	case <-f.CutC():
	default:
		t.Fatal("no cut after the second fsync")
	}
	if _, err := fd.Write([]byte("x")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("write after the cut: %v, want EIO", err)
	}

	g, _, mnt2 := mount(t)
	g.Arm(Trigger{AtWrite: 3})
	fd2, err := os.Create(filepath.Join(mnt2, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer fd2.Close()
	var errs []error
	for i := 0; i < 4; i++ {
		_, err := fd2.Write([]byte("x"))
		errs = append(errs, err)
	}
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], syscall.EIO) || !errors.Is(errs[3], syscall.EIO) {
		t.Fatalf("write errors %v: want the third and later to fail with EIO", errs)
	}
}

// TestAfterWriteLosesThatWrite checks that a cut just after the N-th write
// keeps that write out of the durable state: a clean crash rolls it back
// and the report counts its sectors, including the growth cut off again.
func TestAfterWriteLosesThatWrite(t *testing.T) {
	f, dir, mnt := mount(t)
	old := bytes.Repeat([]byte("o"), 4096)
	write(t, filepath.Join(mnt, "f"), old, true)
	syncDir(t, mnt)
	f.Arm(Trigger{AfterWrite: 3})
	fd, err := os.OpenFile(filepath.Join(mnt, "f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if _, err := fd.WriteAt(bytes.Repeat([]byte("a"), 1024), 0); err != nil {
		t.Fatal(err)
	}
	if err := fd.Sync(); err != nil {
		t.Fatal(err)
	}
	// Unsynced: the second write overwrites one sector, the third grows
	// the file by two (each within one page, so that the kernel sends
	// each as one write).
	if _, err := fd.WriteAt(bytes.Repeat([]byte("b"), 512), 3584); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.CutC():
		t.Fatal("cut after the second write, armed for the third")
	default:
	}
	if _, err := fd.WriteAt(bytes.Repeat([]byte("c"), 1024), 4096); err != nil {
		t.Fatalf("the triggering write itself must succeed: %v", err)
	}
	select {
	case <-f.CutC():
	default:
		t.Fatal("no cut after the third write")
	}
	if err := fd.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync after the cut: %v, want EIO", err)
	}
	fd.Close() // a crash unmounts: nothing may hold the mount
	rep, err := f.Crash(Clean, rand.New(rand.NewSource(1)))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "root", "f"))
	if err != nil {
		t.Fatal(err)
	}
	want := append(bytes.Repeat([]byte("a"), 1024), old[1024:]...)
	if !bytes.Equal(got, want) {
		t.Fatalf("after the crash: %d bytes, want the %d synced bytes", len(got), len(want))
	}
	if rep.FilesReverted != 1 || rep.SectorsLost != 3 || rep.SectorsKept != 0 {
		t.Fatalf("report %+v: want 1 file reverted, 3 sectors lost (1 overwritten, 2 grown)", rep)
	}
}

// TestUnsyncedTrigger checks that with Unsynced, writes made while
// everything is synced (the first of each transaction) are not counted.
func TestUnsyncedTrigger(t *testing.T) {
	f, _, mnt := mount(t)
	fd, err := os.Create(filepath.Join(mnt, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if err := fd.Sync(); err != nil {
		t.Fatal(err)
	}
	syncDir(t, mnt)
	// Each transaction: two writes and an fsync. Only the second write
	// of each finds unsynced data, so the 2nd counted write is the
	// second write of the second transaction.
	f.Arm(Trigger{AtWrite: 2, Unsynced: true})
	var errs []error
	for tx := 0; tx < 2; tx++ {
		for i := 0; i < 2; i++ {
			_, err := fd.Write([]byte("x"))
			errs = append(errs, err)
		}
		if err := fd.Sync(); err != nil && tx == 0 {
			t.Fatalf("fsync of the first transaction: %v", err)
		}
	}
	if errs[0] != nil || errs[1] != nil || errs[2] != nil || !errors.Is(errs[3], syscall.EIO) {
		t.Fatalf("write errors %v: want only the fourth (second of its transaction) to fail", errs)
	}
}

// TestSameBytesNotCounted checks that a write leaving the file's bytes as
// they were does not count for a trigger (a cut after it would have
// nothing to lose), and one that changes them does.
func TestSameBytesNotCounted(t *testing.T) {
	f, _, mnt := mount(t)
	write(t, filepath.Join(mnt, "f"), bytes.Repeat([]byte("o"), 4096), true)
	syncDir(t, mnt)
	f.Arm(Trigger{AfterWrite: 1})
	fd, err := os.OpenFile(filepath.Join(mnt, "f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if _, err := fd.WriteAt(bytes.Repeat([]byte("o"), 512), 512); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f.CutC():
		t.Fatal("cut after a write of the bytes the file held")
	default:
	}
	if _, err := fd.WriteAt([]byte("n"), 512); err != nil {
		t.Fatalf("the triggering write itself must succeed: %v", err)
	}
	select {
	case <-f.CutC():
	default:
		t.Fatal("no cut after a write that changed the file")
	}
}
