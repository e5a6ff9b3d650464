// Package conformance runs the Kubernetes apiserver's generic storage
// conformance suite (k8s.io/apiserver/pkg/storage/testing, the RunTest* and
// RunWatch* functions) through the real etcd3 storage backend
// (k8s.io/apiserver/pkg/storage/etcd3) against a server process: dyad by
// default, or real etcd for comparison.
//
// The wiring mirrors k8s.io/apiserver's own pkg/storage/etcd3/store_test.go,
// rebuilt from outside that package: the transformer is a swappable wrapper
// (so UpdatePrefixTransformer/CorruptTransformer work without touching the
// store's private fields), compaction uses etcd3.Compact, and the client is
// wrapped in the suite's KV and Kubernetes recorders.
//
// Every test starts a fresh server (testutil.Start): the suite asserts exact
// resource versions, and compaction poisons a shared store.
//
// Run:
//
//	go test ./test/conformance/                                  # against dyad
//	DYAD_CONFORMANCE_TARGET=etcd-3.6 go test ./test/conformance/ # against etcd 3.6
//	DYAD_CONFORMANCE_TARGET=etcd-3.4 go test ./test/conformance/ # Debian's etcd
//
// The test code lives in _test.go files; this package has no API.
package conformance
