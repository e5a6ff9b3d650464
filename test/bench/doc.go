// Package bench holds the smoke test of `dyad bench`: a run of a few
// seconds against dyad (single node) and a one-member etcd 3.6, checking
// that the results directory is written and its figures are sane. The full
// benchmark is not part of the test suite (docs/BENCHMARKS.md runs it).
package bench
