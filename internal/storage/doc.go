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
//   - Update: fn runs in a transaction of its own, committed with fsync
//     before Update returns.
//   - Apply: fn runs in the pending batch transaction, which is left open
//     and committed later (Commit, Update, Close, BatchLimit, or the
//     background committer after BatchInterval, etcd's batch commit). What
//     Apply wrote is visible to every reader at once, through an overlay of
//     the pending changes laid over bbolt's last commit (overlay.go; etcd's
//     backend read buffer plays this part). The caller makes it durable by
//     its own means first (the server's journal) and restores it from
//     there after a crash.
//
// Invariants:
//   - Update commits what Apply left pending before fn runs, in a commit of
//     its own, so fn's failure never takes the pending batch with it.
//   - A failed Apply callback or commit rolls the pending batch back and
//     breaks the backend: every later write fails, because the data file
//     no longer holds what the caller may have acknowledged.
//   - A reader's bbolt read transaction and its clone of the overlay are
//     taken in one step under ovmu, and a commit empties the overlay only
//     after bbolt's commit returned: a reader never misses a write.
//   - The applied log position (meta "consistent_index" and "term") is written
//     by the caller inside the same WriteTx as the data it describes.
//   - Byte slices handed out by a ReadTx are valid only inside the callback.
//
// Lock order: Backend.wmu (writers, the committer, Defrag, Replace,
// Close) before Backend.swap (held for reading by every transaction, for
// writing only while the file is swapped or closed) before Backend.ovmu
// (the overlay) before bbolt's own locks. The background committer is
// owned by the Backend and stopped by Close.
package storage
