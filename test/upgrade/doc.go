// Package upgrade tests rolling upgrades with protocol version skew on a
// real pair (two processes in two Linux network namespaces, as
// test/twozone runs them): the current build against a build of the same
// tree with the dyad_protocol_next tag, which speaks one protocol version
// more (internal/repl, ProtocolV5). Under continuous writes on both nodes
// it upgrades the pair node by node, handing the primary role over with
// move-leader, then rolls it back the same way, and checks that no
// acknowledged write is lost; it measures the write outage of each step.
// Last, a node whose minimum version is above its peer's maximum must be
// refused, with the metric and dyad status showing it.
//
// TestUpgradeFromPreviousRelease runs the same upgrade and rollback
// between the previous release and the current build: the newest v* tag
// built from git (DYAD_PREV_REV names another revision, DYAD_PREV_BIN a
// prebuilt binary). It is skipped while the repository has no release
// tag; a build from before protocol versions (they speak version 1) pairs
// too, which is how rollback to such a build is checked. A build of
// ProtocolV2 (DYAD_PREV_REV naming a revision from before ProtocolV3) is
// how the change of write path is checked: a mixed pair speaks 2, and its
// primary, of either build, flushes a batch before it sends it.
//
// Needs root and iproute2 (skipped otherwise unless DYAD_REQUIRE_PEERS is
// set, as in CI). A prebuilt next-version binary may be given in
// DYAD_NEXT_BIN (built otherwise).
package upgrade
