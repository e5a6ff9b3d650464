// Package wal is dyad's journal: an append-only log of replicated entries
// on the write path, kept in etcd's WAL format by etcd's own
// implementation (go.etcd.io/etcd/server/v3/storage/wal), which brings
// the record checksums, torn-tail repair, preallocated segments and
// directory fsyncs that a log on the critical path needs.
//
// A Journal holds dyad entries (repl.Entry) in order and without holes.
// The caller applies a batch to the data file (bbolt, etcd's schema)
// without committing it, then Append makes the batch durable with one
// fdatasync, and the caller may acknowledge it; the data file is
// committed later (internal/server/journal.go). The journal is not the
// log the protocol serves catch-up from (that stays in the data file's
// log bucket): it only has to cover what is durable but not yet in a
// data-file commit.
//
// # Invariants
//
//   - Entries are contiguous: Append refuses a batch that does not follow
//     the last entry (the caller resets the journal first, see Reset).
//   - Reset(after) throws every entry away and starts again after index
//     after. The caller calls it only when every entry the journal holds
//     is in a durable data-file commit, so a crash at any point of a Reset
//     loses nothing: the journal is then found whole, empty, or absent
//     (and created empty). A new journal's directory is synced before
//     the first append (etcd's Create syncs only its parent), and its
//     files' removal is made durable before the directory goes.
//   - Records carry a journal sequence number as their raft index
//     (1, 2, ... since the last Reset), and the dyad entry, with its own
//     index, as data: etcd's reader then needs no snapshot record to read
//     the whole journal, and the dyad index is checked on every read.
//
// Not safe for concurrent use: one goroutine (the server's apply loop)
// owns a Journal.
package wal
