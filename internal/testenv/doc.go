// Package testenv decides what a test does when the machine lacks
// something it needs: root, a command, a kernel device, a library, a peer
// binary. Every such check in the tree goes through Missing, so one switch
// governs them all:
//
//   - by default the test is skipped, with what is missing and how to get it;
//   - with DYAD_REQUIRE_PEERS=1 (scripts/test.sh, CI) the test fails with
//     the same text, because there a skip would hide a test that never ran.
//
// The messages start with "missing prerequisite:" so that a reader, and the
// CI summary (scripts/testsum), can tell them from deliberate skips, which
// are listed with their reasons in test/skips.txt.
//
// It lives under internal/ so that unit tests beside the code can use it
// without importing test/testutil (which imports the packages under test);
// it imports nothing of dyad's.
package testenv
