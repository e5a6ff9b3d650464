// Package workload generates the benchmark's requests and measures them: one
// operation kind, N clients, for a fixed duration or a fixed number of
// operations, against a list of etcd-API endpoints.
//
// Profiles (k8s.go): "raw" is the etcd-benchmark-style kinds of op.go;
// "k8s" sends kube-apiserver's request shapes (hot-key Gets, LIST pages,
// GuaranteedUpdate and create txns, events with leases, watch from a LIST's
// revision) on /registry/... text keys; "phases" is the study's steady state
// and pod burst.
//
// What it owns: the operation kinds (Op), their request shapes, the
// per-client generators, the latency histograms (HdrHistogram, microsecond
// resolution, 3 significant digits) and the Result of one run.
//
// Reproducibility: client i of a run draws every key and value from a PCG
// generator seeded with (Spec.Seed, hash of op and client count, i), so two
// runs with the same seed send the same requests in the same per-client
// order to every target. Keys and values are printable text, so kine over
// PostgreSQL (whose text columns reject 0x00) can take part.
//
// Unsupported operations: before measuring, one request of the kind is sent;
// if the target answers that it does not implement it (gRPC Unimplemented,
// or kine's plain "not supported" errors) the Result says Unsupported and
// nothing is measured. Other errors during the run are counted, never
// recorded as latencies.
//
// Goroutines: Run starts one goroutine per client and one progress ticker;
// all of them end before Run returns.
package workload
