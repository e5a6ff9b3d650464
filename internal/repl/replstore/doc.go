// Package replstore keeps the durable half of dyad's replication in the
// data file beside the MVCC state: the replicated log (bucket log, keyed by
// index) and the epoch history (bucket epochs, keyed by epoch). It only
// reads and writes a storage transaction; what to write, and when, is
// decided by the protocol core (internal/repl) and carried out by its
// driver (internal/server).
//
// # Invariants
//
//   - The log holds [First, Last] without holes, and Last equals the meta
//     consistent_index of the same data file: an entry is appended in the
//     same storage transaction that applies it.
//   - An epoch record is written in a transaction that commits before any
//     entry of its epoch is acknowledged.
package replstore
