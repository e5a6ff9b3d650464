// Package robustness is dyad's robustness harness: a table of faults
// injected into a real two-zone pair (two dyad processes in network
// namespaces, testutil.Pair) while recorded clients read and write on both
// nodes, and checks of everything they saw.
//
// Traffic: four clients, two per node, in a Kubernetes-shaped profile
// (optimistic updates and creates as Txn comparing mod_revision, gets,
// lists as prefix ranges, deletes, event-like puts under leases, lease
// revokes and keep-alives) or a mixed one; every operation and its outcome
// is recorded (test/linearize). A watcher on each node records every event
// from the history's first revision, re-watching from the next revision
// whenever its stream ends.
//
// Faults (scenarios_test.go): kill -9 and SIGSTOP of either node, the
// replication link down one way or both ways, delay, loss and reordering
// through the shaper, a full disk (a tmpfs data dir filled up), a slow
// disk and crashes at dyad's failpoints (internal/failpoint: before and
// after the fsyncing commit, before and after the replica's ack, before
// the primary releases an acked write, while catching up, while installing
// a snapshot). The harness builds dyad with -tags failpoints.
//
// Checks, for every run:
//   - porcupine (linearize.Check, a timeout is a failure) whenever no node
//     reported a split brain; a split brain reported outside the two-way
//     partition scenario fails the run;
//   - no acknowledged write lost: each is in the store's history (an event
//     of that key and value at that revision) or in a conflict record;
//   - watches: ordered, no duplicates, each revision whole in one response,
//     no header older than one already seen; without a split brain also no
//     gap and every event as the store has it; and a watch started on
//     either node from random revisions replays the store's history.
//
// Environment: DYAD_ROBUSTNESS=ci|all|name,... (TestRobustness; ci, the
// default and what CI runs, is every row that names no open bug; an
// unknown name fails the test), DYAD_ROBUSTNESS_SOAK_CYCLES=N (TestSoak, the long soak,
// scripts/robustness-soak.sh), DYAD_ROBUSTNESS_RESULTS=file (a JSON line
// per run), DYAD_FAILPOINTS_BIN (a prebuilt failpoints binary). Needs root
// and iproute2; skipped otherwise unless DYAD_REQUIRE_PEERS=1.
package robustness
