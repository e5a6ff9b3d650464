// Package limits drives a real dyad process past its limits and with
// floods: requests over --max-request-bytes and --max-txn-ops, thousands
// of leases, thousands of watchers, and a watcher that never reads while
// writes continue. Each case must get etcd's error or use bounded memory
// (measured as the process's RSS), and afterwards the server must still
// answer and hold every acknowledged write.
//
// DYAD_LIMITS_TARGET=etcd-3.6 runs the same cases against real etcd, for
// comparison. The RSS figures are logged (go test -v) for docs and notes; the bounds
// asserted are generous, to catch unbounded growth, not to time anything.
package limits
