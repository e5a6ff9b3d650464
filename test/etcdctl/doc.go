// Package etcdctl drives the real etcdctl binary (and etcdutl for snapshot
// inspection) as a subprocess against a running server and asserts its exact
// output, covering every command family an operator uses: put/get, del, txn,
// compaction, watch, lease, endpoint, member, alarm, defrag and snapshot.
//
// The same tests pass against real etcd, which is how their expectations
// were validated; run against dyad they are the oracle for etcdctl
// compatibility.
//
// Environment:
//
//	DYAD_ETCDCTL_TARGET  server under test: "dyad" (default), "etcd-3.6",
//	                     "etcd-3.5", "etcd-3.4" (Debian) or a path
//	DYAD_ETCDCTL_BIN     etcdctl to drive: "etcdctl" (3.6 from
//	                     scripts/peers.sh, default), "etcdctl-3.5",
//	                     "etcdctl-3.4" (Debian) or a path
//	DYAD_ETCDUTL_BIN     etcdutl for `snapshot status`/`restore`: "etcdutl"
//	                     (default) or "etcdutl-3.5"
//	DYAD_ETCDCTL_RESTORE_ETCD  real etcd that TestSnapshot restores the
//	                     saved snapshot into: "etcd-3.6" (default)
//
// Examples:
//
//	go test ./test/etcdctl/
//	DYAD_ETCDCTL_TARGET=etcd-3.6 go test ./test/etcdctl/
//	DYAD_ETCDCTL_TARGET=etcd-3.4 DYAD_ETCDCTL_BIN=etcdctl-3.4 go test ./test/etcdctl/
//
// The test code lives in _test.go files; this package has no API.
package etcdctl
