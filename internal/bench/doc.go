// Package bench runs `dyad bench`: it starts each target in turn (package
// target), runs every operation kind at every client count against it
// (package workload), and writes the results directory (package report).
//
// What it owns: Config and Run, the order of the matrix, the progress bar on
// stderr, and turning a target's failure into a line of the report rather
// than an aborted run.
//
// Invariants: one target runs at a time, so targets never compete for the
// machine; a target is always stopped before the next one starts, also when
// a run fails or ctx is cancelled. Run starts no goroutine that outlives it.
//
// Extension point: Config.Extra runs after the request matrix, once per
// target while it is still up, and may add sections to the report; the
// two-zone benchmarks (package twozone: replication lag, failover, false
// failovers under load, the zone-loss contrast) plug in there.
// Config.Floor runs once before the first target, while no target is up:
// the write floor (package floor), against which the report reads every
// put latency.
package bench
