// Package netns builds the two network namespaces ("zones") in which the
// benchmark runs a dyad pair, and removes them.
//
// Topology (N is a per-pair third octet):
//
//	root namespace (the bench's clients)
//	  10.217.N.1 ── veth ── 10.217.N.2 "cli"  zone a  "repl" 10.216.N.1 ─┐
//	  10.218.N.1 ── veth ── 10.218.N.2 "cli"  zone b  "repl" 10.216.N.2 ─┘ veth
//
// Replication traffic (DDS) crosses the zones' direct veth pair; the bench's
// clients reach each zone over its own client link, so client traffic never
// shares the replication link.
//
// With a delay between the zones (NewWith), or three zones (etcd's members,
// zone c's client link on 10.219.N), each zone's "repl" veth ends instead
// in a third namespace (-m), where an internal/shaper Hub run by this
// process passes every frame to the other zones after the delay:
//
//	zone a "repl" 10.216.N.1 ── veth ── port-a ┐
//	zone b "repl" 10.216.N.2 ── veth ── port-b ┼ m: shaper.Hub (delay each way)
//	zone c "repl" 10.216.N.3 ── veth ── port-c ┘
//
// The kernel here has no sch_netem, hence the userspace shaper; it costs a
// hop through this process (measure it with Options.Hub and no delay).
//
// Why not test/testutil.Zones: that fixture is tied to testing.TB and exists
// for fault injection (a bridge namespace, netem or a userspace shaper). A
// benchmark needs a plain, fault-free topology it can build from a command,
// so this package builds one with `ip`. The failover and lag benchmarks
// (M3/M4) that need faults can add them here (tc netem on "repl") without
// touching the test fixture. It uses subnets 10.216-10.219, apart from the
// fixture's 10.213-10.215, so a bench and the test suite can run together.
//
// Invariants: namespace names are dyadb-<owner pid>-<random>-<a|b|c|m>;
// Close stops the hub and deletes them all (which deletes their veths), and
// Sweep removes namespaces whose owner process is gone, so a crashed bench
// leaves nothing behind for long. The hub's goroutines are owned by the
// Pair and end in Close.
// Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
package netns
