// Package snapshot checks that dyad's data file is interchangeable with
// etcd's, using the real binaries in every direction:
//
//   - save:     etcdctl snapshot save from a running dyad, then etcdutl
//     snapshot status (3.6 and 3.5) on the file; its MVCC buckets are
//     compared byte for byte with an etcd 3.5 snapshot of the same history.
//   - migrate in: etcd 3.5 / 3.6 → etcdctl snapshot save → dyad snapshot
//     restore → dyad serves exactly what etcd served (every key with its
//     create/mod revision, version and lease, every historical revision kept
//     after compaction, the compaction itself, the current revision, the
//     leases with their keys), and new writes continue at the next revision.
//   - rollback: dyad → etcdctl snapshot save → etcdutl snapshot restore (3.6
//     and 3.5) → a real etcd serves exactly what dyad served.
//   - corrupt:  dyad snapshot restore refuses a damaged snapshot with a clear
//     error and leaves nothing behind.
//
// DYAD_SNAPSHOT_TARGET=etcd-3.6 (or DYAD_TEST_TARGET) makes a real etcd the
// source of the save and rollback tests instead of dyad, to validate them.
//
// All servers and tools run on 127.0.0.1. Missing reference binaries skip
// the tests unless DYAD_REQUIRE_PEERS=1.
package snapshot
