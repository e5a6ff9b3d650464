// Package target starts and stops the systems the benchmark measures, all on
// this machine: dyad (single node, and a two-zone pair in two network
// namespaces), etcd 3.6 (one, two and three members), kine over SQLite and over a
// private PostgreSQL cluster, and "external" endpoints the user already runs.
//
// What it owns: the Target interface and its implementations, the registry
// of target names (New, Names), and the locations of the binaries (Bins).
// Binaries come from the cache that scripts/peers.sh fills (etcd-3.6, kine),
// from Debian (PostgreSQL 15) and from the dyad binary given by the caller.
//
// Invariants:
//   - Start returns only once every endpoint answers a linearizable Get, or
//     with an error after stopping whatever it had started.
//   - Stop stops every process Start started (children get SIGKILL from the
//     kernel if the bench dies first) and removes namespaces; it is safe to
//     call after a failed Start and more than once.
//   - Targets share nothing: each has its own data directory and ports.
//
// Extension points for the replication and fault benchmarks (M3/M4,
// package twozone): Pair exposes its nodes' endpoints per zone (Zones), their
// metrics (MetricsURL) and processes (Node, Kill, Restart), so a lag or
// failover benchmark can watch one zone, write to the other and kill a node
// without reaching into this package's internals. Faulty targets (etcd,
// kine) take the study's zone loss in their own layout and revive.
package target
