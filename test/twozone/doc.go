// Package twozone runs real dyad pairs: two processes in two Linux network
// namespaces joined by a veth pair (the replication link), each reachable
// from the test through its own veth (the client link, never faulted), and
// injects faults: kill -9, SIGSTOP, netem delay and loss. Clients write and
// read on both nodes throughout; every acknowledged write must survive.
//
// The namespaces and links are created and removed by the test itself
// (root and iproute2 required; skipped otherwise unless DYAD_REQUIRE_PEERS
// is set, as in CI).
package twozone
