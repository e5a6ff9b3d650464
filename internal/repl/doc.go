// Package repl is dyad's two-zone replication protocol: the wire formats
// (log entries at (epoch, index), the epoch history, the protocol
// messages), the pure rules over them (divergence, solo suffixes, who
// yields after a split brain), the failure detector that times the role
// and read leases, the protocol core (Node) that decides roles, epochs,
// commits and resyncs, and the protocol versions a build speaks and how two
// nodes settle on one (version.go; what a node admits at all: admit.go).
//
// The package is a deterministic state machine: it does no I/O, reads no
// clock, draws no random numbers and starts no goroutine (purity_test.go
// enforces it). Every time is the caller's monotonic clock reading, in ns,
// passed in. The durable log and epoch history live in subpackage
// replstore; internal/server drives the core from its apply loop and
// carries out what it asks for; internal/transport carries the messages.
//
// # Invariants
//
//   - An entry's Index is dense: a log holds [First, Last] without holes.
//   - An Epoch is (Term, Node). Terms only grow across the pair: a node
//     starting an epoch picks a term above every term it has seen. An epoch
//     record is persisted before any entry of that epoch is acknowledged.
//   - The etcd revision is not part of the position; it is derived by
//     applying the entries in order (failed txns, lease grants and
//     compactions do not bump it).
package repl
