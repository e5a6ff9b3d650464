// Package storage owns dyad's durable engine: one bbolt file laid out in
// etcd's backend schema (buckets "key", "meta", "lease", "alarm", "members",
// ...), so that a snapshot of it is an etcd snapshot and an etcd snapshot is a
// dyad data file.
//
// Everything above this package sees only Backend, ReadTx and WriteTx. The
// engine is hidden so that crash-injection seams and another engine can be
// slotted in without touching mvcc.
//
// Two ways to write:
//   - Update: fn runs in a bbolt transaction of its own, committed with
//     fsync before Update returns.
//   - Apply: fn's writes are kept in memory and reach bbolt later, in a
//     background commit (by time, BatchInterval, and by count,
//     BatchLimit, as etcd's batch commit) or at Commit, Update, Snapshot,
//     Defrag, Replace or Close. What Apply wrote is visible to every
//     reader at once, through layers laid over bbolt's last commit
//     (overlay.go; etcd's backend read buffer plays this part). The caller
//     makes it durable by its own means first (the server's journal) and
//     restores it from there after a crash.
//
// The layers (commit.go): fn writes into a small layer of its own, merged
// on success into the active layer in one step (a failed fn's layer is
// dropped). A commit freezes the active layer (a new empty one takes its
// place), writes the frozen layer to bbolt and commits it without the lock
// Apply needs, then drops it. Readers see active over frozen over bbolt.
// So Apply never waits for bbolt's commit, unless the active layer grows
// past 4× BatchLimit while a commit runs (stallFactor).
//
// Invariants:
//   - A batch enters the active layer whole, under ovmu: readers see it
//     whole or not at all, and it lands in one bbolt commit with the log
//     position it wrote.
//   - A reader's bbolt read transaction, its clone of the active layer
//     and the frozen layer are taken in one step under ovmu, and a commit
//     drops the frozen layer only after bbolt's commit returned: a reader
//     never misses a write.
//   - Readers share one bbolt read transaction per commit generation
//     (readGen, as etcd's backend shares its read transaction). It is
//     opened after a bbolt commit, superseded under ovmu before the next
//     bbolt write transaction begins (in the freeze's step for a commit
//     of the layers), and rolled back when its last reader leaves; while
//     a write transaction runs, readers open transactions of their own.
//     So no reader joins a transaction older than the last dropped layer,
//     and no commit waits for a shared transaction nobody reads.
//   - At most one frozen layer exists (commits are serialised by cmu);
//     nothing changes it; only Apply, holding wmu, changes the active one.
//   - Update commits the layers before fn runs, in a commit of its own, so
//     fn's failure never takes them with it; fn then reads bbolt alone.
//   - A failed Apply callback loses nothing and breaks nothing. A failed
//     commit of the layers breaks the backend: every later write fails,
//     because the data file lacks what the caller may have acknowledged;
//     readers keep seeing every layer.
//   - Commit returns once everything applied before it is in a durable
//     bbolt commit.
//   - The applied log position (meta "consistent_index" and "term") is written
//     by the caller inside the same WriteTx as the data it describes.
//   - Byte slices handed out by a ReadTx are valid only inside the callback.
//
// Lock order: Backend.wmu (Apply, Update, Defrag, Replace, Close) before
// Backend.cmu (every bbolt write transaction: the background committer,
// Commit, Update, the file swaps, Close) before Backend.swap (held for
// reading by every transaction, for writing only while the file is
// swapped or closed) before Backend.ovmu (the layers, the shared read
// transaction) before bbolt's own locks. A reader leaving a shared read
// transaction takes no lock of the Backend (an atomic count), so the
// last one can roll it back while a commit waits on bbolt's locks. The background committer is owned by the Backend and stopped by
// Close.
package storage
