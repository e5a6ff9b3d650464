// Package repl holds the durable and wire formats of dyad's two-zone
// replication: log entries at (epoch, index), the replicated log kept in the
// data file beside the MVCC state, the epoch history, the protocol messages,
// the failure detector that times the role and read leases, and the
// protocol versions a build speaks and how two nodes settle on one
// (version.go).
//
// It holds no goroutines and no network code. internal/server drives it from
// its apply loop; internal/transport carries the messages.
//
// # Invariants
//
//   - An entry's Index is dense: the log holds [First, Last] without holes,
//     and Last equals the meta consistent_index of the same data file,
//     because the entry is appended in the same storage transaction that
//     applies it.
//   - An Epoch is (Term, Node). Terms only grow across the pair: a node
//     starting an epoch picks a term above every term it has seen. An epoch
//     record is persisted before any entry of that epoch is acknowledged.
//   - The etcd revision is not part of the position; it is derived by
//     applying the entries in order (failed txns, lease grants and
//     compactions do not bump it).
package repl
