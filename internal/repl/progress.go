package repl

// Progress is what a node knows of one other party, as etcd raft's
// tracker.Progress: its newest heartbeat, the index it acknowledged, the
// judgement of whether it caught up, and the catch-up or snapshot request
// this node has outstanding with it. A pair holds one; a witness or a
// read-only observer would be another entry with its own rules.
type Progress struct {
	// ID is the party's member ID (0 until it is heard).
	ID uint64
	// Last is its newest heartbeat; Heard: Last is set and its run has not
	// said it is leaving.
	Last  Heartbeat
	Heard bool
	// Match is the highest index it acknowledged durable in this node's
	// current synchronous epoch (leader side).
	Match uint64
	// mark judges, while this node leads alone, whether the party caught
	// up (caughtUp).
	mark syncMark
	// behind: since when (0: not) this node has stood still at behindAt
	// while this party, leading, reported more (fetchIfStalled).
	behind   int64
	behindAt uint64

	// Requests to this party (docs/ARCHITECTURE.md, "Catch-up"). Each
	// carries an ID and each answer names the request it answers; only an
	// answer to the outstanding request counts. Asking again for the
	// same position keeps the series: an answer to any request of it
	// (IDs First..Req) is as good. At most one of Catchup and Snap is
	// outstanding.
	Catchup reqSeries
	Snap    reqSeries
	// catchupPos is what the catch-up series asks for; snapMin the lowest
	// applied index a snapshot for the snapshot series may bring.
	catchupPos CatchupReq
	snapMin    uint64
	// asked: time of the last request, or of the last snapshot chunk.
	asked int64
	// snapID, snapOff: the snapshot being received (snapID 0: none).
	snapID, snapOff uint64
}

// reqSeries is a series of requests for one position: IDs First..Req
// (Req 0: none outstanding).
type reqSeries struct {
	First, Req uint64
}

// answers reports whether id answers the outstanding series.
func (s reqSeries) answers(id uint64) bool { return s.Req != 0 && id >= s.First && id <= s.Req }

// syncMark is what a solo leader notes to judge whether its replica has
// caught up (caughtUp). It belongs to one solo epoch.
type syncMark struct {
	epoch   Epoch   // the solo epoch it belongs to (another: start afresh)
	samples []idxAt // the leader's index at recent judgements, oldest first
	acked   uint64  // the replica's newest ack in this epoch
	since   int64   // time since which every judgement found it caught up (0: the last did not)
}
