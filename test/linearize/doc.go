// Package linearize records histories of etcd KV operations made through
// clientv3 and checks them for linearizability with porcupine
// (github.com/anishathalye/porcupine).
//
// What it owns:
//   - Model: a sequential specification of one etcd key space under the
//     operations a Kubernetes apiserver issues: Put, linearizable Get of one
//     key, Delete of one key, and the optimistic-concurrency Txn
//     "if mod_revision(key) == X then put else get" (CAS); plus a
//     linearizable Range over a prefix, a Put attached to a lease and a
//     lease Revoke (its keys deleted in one revision). The state is the
//     key/value map plus the store revision, and every response's header
//     revision is checked against it: a write that changes the store returns
//     previous revision + 1, a Get or a Delete of nothing returns the current
//     revision. That makes the check global (revisions order all keys), so the
//     model deliberately has no Partition function.
//   - Recorder: a concurrency-safe history recorder with monotonic
//     timestamps, and helpers (Put, Get, Delete, CAS) that run one operation
//     through a *clientv3.Client and record it with its outcome classified by
//     Classify: ok, definite failure (dropped: it provably had no effect), or
//     unknown (kept, with the return time at the end of the history).
//   - Workload: a small apiserver-like random mix over a few hot keys, run by
//     N concurrent clients spread over any number of endpoints.
//   - Check: runs the porcupine checker with a time limit. Illegal and
//     Unknown (the checker ran out of time) both fail the test; the HTML
//     visualization is then written to a file whose path is reported.
//
// Invariants the histories must respect:
//   - Nothing outside the history changes the revision while it is recorded
//     (no other writers anywhere in the key space, no lease expiring on a
//     key, no compaction-induced writes); otherwise every header revision
//     check fails. Start from ReadState so the initial revision and values
//     are known, or from an empty store at revision 1.
//   - Values written are unique per operation, so a lost or resurrected write
//     cannot hide behind an equal value.
//
// Unknown outcomes use porcupine's convention: the operation's interval runs
// to the end of the history, and the model accepts it with any effect it
// could have had. A write of unknown outcome that did take effect is
// linearized where it happened; one that did not is linearized after every
// other operation, where it is observed by nobody. Both are therefore
// accepted by a deterministic model, and no power-set model is needed.
//
// Environment:
//
//	DYAD_KEEP_LOGS=<dir>  write failure visualizations into <dir> (kept);
//	                      otherwise a fresh directory under $TMPDIR is used
//	                      and its path logged (it is kept too: t.TempDir
//	                      would delete it when the test ends)
package linearize
