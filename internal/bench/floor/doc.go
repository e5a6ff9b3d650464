// Package floor measures the write floor of `dyad bench`: what a
// replicated write cannot cost less than on this machine, one append plus
// fdatasync of a small record and one DDS round trip between the zones
// (issue 18). It runs in the same bench run as the systems, before the
// first target starts, so that every put latency of the run can be read as
// a multiple of it.
//
// What it owns: the fdatasync sampler (Sync), the loop over the zone
// layouts whose round trip is measured (Config.Run), and the report section
// that shows the floor's parts and each system's put latency at one
// client divided by the floor of its layout (Result).
//
// The DDS round trip itself is measured by a RoundTrip the caller gives:
// it needs the cgo binding, which lives in the dyad binary (cmd/dyad runs
// `dyad perf`'s ddsnet ping-pong in the zones' namespaces), while this
// package only builds the namespaces, exactly as package target's
// dyad-pair lays them out (internal/bench/netns).
//
// Invariants: one layout's namespaces exist only while its round trip is
// measured and are removed before the next is built; the sampler's file
// is removed before Sync returns. Nothing here starts a goroutine, apart
// from the shaper's, which the namespaces own and stop in Close.
package floor
