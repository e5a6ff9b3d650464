// Package testutil starts real server processes — dyad itself, or a real
// etcd used as the reference implementation — for the black-box suites under
// test/ (conformance, etcdctl, clientv3).
//
// What it owns:
//   - Locating binaries: the dyad binary built from ./cmd/dyad (Builder,
//     BuildDyad), the reference peers built by scripts/peers.sh into
//     .cache/peers/bin (PeersBin), and Debian's etcd 3.4 (aliases "etcd-3.4",
//     "etcdctl-3.4").
//   - Running one single-node server per call (StartDyad, StartEtcd, Start)
//     on free 127.0.0.1 ports with a private data dir, waiting until its
//     client port answers a Status and a Get, and killing it on t.Cleanup.
//     The server's stderr goes to a file whose tail is logged when the test
//     fails.
//   - Choosing the server under test from the environment (TargetFromEnv), so
//     each suite runs against dyad by default and against real etcd for
//     comparison.
//
// Environment:
//
//	DYAD_PEERS_BIN       directory holding etcd-3.6, etcdctl, ... (default
//	                     <repo>/.cache/peers/bin)
//	DYAD_REQUIRE_PEERS=1 a missing binary, or any other missing prerequisite
//	                     (root, iproute2, ...), fails the test instead of
//	                     skipping it (CI sets this; internal/testenv decides)
//	DYAD_BIN             use this prebuilt dyad binary instead of building
//	                     ./cmd/dyad
//	DYAD_TEST_TARGET     default server for every suite: "dyad" (default) or an
//	                     etcd binary name such as "etcd-3.6" or "etcd-3.4"
//	DYAD_KEEP_LOGS=1     log the server's stderr tail even when the test passes
//
// Invariants: every process started here is killed (SIGKILL after a grace
// period) before its data directory is removed, and gets SIGKILL from the
// kernel if the test binary dies first (Pdeathsig). Servers listen on
// 127.0.0.1; Zones (netns.go) builds private network namespaces and veth
// links that the test creates and removes, and talks only to their
// addresses.
package testutil
