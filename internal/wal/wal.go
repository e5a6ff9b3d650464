package wal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	etcdwal "go.etcd.io/etcd/server/v3/storage/wal"
	"go.etcd.io/etcd/server/v3/storage/wal/walpb"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"

	"github.com/dyad-db/dyad/internal/fsutil"
	"github.com/dyad-db/dyad/internal/repl"
)

// magic is the journal's metadata record: it tells a dyad journal from an
// etcd member's WAL, whose entries are raft's.
const magic = "dyad-journal-v1"

// ErrCorrupt is returned when the journal cannot be read back.
var ErrCorrupt = errors.New("wal: journal corrupt")

// ErrNotContiguous is returned by Append for a batch that does not follow
// the journal's last entry.
var ErrNotContiguous = errors.New("wal: batch does not follow the journal")

// Options configures a Journal.
type Options struct {
	// NoSync skips the fdatasync (--unsafe-no-fsync: tests and benchmarks
	// only).
	NoSync bool
}

// Journal is an open journal (see the package doc).
type Journal struct {
	dir  string
	opts Options
	w    *etcdwal.WAL
	// seq is the journal sequence number of the last record (the raft
	// index of the etcd WAL); last the dyad index of the last entry, or
	// the index Reset started after (0: no entry since creation).
	seq, last uint64
	// size is about how many bytes were appended since the last Reset.
	size int64
	// commit is the newest commit bound appended (AppendCommit) or read
	// at Open since the last Reset (0: none).
	commit uint64
	// enc, ends and rs are AppendCommit's scratch space, reused by every
	// call (one caller at a time): the etcd WAL marshals each record into
	// a buffer of its own inside Save and keeps no reference to an
	// entry's Data after it returns.
	enc  []byte
	ends []int
	rs   []raftpb.Entry

	fault atomic.Pointer[func() error] // see InjectFault

	// sweep hands the sweeper goroutine the directories Reset moved
	// aside, which it deletes; swept is closed once it has ended. The
	// Journal owns the sweeper: Open starts it, Close stops it and
	// waits for it.
	sweep chan string
	swept chan struct{}
}

// asideSuffix starts the name of a journal directory Reset moved aside,
// after the journal's own name: <dir>.old-<n>.
const asideSuffix = ".old-"

// start starts the sweeper.
func (j *Journal) start() {
	j.sweep, j.swept = make(chan string, 4), make(chan struct{})
	go func() { // owned: Close waits for swept
		defer close(j.swept)
		for dir := range j.sweep {
			// A failure leaves the directory for the next Open.
			_ = j.removeDir(dir)
		}
	}()
}

// removeAside deletes the directories of journals moved aside that a
// crash or a stop left behind.
func (j *Journal) removeAside() error {
	olds, err := filepath.Glob(j.dir + asideSuffix + "*")
	if err != nil {
		return err
	}
	for _, o := range olds {
		if err := j.removeDir(o); err != nil {
			return err
		}
	}
	return nil
}

// removeDir deletes the files of the journal directory dir, makes that
// durable, then deletes dir: a crash never finds the directory's removal
// durable and the removal of its files not. Nothing needs the removal
// itself durable: a directory a crash brings back is removed again by
// the next Open.
func (j *Journal) removeDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	if !j.opts.NoSync {
		if err := fsutil.SyncDir(dir); err != nil {
			return err
		}
	}
	return os.Remove(dir)
}

// InjectFault is for tests: while f returns an error, every Append fails
// with it and writes nothing, as on a disk that cannot persist. A nil f
// removes the fault.
func (j *Journal) InjectFault(f func() error) {
	if f == nil {
		j.fault.Store(nil)
		return
	}
	j.fault.Store(&f)
}

// Open opens the journal in dir, creating it if there is none, and returns
// the entries it holds, oldest first. A record torn by a crash at the tail
// is cut off (it was never reported durable).
func Open(dir string, opts Options) (*Journal, []repl.Entry, error) {
	j := &Journal{dir: dir, opts: opts}
	if err := j.removeAside(); err != nil {
		return nil, nil, err
	}
	if !etcdwal.Exist(dir) {
		if err := j.create(); err != nil {
			return nil, nil, err
		}
		j.start()
		return j, nil, nil
	}
	w, st, ents, err := openAll(dir)
	if err != nil {
		return nil, nil, err
	}
	j.w, j.commit = w, st.Commit
	if opts.NoSync {
		w.SetUnsafeNoFsync()
	}
	out := make([]repl.Entry, 0, len(ents))
	for i := range ents {
		e, err := repl.DecodeEntry(ents[i].Data)
		if err != nil {
			w.Close()
			return nil, nil, fmt.Errorf("%w: record %d: %v", ErrCorrupt, ents[i].Index, err)
		}
		if len(out) > 0 && e.Index != out[len(out)-1].Index+1 {
			w.Close()
			return nil, nil, fmt.Errorf("%w: entry %d follows entry %d", ErrCorrupt, e.Index, out[len(out)-1].Index)
		}
		j.size += int64(len(ents[i].Data))
		out = append(out, e)
	}
	j.seq = uint64(len(ents))
	if len(out) > 0 {
		j.last = out[len(out)-1].Index
	}
	j.start()
	return j, out, nil
}

// openAll opens the WAL in dir for appending and reads it whole, repairing
// a torn tail once.
func openAll(dir string) (*etcdwal.WAL, raftpb.HardState, []raftpb.Entry, error) {
	for repaired := false; ; repaired = true {
		w, err := etcdwal.Open(zap.NewNop(), dir, walpb.Snapshot{})
		if err != nil {
			return nil, raftpb.HardState{}, nil, err
		}
		meta, st, ents, err := w.ReadAll()
		if err == nil {
			if string(meta) != magic {
				w.Close()
				return nil, raftpb.HardState{}, nil, fmt.Errorf("%w: %s is not a dyad journal", ErrCorrupt, dir)
			}
			return w, st, ents, nil
		}
		w.Close()
		if errors.Is(err, syscall.ENOSPC) {
			// Not a damaged journal: etcd's WAL keeps a spare
			// preallocated segment ready, made at open, and the disk
			// has no room for it.
			return nil, raftpb.HardState{}, nil, fmt.Errorf("opening the journal in %s needs room for a spare %d MB segment: %w", dir, etcdwal.SegmentSizeBytes/1000/1000, err)
		}
		if repaired || !errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, raftpb.HardState{}, nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		if !etcdwal.Repair(zap.NewNop(), dir) {
			return nil, raftpb.HardState{}, nil, fmt.Errorf("%w: torn tail not repairable: %v", ErrCorrupt, err)
		}
	}
}

// create makes an empty journal in j.dir. etcd's Create builds it in a
// temporary directory, renames that into place and syncs the parent, but
// never syncs the directory itself, so the name of its first segment
// would not be durable until the first segment cut: appends fdatasynced
// into it could all vanish with a power loss. The directory is synced
// here, before the first append.
func (j *Journal) create() error {
	if err := fsutil.MkdirAll(filepath.Dir(j.dir), 0o700); err != nil {
		return err
	}
	w, err := etcdwal.Create(zap.NewNop(), j.dir, []byte(magic))
	if err != nil {
		return err
	}
	if !j.opts.NoSync {
		if err := fsutil.SyncDir(j.dir); err != nil {
			w.Close()
			return err
		}
	}
	if j.opts.NoSync {
		w.SetUnsafeNoFsync()
	}
	j.w, j.seq, j.size = w, 0, 0
	return nil
}

// Last is the index of the last entry appended, or the index the last
// Reset started after (0 for a new journal).
func (j *Journal) Last() uint64 { return j.last }

// Size is about how many bytes of entries the journal holds.
func (j *Journal) Size() int64 { return j.size }

// Commit is the newest commit bound the journal holds (AppendCommit, or
// read at Open; 0: none since the last Reset).
func (j *Journal) Commit() uint64 { return j.commit }

// Append writes es (consecutive, the first following Last unless the
// journal is new) and makes them durable with one fdatasync before it
// returns.
func (j *Journal) Append(es []repl.Entry) error { return j.AppendCommit(es, 0) }

// AppendCommit is Append that also records commit, a lower bound of the
// writer's commit index, in the same record batch and fdatasync (the
// etcd WAL's hard state; 0 writes none). It costs no extra sync.
func (j *Journal) AppendCommit(es []repl.Entry, commit uint64) error {
	if len(es) == 0 {
		return nil
	}
	if f := j.fault.Load(); f != nil {
		if err := (*f)(); err != nil {
			return err
		}
	}
	if j.last != 0 && es[0].Index != j.last+1 {
		return fmt.Errorf("%w: first %d, last %d", ErrNotContiguous, es[0].Index, j.last)
	}
	// Every entry's encoding goes into one scratch buffer, and the
	// records slice it once it is complete: no allocation per entry,
	// and none at all once the buffer has grown to a batch's size.
	enc, ends := j.enc[:0], j.ends[:0]
	for i := range es {
		if i > 0 && es[i].Index != es[i-1].Index+1 {
			return fmt.Errorf("%w: %d then %d", ErrNotContiguous, es[i-1].Index, es[i].Index)
		}
		enc = repl.AppendEntry(enc, &es[i])
		ends = append(ends, len(enc))
	}
	rs := j.rs[:0]
	start := 0
	for i := range es {
		rs = append(rs, raftpb.Entry{Term: es[i].Epoch.Term, Index: j.seq + 1 + uint64(i), Type: raftpb.EntryNormal, Data: enc[start:ends[i]]})
		start = ends[i]
	}
	n := int64(len(enc))
	err := j.w.Save(raftpb.HardState{Commit: commit}, rs)
	clear(rs) // the scratch records hold no entry's bytes between calls
	j.enc, j.ends, j.rs = enc, ends, rs
	if err != nil {
		return err
	}
	if commit != 0 {
		j.commit = commit
	}
	j.seq += uint64(len(es))
	j.last = es[len(es)-1].Index
	j.size += n
	return nil
}

// Reset throws the journal away and starts an empty one, whose first
// entry will be after+1. Call it only when everything the journal holds is
// in a durable commit of the data file (see the package doc).
//
// The old journal's directory is renamed aside (<dir>.old-<n>) and the
// sweeper deletes it, off the caller's path: deleting its 64 MB segments
// and syncing the directory took about 27 ms on a 2-core test machine,
// and the server resets its journal inline on the write path every
// 64 MB. Whatever a crash leaves of the rename, the journal found at
// <dir> holds nothing the data file lacks, or is the new one: create
// syncs the parent directory, which holds both names, before the first
// append.
func (j *Journal) Reset(after uint64) error {
	if j.w != nil {
		if err := j.w.Close(); err != nil {
			return err
		}
		j.w = nil
	}
	if err := j.moveAside(); err != nil {
		return err
	}
	if err := j.create(); err != nil {
		return err
	}
	j.last, j.commit = after, 0
	return nil
}

// moveAside renames the journal's directory aside and hands it to the
// sweeper (or deletes it at once when the sweeper is busy or stopped).
func (j *Journal) moveAside() error {
	old := fmt.Sprintf("%s%s%d", j.dir, asideSuffix, time.Now().UnixNano())
	if err := os.Rename(j.dir, old); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	select {
	case j.sweep <- old:
		return nil
	default:
		return j.removeDir(old)
	}
}

// Close closes the journal and waits for the sweeper to delete what
// Reset moved aside. It may be called again.
func (j *Journal) Close() error {
	if j.sweep != nil {
		close(j.sweep)
		<-j.swept
		j.sweep = nil
	}
	if j.w == nil {
		return nil
	}
	err := j.w.Close()
	j.w = nil
	return err
}

// Exist reports whether dir holds a journal.
func Exist(dir string) bool { return etcdwal.Exist(dir) }
