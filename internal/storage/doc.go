// Package storage owns dyad's durable engine: one bbolt file laid out in
// etcd's backend schema (buckets "key", "meta", "lease", "alarm", "members",
// ...), so that a snapshot of it is an etcd snapshot and an etcd snapshot is a
// dyad data file.
//
// Everything above this package sees only Backend, ReadTx and WriteTx. The
// engine is hidden so that crash-injection seams and another engine can be
// slotted in without touching mvcc.
//
// Invariants:
//   - A WriteTx is committed with fsync before Update returns; Update is the
//     only way data becomes durable, and it is how group commit happens: the
//     caller packs many client requests into one Update.
//   - The applied log position (meta "consistent_index" and "term") is written
//     by the caller inside the same WriteTx as the data it describes.
//   - Byte slices handed out by a ReadTx are valid only inside the callback.
//
// Lock order: Backend.swap (held for reading by every transaction, for
// writing only by Defrag) is taken before bbolt's own locks.
package storage
