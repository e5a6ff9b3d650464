// Package perf holds the smoke test of `dyad perf`: a short run over the
// private veth pair (one size, a few hundred round trips) so CI covers the
// namespace setup, both child roles, the ddsperf baseline, the report files
// and the clean-up. It needs root; it skips otherwise.
package perf
