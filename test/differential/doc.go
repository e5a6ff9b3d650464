// Package differential sends the same requests to a fresh real etcd (the
// reference, etcd 3.5 by default) and to a fresh server under test (dyad by
// default) and compares the responses field by field.
//
// Every scenario starts its own pair of servers, so both begin at revision 1
// with no keys and revisions must match exactly. Requests go through the raw
// etcdserverpb gRPC clients, so no field is hidden by clientv3 and errors are
// compared as gRPC code plus message.
//
// Only what legitimately differs between two clusters is normalised before
// comparing:
//   - response headers: cluster_id, member_id and raft_term are shown as 1
//     when set and 0 when not (revision is kept as is);
//   - server-assigned lease IDs: replaced by an alias numbered in order of
//     grant, everywhere they appear (KeyValue.lease, lease responses);
//   - remaining lease TTLs (TimeToLive, KeepAlive): wall-clock dependent, so a
//     value within 3 s below the granted TTL counts as the granted TTL;
//   - TimeToLive's keys and the Leases list: etcd builds both from Go maps
//     (random order), so they are sorted.
//
// Environment:
//
//	DYAD_DIFF_REFERENCE  reference binary name (default "etcd-3.5")
//	DYAD_DIFF_TARGET     server under test: "dyad" (default) or an etcd binary
//	                     name such as "etcd-3.6" (to validate the suite
//	                     against a second reference); falls back to
//	                     DYAD_TEST_TARGET like the other suites.
//
// The suite runs in well under a minute: scenarios run in parallel, each on a
// pair of servers started for it.
package differential
