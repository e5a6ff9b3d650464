// Package server owns one dyad node's state machine: it ties storage, mvcc,
// the lessor and the watch hub together behind the operations the gRPC layer
// calls (Range, Put, Txn, LeaseGrant, Status, Snapshot, ...).
//
// Write path. Every state change is a log entry (an
// etcdserverpb.InternalRaftRequest) at a log index. Entries are proposed to
// the single applier goroutine, which takes every queued entry as one batch,
// applies each to mvcc and the lessor inside one storage transaction, writes
// the log position (meta consistent_index/term) into the same transaction,
// commits with fsync (group commit), marks the batch readable, notifies the
// watch hub and only then answers the callers. A failed commit leaves memory
// ahead of disk, so it stops the node: nothing in that batch was
// acknowledged, and a restart rebuilds memory from disk.
//
// Read path. Reads are served by any goroutine straight from mvcc at the
// readable (durable) revision; in a single node that is the linearizable
// point, because every acknowledged write is durable before it is answered.
// In a pair a linearizable read first goes through the applier to the
// protocol core, which decides whether and when it may be served
// (reads.go); serializable reads never do.
//
// Goroutines. Run owns all of them (applier, lease expiry, compactor, auto
// compaction, watch hub) and returns only after each has stopped.
//
// The applier blocks in its select, or, over a transport that waits for
// it (ddsnet with Config.WaitSet), in that transport's Wait; then whatever
// queues work for it (proposals, reads, hand-overs, the fence result, its
// context) calls wakeLoop after queuing (loopwait.go).
//
// Lock order: Server.mu is a leaf; it is never held across a proposal, a
// storage transaction or a call into another package.
package server
