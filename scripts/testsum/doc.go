// Command testsum is the summariser behind scripts/test.sh. It reads the
// event streams of `go test -json` and makes CI tell the truth about them:
//
//	go test -json ./... | testsum stream -out FILE
//	    prints a compact log as the tests run (one line per package,
//	    every failure with its output, every skip with its reason) and
//	    keeps the raw events in FILE;
//	testsum report -steps FILE -allow test/skips.txt
//	    prints each step's wall time and its tests passed, failed and
//	    skipped, every skip with its reason and whether test/skips.txt
//	    allows it, every failure, and last the closing line
//	    "N passed, N failed, N skipped"; exits 1 if anything failed;
//	testsum fuzzrace FILE
//	    exits 0 only if the failures in FILE are exactly Go's fuzz
//	    coordinator race (golang/go#75804: a fuzz target that fails with
//	    a bare "context deadline exceeded" and writes no failing input),
//	    which scripts/fuzz.sh retries.
//
// Counting: every test and subtest that ends counts once as passed, failed
// or skipped. A package that fails with no failing test (a build error, a
// panic in TestMain, a timeout) counts as one failure, and so does a step
// that exits non-zero with nothing failed in its events (go vet, a build).
// A skip that test/skips.txt does not allow counts as a failure, not as a
// skip: with DYAD_REQUIRE_PEERS=1 a missing prerequisite already fails its
// test (internal/testenv), so any other skip in CI is either listed with
// its reason or a mistake.
package main
