// Package mvcc owns dyad's multi-version key space: revisions, the in-memory
// key index, reads at a revision, write transactions, compaction, the history
// that watches replay, and HashKV.
//
// Data layout is etcd's: bucket "key" maps a revision (8-byte main, '_',
// 8-byte sub, plus 't' for a tombstone) to a marshalled mvccpb.KeyValue, so a
// dyad data file is an etcd data file.
//
// Revisions. currentRev is the last revision applied by the single writer;
// readableRev is the last revision whose batch is durable. Readers never look
// above readableRev, so they never see a write that a crash could undo, and
// they may read the index while the writer is extending it above that mark.
//
// Concurrency: exactly one goroutine (the server's applier) calls Write and
// MarkDurable; any number may call the read methods. Lock order: the caller's
// storage transaction is opened first, then Store.mu; Store.mu is never held
// while waiting on anything else.
package mvcc
