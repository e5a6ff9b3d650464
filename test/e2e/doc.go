// Package e2e runs a real Kubernetes control plane on a two-zone dyad pair
// and asserts what a site with two availability zones needs: losing a zone
// keeps the cluster working, and bringing it back loses nothing.
//
// Each test builds a "site" (site_test.go) on testutil.Zones, two network
// namespaces joined by a replication link. Every zone runs:
//
//   - a store member: a dyad node (the pair spans the two zones), or for the
//     contrast runs an etcd 3.6 member (two members, or three with two in
//     zone a);
//   - kube-apiserver v1.36 pointing at its zone's store member (optionally at
//     both), with a bearer token and AlwaysAllow authorization;
//   - kube-controller-manager and kube-scheduler, leader-elected across the
//     zones through the shared store;
//   - kwok, simulating nodes labelled topology.kubernetes.io/zone=a|b and
//     running their pods.
//
// The Kubernetes binaries come from scripts/k8s.sh (the Go module proxy
// only); a test builds them when they are missing, which takes about ten
// minutes on a clean cache. Timings are shortened so that a zone loss plays
// out in tens of seconds; the values and the reasons are in site_test.go
// (timings) and docs/OPERATIONS.md.
//
// Scenarios:
//
//   - TestZoneLossSmoke (CI): 100 pods over both zones, loss of the
//     primary's zone, rescheduling, a new Deployment, rejoin, HashKV
//     agreement and no lost object.
//   - TestFull (DYAD_E2E_FULL=1, not in CI): zone loss of the primary's and
//     of the replica's zone, 1,000 pods at once on dyad and on etcd, the
//     same zone loss on etcd with two and with three members (an outcome,
//     not a failure), and a rolling restart of both dyad nodes under load.
//
// Environment:
//
//	DYAD_K8S_BIN      directory holding kube-apiserver, kube-controller-manager,
//	                  kube-scheduler, kwok and kwok-stages.yaml (default: what
//	                  scripts/k8s.sh --print-bin-dir prints; built if missing)
//	DYAD_E2E_FULL=1   run TestFull
//	DYAD_E2E_FIGURES  append the measured figures, one line each, to this file
//	DYAD_E2E_METRICS  write the apiservers' and store members' /metrics
//	                  after the 1,000-pod runs into this directory
//
// The test needs root (network namespaces); without it the tests skip, or
// fail with DYAD_REQUIRE_PEERS=1.
package e2e
