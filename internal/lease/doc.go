// Package lease owns dyad's lessor: which leases exist, their TTLs and
// deadlines, and which keys each one holds.
//
// Grants and revocations are log entries: they change the lessor only when
// the server applies them, inside the storage transaction that persists them
// (bucket "lease", etcd's layout: 8-byte big-endian ID -> leasepb.Lease).
// Keep-alives only move an in-memory deadline and are not persisted, as in
// etcd without lease checkpointing: after a restart or a change of primary
// every lease gets its full granted TTL again.
//
// Expiry does not delete anything by itself. The owner asks Expired for
// leases past their deadline and proposes their revocation through the log,
// so that the deletion of their keys is one replicated revision.
//
// Lessor.mu guards all state; it is never held while calling out.
package lease
