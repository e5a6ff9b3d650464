// Package conflict keeps the writes a node acknowledged alone during a
// split brain and then lost to its peer's history: conflict records.
//
// When the two zones lost contact and both acknowledged writes alone, the
// losing side's diverged writes are never re-applied automatically (a
// Kubernetes object written on both sides names different states). Before
// the loser gives up its history, the server writes one Set per split
// brain: every diverged log entry, and the final state of every key those
// entries changed, as the loser saw it. An operator lists, inspects and
// selectively re-applies them with `dyad resolve`.
//
// A Set is one JSON file under <data-dir>/conflicts, written once, fsynced
// and renamed into place before the loser discards anything, so a crash
// never loses it. Resolution state lives beside it in append-only files
// (<set>.applied, one JSON line per key re-applied or dismissed) and a
// marker (<set>.accept) by which the operator lets a node held by
// --split-brain-policy manual continue. The directory outlives snapshot
// resyncs, which replace only the data file.
//
// The package does file I/O only; it knows nothing of the server.
package conflict
