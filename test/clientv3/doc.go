// Package clientv3 runs programs written against go.etcd.io/etcd/client/v3 —
// the concurrency package's Mutex and Election recipes — against a running
// server. These recipes combine leases, sessions with keep-alive, prefix
// ranges sorted by create revision, transactions comparing create
// revisions, and watches on deletions, so they are a compact end-to-end
// check of how those features compose.
//
// Environment:
//
//	DYAD_CLIENTV3_TARGET  server under test: "dyad" (default), "etcd-3.6",
//	                      "etcd-3.5", "etcd-3.4" (Debian) or a path
//
// Examples:
//
//	go test ./test/clientv3/
//	DYAD_CLIENTV3_TARGET=etcd-3.6 go test ./test/clientv3/
//
// The test code lives in _test.go files; this package has no API.
package clientv3
