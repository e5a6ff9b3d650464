// Package perf orchestrates `dyad perf`, a DDS transport benchmark in the
// spirit of RTI PerfTest: it joins two network namespaces with a veth pair,
// runs a responder in one and a pinger in the other (both are child dyad
// processes, so the cgo binding stays in internal/dds), runs Cyclone's own
// ddsperf on the same pair with the same Cyclone configuration as the
// baseline, and reports dyad's figures as ratios against ddsperf's.
//
// This package has no cgo: it only starts processes, parses ddsperf's
// output and writes reports.
package perf
