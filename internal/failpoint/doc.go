// Package failpoint holds dyad's failpoints: named places at durability
// boundaries where a test can make the process crash, sleep or fail, to
// prove that no acknowledged write is lost whatever happens there.
//
// Failpoints are compiled out by default. Only a binary built with
//
//	go build -tags failpoints ./cmd/dyad
//
// has them; in every other build Hit is an empty function that the compiler
// inlines away, Enabled is false and Handler is nil, so the call sites cost
// nothing.
//
// The places (constants below; each call site names one):
//
//	before-commit           storage: a write transaction is about to be committed
//	                        (bbolt's commit writes and fsyncs the data file)
//	after-commit            storage: the commit and its fsync returned
//	before-ack              replica: entries are durable, the ack is not sent yet
//	after-ack               replica: the ack for durable entries was sent
//	before-release          primary: the replica's ack arrived; the callers are
//	                        not answered yet
//	catchup-apply           replica: a catch-up chunk from the primary's log is
//	                        about to be applied
//	catchup-serve           primary: a catch-up chunk is about to be sent
//	snapshot-before-install replica: the primary's snapshot is on disk, synced,
//	                        and about to replace the data file
//	snapshot-after-install  replica: the data file was replaced; memory is not
//	                        reloaded yet
//	truncate-suffix         replica: about to drop a never-acknowledged suffix in
//	                        place; an error refuses the drop, changing nothing,
//	                        as a suffix that cannot be undone in place is
//	                        refused, and the node resyncs from a snapshot
//
// A failpoint is armed with a term (see Parse):
//
//	[P%][N*]action     action: off | crash | sleep(DURATION) | error(MESSAGE)
//
// crash kills the process with SIGKILL at once (no deferred call, no flush of
// anything buffered in user space: a power cut of the process); sleep delays
// the caller (a slow disk or a slow peer); error makes the call site fail as
// an I/O error would, with an error that wraps ErrInjected. N* fires at most
// N times and then disarms; P% fires with probability P.
//
// In a failpoints build the terms come from the environment at start,
//
//	DYAD_FAILPOINTS='before-commit=sleep(20ms);after-ack=1*crash'
//
// and may be changed while the process runs through Handler, which `dyad
// serve` mounts at /debug/failpoints on the metrics listener:
//
//	GET    /debug/failpoints          every armed failpoint, "name=term" lines
//	PUT    /debug/failpoints/<name>   arm <name> with the term in the body
//	DELETE /debug/failpoints/<name>   disarm it
//
// The registry of armed failpoints is process-wide state on purpose: it is
// set by the environment before any component exists and reached from call
// sites deep in storage and replication, which must not carry a parameter
// for a feature absent from production builds. It exists only in failpoints
// builds.
package failpoint
