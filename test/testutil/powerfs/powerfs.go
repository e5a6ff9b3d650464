package powerfs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/dyad-db/dyad/internal/testenv"
)

const (
	pageSize   = 4096 // unit of the undo record
	sectorSize = 512  // unit a torn write keeps or loses
)

// Mode says how Crash rolls back what was not durable.
type Mode int

const (
	// Clean undoes every unsynced change.
	Clean Mode = iota
	// Torn keeps a random subset: each unsynced 512-byte sector of file
	// data independently, the new or old size of a resized file, and an
	// ordered prefix of the unsynced directory operations (a journal).
	Torn
)

func (m Mode) String() string {
	if m == Torn {
		return "torn"
	}
	return "clean"
}

// Trigger arms a power cut at a file-system event, counted from Arm.
type Trigger struct {
	// AtWrite > 0 cuts power instead of performing the AtWrite-th write.
	// Writes that would leave the file as it is (a page rewritten with the
	// bytes it holds) are not counted, here and for AfterWrite.
	AtWrite int
	// AfterWrite > 0 cuts power just after the AfterWrite-th write has
	// reached the file, before any fsync can cover it: the cut always
	// has that write's sectors to lose.
	AfterWrite int
	// AfterSync > 0 cuts power just after the AfterSync-th fsync (of a
	// file or a directory) has returned success: the data is durable but
	// the caller never learns anything more.
	AfterSync int
	// Unsynced counts, for AtWrite and AfterWrite, only the writes made
	// while the file system already holds unsynced changes. With
	// AtWrite the cut then tears a partly written transaction (its
	// earlier pages written, none synced) instead of falling between two
	// transactions, where there is nothing to lose.
	Unsynced bool
}

// Report says what a Crash rolled back.
type Report struct {
	DirOpsUndone  int // directory operations undone
	FilesReverted int // files whose data or size was rolled back
	SectorsLost   int // changed unsynced 512-byte sectors rolled back (old bytes restored, or unsynced growth cut off)
	SectorsKept   int // changed unsynced sectors a torn crash kept
}

// fileUndo is what one file looked like at its last fsync, as far as it
// has changed since.
type fileUndo struct {
	size  int64            // size at the last fsync
	pages map[int64][]byte // original bytes of changed pages, clipped to size
	// changed: some operation since the last fsync changed the file's
	// bytes or size (a page rewritten with the bytes it held does not).
	changed bool
}

// dirOp is one unsynced directory operation.
type dirOp struct {
	seq     int             // its place among every operation recorded
	pending map[uint64]bool // directories (inodes) still to be fsynced
	// undo reverts the operation; at maps a backing path as the
	// operation saw it to where it is now (see FS.atLocked).
	undo func(at func(string) string) error
	// from and to: for the rename of a directory, its backing paths.
	from, to string
}

// FS is one mount of the power-loss file system.
type FS struct {
	root, grave, mnt string
	server           *fuse.Server

	// mu serialises every changing operation with the undo records and
	// the cut, so that a record always describes the bytes on disk.
	mu     sync.Mutex
	cut    bool
	cutc   chan struct{}
	trig   Trigger
	writes int
	syncs  int
	files  map[uint64]*fileUndo // by backing inode
	ops    []*dirOp             // in the order they happened
	opSeq  int                  // the last dirOp.seq given
	// moves are the renames of directories, durable or not, that an
	// unsynced operation may still need to follow (FS.atLocked).
	moves    []*dirOp
	graveSeq int
}

// Available reports whether this process can mount a powerfs (root and
// /dev/fuse), with the reason when it cannot.
func Available() (bool, string) {
	if os.Geteuid() != 0 {
		return false, "powerfs needs root to mount without fusermount"
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return false, "no /dev/fuse"
	}
	return true, ""
}

// Need ends the test when Available says no: a skip, or a failure under
// DYAD_REQUIRE_PEERS=1 (internal/testenv), naming what to provide.
func Need(t testing.TB) {
	t.Helper()
	if ok, why := Available(); !ok {
		testenv.Missing(t, "a FUSE mount for powerfs: "+why,
			"run as root with the fuse module loaded (modprobe fuse; scripts/setup.sh installs fuse3 and loads it)")
	}
}

// Mount serves dir/root at mnt (which must exist). dir/root holds the data
// and is created if missing; dir/grave is scratch space for undo.
func Mount(dir, mnt string) (*FS, error) {
	f := &FS{
		root:  filepath.Join(dir, "root"),
		grave: filepath.Join(dir, "grave"),
		mnt:   mnt,
		cutc:  make(chan struct{}),
		files: map[uint64]*fileUndo{},
	}
	for _, d := range []string{f.root, f.grave} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(f.root, &st); err != nil {
		return nil, err
	}
	// With Dev set, go-fuse's inode numbers are the backing st_ino, which
	// is how Crash finds a file's undo record again.
	rd := &gofs.LoopbackRoot{Path: f.root, Dev: uint64(st.Dev)}
	top := &node{LoopbackNode: &gofs.LoopbackNode{RootData: rd}, fs: f}
	rd.RootNode = top
	sec := time.Second
	srv, err := gofs.Mount(mnt, top, &gofs.Options{
		EntryTimeout: &sec,
		AttrTimeout:  &sec,
		MountOptions: fuse.MountOptions{
			DirectMount:   true,
			FsName:        "powerfs",
			Name:          "powerfs",
			DisableXAttrs: true,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("powerfs: mount %s: %w", mnt, err)
	}
	f.server = srv
	return f, nil
}

// Root is the backing directory (what survives a crash, after Crash).
func (f *FS) Root() string { return f.root }

// Close unmounts without a crash (test cleanup); processes using the
// mount must be gone.
func (f *FS) Close() error {
	f.Cut()
	return f.unmount()
}

// unmount detaches the mount and waits a little for go-fuse's readers to
// end. They end only when the kernel drops the connection, and a mount
// namespace created meanwhile by any process on the machine (ip netns
// exec does) holds a copy of the mount that keeps it for as long as that
// namespace lives. No request can come through such a copy that nobody
// uses, so after a short grace period the readers are left to end with it.
func (f *FS) unmount() error {
	var err error
	for i := 0; i < 50; i++ {
		if err = syscall.Unmount(f.mnt, 0); err != syscall.EBUSY {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("powerfs: unmount %s: %w", f.mnt, err)
	}
	done := make(chan struct{})
	go func() {
		f.server.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(500 * time.Millisecond):
	}
	return nil
}

// Arm sets the trigger of the next power cut and restarts its counters.
func (f *FS) Arm(t Trigger) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trig, f.writes, f.syncs = t, 0, 0
}

// Cut cuts the power now: every later operation fails with EIO.
func (f *FS) Cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cutLocked()
}

func (f *FS) cutLocked() {
	if !f.cut {
		f.cut = true
		close(f.cutc)
	}
}

// unsyncedLocked reports whether anything changed since its last fsync: a
// file's bytes or size, or a directory operation not yet durable. (A
// file's record is dropped by its fsync, an operation's once every
// directory it changed is fsynced.)
func (f *FS) unsyncedLocked() bool {
	if len(f.ops) > 0 {
		return true
	}
	for _, u := range f.files {
		if u.changed {
			return true
		}
	}
	return false
}

// CutC is closed when the power has been cut (by Cut or a trigger).
func (f *FS) CutC() <-chan struct{} { return f.cutc }

// Crash cuts the power if that has not happened, unmounts (every process
// using the mount must be dead), and rolls the backing directory back to
// what a disk would hold after the power loss. The FS is finished; Mount
// the directory again to go on.
func (f *FS) Crash(mode Mode, rng *rand.Rand) (Report, error) {
	f.Cut()
	if err := f.unmount(); err != nil {
		return Report{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var rep Report
	keep := 0
	if mode == Torn {
		keep = rng.Intn(len(f.ops) + 1)
	}
	for i := len(f.ops) - 1; i >= keep; i-- {
		if err := f.ops[i].undo(f.atLocked(f.ops[i])); err != nil {
			return rep, fmt.Errorf("powerfs: undo: %w", err)
		}
		rep.DirOpsUndone++
	}
	err := filepath.WalkDir(f.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return err
		}
		u := f.files[st.Ino]
		if u == nil {
			return nil
		}
		rep.FilesReverted++
		return revert(p, st.Size, u, mode, rng, &rep)
	})
	if err != nil {
		return rep, err
	}
	// What is still in the graveyard was durably deleted.
	if err := os.RemoveAll(f.grave); err != nil {
		return rep, err
	}
	return rep, os.MkdirAll(f.grave, 0o700)
}

// revert rolls one file back to u; cur is its present size.
func revert(path string, cur int64, u *fileUndo, mode Mode, rng *rand.Rand, rep *Report) error {
	fd, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer fd.Close()
	size := u.size
	if mode == Torn && rng.Intn(2) == 0 {
		size = cur // the size change reached the disk
	}
	for p, old := range u.pages {
		// The record is per page; only the sectors that differ from it
		// now were changed, so only they can be lost or kept.
		now := make([]byte, len(old))
		n, err := fd.ReadAt(now, p*pageSize)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		for s := 0; s < len(old); s += sectorSize {
			e := min(s+sectorSize, len(old))
			if e <= n && bytes.Equal(now[s:e], old[s:e]) {
				continue
			}
			if mode == Torn && rng.Intn(2) == 0 {
				rep.SectorsKept++
				continue
			}
			rep.SectorsLost++
			if _, err := fd.WriteAt(old[s:e], p*pageSize+int64(s)); err != nil {
				return err
			}
		}
	}
	if cur > size {
		// Unsynced growth cut off again: its sectors are lost too.
		rep.SectorsLost += int((cur - size + sectorSize - 1) / sectorSize)
	}
	if size > u.size && size > 0 {
		// Grown, and the growth survived: each new sector holds its
		// data or zeros.
		for off := u.size; off < size; off += sectorSize {
			n := min(int64(sectorSize), size-off)
			if rng.Intn(2) == 0 {
				rep.SectorsKept++
				continue
			}
			rep.SectorsLost++
			if _, err := fd.WriteAt(make([]byte, n), off); err != nil {
				return err
			}
		}
	}
	return fd.Truncate(size)
}

// saveLocked records the original bytes of [off, off+n) of the file with
// inode ino, read through rd, before they may change; changes says whether
// they will.
func (f *FS) saveLocked(ino uint64, rd *os.File, off, n int64, changes bool) error {
	u := f.files[ino]
	if u == nil {
		st, err := rd.Stat()
		if err != nil {
			return err
		}
		u = &fileUndo{size: st.Size(), pages: map[int64][]byte{}}
		f.files[ino] = u
	}
	u.changed = u.changed || changes
	for p := off / pageSize; p*pageSize < off+n && p*pageSize < u.size; p++ {
		if _, ok := u.pages[p]; ok {
			continue
		}
		buf := make([]byte, min(pageSize, u.size-p*pageSize))
		if _, err := rd.ReadAt(buf, p*pageSize); err != nil {
			return err
		}
		u.pages[p] = buf
	}
	return nil
}

// graveLocked moves the backing path p into the graveyard and returns
// where it went.
func (f *FS) graveLocked(p string) (string, error) {
	f.graveSeq++
	g := filepath.Join(f.grave, fmt.Sprint(f.graveSeq))
	return g, os.Rename(p, g)
}

// opLocked records an unsynced directory operation on the directories
// dirs (inodes).
func (f *FS) opLocked(undo func(at func(string) string) error, dirs ...uint64) *dirOp {
	f.opSeq++
	op := &dirOp{seq: f.opSeq, pending: map[uint64]bool{}, undo: undo}
	for _, d := range dirs {
		op.pending[d] = true
	}
	f.ops = append(f.ops, op)
	return op
}

// atLocked returns where a backing path that op saw is when op is undone
// (Crash undoes from the newest operation back): moved by the renames of
// a directory above it that came after op and stay, being durable. A
// file created in a directory that is then renamed, with only the rename
// made durable (its parent fsynced, the directory itself not), is so
// removed where it now is.
func (f *FS) atLocked(op *dirOp) func(string) string {
	return func(p string) string {
		for _, m := range f.moves {
			if m.seq <= op.seq || len(m.pending) > 0 {
				continue // before op, or undone before it
			}
			if p == m.from {
				p = m.to
			} else if rel, ok := strings.CutPrefix(p, m.from+string(filepath.Separator)); ok {
				p = filepath.Join(m.to, rel)
			}
		}
		return p
	}
}

// syncDirLocked makes every operation on directory ino durable as far as
// that directory is concerned.
func (f *FS) syncDirLocked(ino uint64) {
	kept := f.ops[:0]
	for _, op := range f.ops {
		delete(op.pending, ino)
		if len(op.pending) > 0 {
			kept = append(kept, op)
		}
	}
	f.ops = kept
	// A move matters only to operations before it that may be undone.
	oldest := f.opSeq + 1
	if len(f.ops) > 0 {
		oldest = f.ops[0].seq
	}
	moves := f.moves[:0]
	for _, m := range f.moves {
		if m.seq > oldest {
			moves = append(moves, m)
		}
	}
	f.moves = moves
}

// node is a loopback node whose changing operations keep undo records.
type node struct {
	*gofs.LoopbackNode
	fs *FS
}

var (
	_ gofs.NodeWrapChilder    = (*node)(nil)
	_ gofs.NodeWriter         = (*node)(nil)
	_ gofs.NodeFsyncer        = (*node)(nil)
	_ gofs.NodeSetattrer      = (*node)(nil)
	_ gofs.NodeOpener         = (*node)(nil)
	_ gofs.NodeCreater        = (*node)(nil)
	_ gofs.NodeMkdirer        = (*node)(nil)
	_ gofs.NodeMknoder        = (*node)(nil)
	_ gofs.NodeUnlinker       = (*node)(nil)
	_ gofs.NodeRmdirer        = (*node)(nil)
	_ gofs.NodeRenamer        = (*node)(nil)
	_ gofs.NodeLinker         = (*node)(nil)
	_ gofs.NodeSymlinker      = (*node)(nil)
	_ gofs.NodeAllocater      = (*node)(nil)
	_ gofs.NodeCopyFileRanger = (*node)(nil)
)

func (n *node) WrapChild(ctx context.Context, ops gofs.InodeEmbedder) gofs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*gofs.LoopbackNode), fs: n.fs}
}

func (n *node) backing() string { return filepath.Join(n.fs.root, n.Path(nil)) }
func (n *node) ino() uint64     { return n.StableAttr().Ino }

// reader opens the file for reading the bytes an operation is about to
// change: through the handle's descriptor when there is one (the file may
// be unlinked; the handle may be write-only), else by path.
func (n *node) reader(fh gofs.FileHandle) (*os.File, error) {
	if h, ok := fh.(*handle); ok {
		if fd, ok := h.fd(); ok {
			return os.Open(fmt.Sprintf("/proc/self/fd/%d", fd))
		}
	}
	return os.Open(n.backing())
}

// save records [off, off+len) of the file before a change.
func (n *node) saveLocked(fh gofs.FileHandle, off, size int64) syscall.Errno {
	rd, err := n.reader(fh)
	if err != nil {
		return gofs.ToErrno(err)
	}
	defer rd.Close()
	return gofs.ToErrno(n.fs.saveLocked(n.ino(), rd, off, size, true))
}

// saveWriteLocked records what writing data at off may change, and
// reports whether it changes anything: bytes that differ, or the size.
func (n *node) saveWriteLocked(fh gofs.FileHandle, data []byte, off int64) (bool, syscall.Errno) {
	rd, err := n.reader(fh)
	if err != nil {
		return false, gofs.ToErrno(err)
	}
	defer rd.Close()
	cur := make([]byte, len(data))
	k, err := rd.ReadAt(cur, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, gofs.ToErrno(err)
	}
	changes := k < len(data) || !bytes.Equal(cur, data)
	return changes, gofs.ToErrno(n.fs.saveLocked(n.ino(), rd, off, int64(len(data)), changes))
}

func (n *node) Write(ctx context.Context, fh gofs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	f := n.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return 0, syscall.EIO
	}
	w, ok := fh.(gofs.FileWriter)
	if !ok {
		return 0, syscall.EBADF
	}
	// Only a write that changes the file counts for a trigger: a cut
	// just after (or instead of) one that rewrites the same bytes would
	// have nothing more to lose.
	unsynced := f.unsyncedLocked()
	changes, e := n.saveWriteLocked(fh, data, off)
	if e != 0 {
		return 0, e
	}
	counted := changes && (!f.trig.Unsynced || unsynced)
	if counted {
		f.writes++
		if f.trig.AtWrite > 0 && f.writes == f.trig.AtWrite {
			f.cutLocked()
			return 0, syscall.EIO
		}
	}
	written, e := w.Write(ctx, data, off)
	if e == 0 && counted && f.trig.AfterWrite > 0 && f.writes == f.trig.AfterWrite {
		f.cutLocked() // after this one reached the file
	}
	return written, e
}

func (n *node) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	f := n.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return syscall.EIO
	}
	// The backing file system's own durability does not matter (the
	// records are the model), so no real fsync.
	if n.IsDir() {
		f.syncDirLocked(n.ino())
	} else {
		delete(f.files, n.ino())
	}
	f.syncs++
	if f.trig.AfterSync > 0 && f.syncs == f.trig.AfterSync {
		f.cutLocked() // after this one succeeds
	}
	return 0
}

func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	f := n.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return syscall.EIO
	}
	if sz, ok := in.GetSize(); ok {
		// Only a shrink destroys bytes; growth is undone by the size.
		if e := n.saveLocked(fh, int64(sz), 1<<62); e != 0 {
			return e
		}
	}
	return n.LoopbackNode.Setattr(ctx, fh, in, out)
}

func (n *node) Allocate(ctx context.Context, fh gofs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	f := n.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return syscall.EIO
	}
	a, ok := fh.(gofs.FileAllocater)
	if !ok {
		return syscall.EOPNOTSUPP
	}
	if e := n.saveLocked(fh, int64(off), int64(size)); e != 0 {
		return e
	}
	return a.Allocate(ctx, off, size, mode)
}

// CopyFileRange is refused so that copies fall back to reads and writes,
// which keep undo records.
func (n *node) CopyFileRange(ctx context.Context, fhIn gofs.FileHandle, offIn uint64, out *gofs.Inode, fhOut gofs.FileHandle, offOut uint64, size uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	f := n.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return nil, 0, syscall.EIO
	}
	if flags&syscall.O_TRUNC != 0 {
		if e := n.saveLocked(nil, 0, 1<<62); e != 0 {
			return nil, 0, e
		}
	}
	fh, fl, e := n.LoopbackNode.Open(ctx, flags)
	return wrap(fh), fl, e
}

// created records a new entry name in n, undone by removing it.
func (n *node) createdLocked(name string, child *gofs.Inode, isDir bool) {
	p := filepath.Join(n.backing(), name)
	n.fs.opLocked(func(at func(string) string) error {
		if isDir {
			return os.RemoveAll(at(p))
		}
		return os.Remove(at(p))
	}, n.ino())
	if !isDir {
		n.fs.files[child.StableAttr().Ino] = &fileUndo{pages: map[int64][]byte{}}
	}
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	f := n.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return nil, nil, 0, syscall.EIO
	}
	p := filepath.Join(n.backing(), name)
	_, err := os.Lstat(p)
	existed := err == nil
	if existed && flags&syscall.O_TRUNC != 0 {
		rd, err := os.Open(p)
		if err != nil {
			return nil, nil, 0, gofs.ToErrno(err)
		}
		var st syscall.Stat_t
		err = syscall.Fstat(int(rd.Fd()), &st)
		if err == nil {
			err = f.saveLocked(st.Ino, rd, 0, 1<<62, true)
		}
		rd.Close()
		if err != nil {
			return nil, nil, 0, gofs.ToErrno(err)
		}
	}
	child, fh, fl, e := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if e == 0 && !existed {
		n.createdLocked(name, child, false)
	}
	return child, wrap(fh), fl, e
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	f := n.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return nil, syscall.EIO
	}
	child, e := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	if e == 0 {
		n.createdLocked(name, child, true)
	}
	return child, e
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	f := n.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return nil, syscall.EIO
	}
	child, e := n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
	if e == 0 {
		n.createdLocked(name, child, false)
	}
	return child, e
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	f := n.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return nil, syscall.EIO
	}
	child, e := n.LoopbackNode.Symlink(ctx, target, name, out)
	if e == 0 {
		n.createdLocked(name, child, false)
	}
	return child, e
}

// Link is refused: hard links would give one inode several names, which
// the undo records do not model.
func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// removeLocked parks n/name in the graveyard, undone by moving it back.
func (n *node) removeLocked(name string) syscall.Errno {
	f := n.fs
	if f.cut {
		return syscall.EIO
	}
	p := filepath.Join(n.backing(), name)
	g, err := f.graveLocked(p)
	if err != nil {
		return gofs.ToErrno(err)
	}
	f.opLocked(func(at func(string) string) error { return os.Rename(g, at(p)) }, n.ino())
	return 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	return n.removeLocked(name)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	n.fs.mu.Lock()
	defer n.fs.mu.Unlock()
	ents, err := os.ReadDir(filepath.Join(n.backing(), name))
	if err != nil {
		return gofs.ToErrno(err)
	}
	if len(ents) > 0 {
		return syscall.ENOTEMPTY
	}
	return n.removeLocked(name)
}

func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	f := n.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut {
		return syscall.EIO
	}
	if flags&unix.RENAME_EXCHANGE != 0 {
		return syscall.EINVAL
	}
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	src := filepath.Join(n.backing(), name)
	dst := filepath.Join(np.backing(), newName)
	st, err := os.Lstat(src)
	if err != nil {
		return gofs.ToErrno(err)
	}
	replaced := ""
	if _, err := os.Lstat(dst); err == nil {
		if flags&unix.RENAME_NOREPLACE != 0 {
			return syscall.EEXIST
		}
		g, err := f.graveLocked(dst)
		if err != nil {
			return gofs.ToErrno(err)
		}
		replaced = g
	} else if !errors.Is(err, os.ErrNotExist) {
		return gofs.ToErrno(err)
	}
	if err := os.Rename(src, dst); err != nil {
		return gofs.ToErrno(err)
	}
	op := f.opLocked(func(at func(string) string) error {
		if err := os.Rename(at(dst), at(src)); err != nil {
			return err
		}
		if replaced != "" {
			return os.Rename(replaced, at(dst))
		}
		return nil
	}, n.ino(), np.ino())
	if st.IsDir() {
		op.from, op.to = src, dst
		f.moves = append(f.moves, op)
	}
	return 0
}

// handle wraps a loopback file handle, hiding its PassthroughFd: with
// kernel passthrough, writes would go straight to the backing file and
// bypass the undo records.
type handle struct {
	lf *gofs.LoopbackFile
}

var (
	_ gofs.FileReader    = (*handle)(nil)
	_ gofs.FileWriter    = (*handle)(nil)
	_ gofs.FileFlusher   = (*handle)(nil)
	_ gofs.FileReleaser  = (*handle)(nil)
	_ gofs.FileGetattrer = (*handle)(nil)
	_ gofs.FileSetattrer = (*handle)(nil)
	_ gofs.FileFsyncer   = (*handle)(nil)
	_ gofs.FileLseeker   = (*handle)(nil)
	_ gofs.FileAllocater = (*handle)(nil)
	_ gofs.FileGetlker   = (*handle)(nil)
	_ gofs.FileSetlker   = (*handle)(nil)
	_ gofs.FileSetlkwer  = (*handle)(nil)
)

func wrap(fh gofs.FileHandle) gofs.FileHandle {
	if lf, ok := fh.(*gofs.LoopbackFile); ok {
		return &handle{lf: lf}
	}
	return fh
}

// fd is the backing descriptor, valid until Release.
func (h *handle) fd() (int, bool) { return h.lf.PassthroughFd() }

func (h *handle) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return h.lf.Read(ctx, buf, off)
}
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	return h.lf.Write(ctx, data, off)
}
func (h *handle) Flush(ctx context.Context) syscall.Errno   { return h.lf.Flush(ctx) }
func (h *handle) Release(ctx context.Context) syscall.Errno { return h.lf.Release(ctx) }
func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Getattr(ctx, out)
}
func (h *handle) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Setattr(ctx, in, out)
}
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.lf.Fsync(ctx, flags)
}
func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.lf.Lseek(ctx, off, whence)
}
func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	return h.lf.Allocate(ctx, off, size, mode)
}
func (h *handle) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	return h.lf.Getlk(ctx, owner, lk, flags, out)
}
func (h *handle) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.lf.Setlk(ctx, owner, lk, flags)
}
func (h *handle) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.lf.Setlkw(ctx, owner, lk, flags)
}

// dirHandle wraps a loopback directory handle so that fsyncdir reaches the
// node's Fsync, which makes the directory's operations durable.
type dirHandle struct {
	ds interface {
		gofs.FileReaddirenter
		gofs.FileSeekdirer
		gofs.FileReleasedirer
	}
	n *node
}

var (
	_ gofs.FileReaddirenter = (*dirHandle)(nil)
	_ gofs.FileSeekdirer    = (*dirHandle)(nil)
	_ gofs.FileReleasedirer = (*dirHandle)(nil)
	_ gofs.FileFsyncdirer   = (*dirHandle)(nil)
)

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.ds.Readdirent(ctx)
}
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.ds.Seekdir(ctx, off)
}
func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) { d.ds.Releasedir(ctx, flags) }
func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.n.Fsync(ctx, nil, flags)
}

var _ gofs.NodeOpendirHandler = (*node)(nil)

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	fh, fl, e := n.LoopbackNode.OpendirHandle(ctx, flags)
	if e != 0 {
		return nil, 0, e
	}
	ds, ok := fh.(interface {
		gofs.FileReaddirenter
		gofs.FileSeekdirer
		gofs.FileReleasedirer
	})
	if !ok {
		return nil, 0, syscall.ENOTSUP
	}
	return &dirHandle{ds: ds, n: n}, fl, 0
}
