// Package crash holds multi-process tests of dyad's crash safety:
//   - kill -9 while clients write (the page cache survives);
//   - power cuts on powerfs (test/testutil/powerfs), where everything not
//     yet fsynced is rolled back, cleanly or torn, before the restart: of
//     one node, and of a pair in two network namespaces (both zones, the
//     primary's alone, the replica's alone);
//   - garbled pages of a stopped node's data file.
//
// Each restart must recover every acknowledged write at its revision or
// refuse to start with a clear error; it never serves other data.
package crash
