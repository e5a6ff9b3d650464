// Package sim is a deterministic simulator of a dyad pair: the protocol
// core (internal/repl's Node) of every node, driven on virtual time over a
// fake network, fake clocks and fake disks, with clients whose histories
// go through porcupine and invariants checked after every step.
//
// # Determinism
//
// A run is a pure function of its seed (and its script, which is itself
// drawn from the seed): every random choice comes from *rand.Rand values
// seeded from it, events run in (time, sequence) order, and nothing
// iterates a map where the order could change an outcome. A failing seed
// replays exactly, which is what makes shrinking possible: Shrink drops
// faults and client operations from the script while the same kind of
// failure persists.
//
// # Layout
//
// Only adapter*.go import the core (node.go holds the parts of a simulated
// node that do not touch it). The rest is the world it lives in:
//   - events.go: the event queue and virtual time;
//   - network.go: a network that drops, delays, duplicates and reorders
//     packets, and cuts and heals either direction;
//   - clock.go: per-node clocks with bounded drift that may restart near
//     zero (a reboot);
//   - disk.go: a disk that loses, in a crash, what was not synced;
//   - history.go: client histories and the porcupine model of the store;
//     settle.go settles puts of unknown outcome from the settled
//     leader's log (what the world checks), resolve.go from the history
//     alone (Check, for histories without such a log), and linear.go
//     checks them with an equivalent compact model (for speed);
//   - check.go: the invariants (design note engine-v2.md, "Deterministic
//     simulation");
//   - script.go: faults and client operations drawn from a seed, and the
//     shrinker; faults.go: the extended set (hand-overs, fence command
//     outcomes, clock rate changes) and adapter_faults.go its core side;
//     versions.go: mixed versions (a node of an older build, rolling
//     upgrades and rollbacks) and adapter_versions.go the driver's two
//     write paths (send before the flush from ProtocolV3 on, flush first
//     below it, as repl.Node.SendsBeforeFlush says);
//   - parties.go: what the network delivers to (the nodes, and room for
//     a third party such as a witness);
//   - world.go: the world that runs a script; runner.go: many seeds on
//     all cores.
//
// A step is one delivered packet, client operation, fault, or timer that
// fired and did something (an idle tick, which only sends a heartbeat,
// does not count).
package sim
