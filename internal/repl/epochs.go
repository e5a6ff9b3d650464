package repl

// EpochRecord is one entry of a node's epoch history: from index Start on,
// the log's entries belong to Epoch. Solo marks an epoch in which the
// leader acknowledged writes without its peer: a suffix in a solo epoch was
// acknowledged and is never truncated.
type EpochRecord struct {
	Epoch Epoch
	Start uint64
	Solo  bool
}

// Last returns the newest record of h (zero if h is empty).
func Last(h []EpochRecord) EpochRecord {
	if len(h) == 0 {
		return EpochRecord{}
	}
	return h[len(h)-1]
}

// EpochAt returns the epoch that index i belongs to in history h.
func EpochAt(h []EpochRecord, i uint64) Epoch {
	var e Epoch
	for _, r := range h {
		if r.Start > i {
			break
		}
		e = r.Epoch
	}
	return e
}

// TrimEpochs splits the history h into the records it may drop, every one whose
// entries all lie at or below shared, an index up to which both nodes'
// logs are known to hold the same entries (the replica acknowledged them,
// or applied them from a leader that confirmed its log), and returns what
// is left (kept). The newest record always stays. The caller deletes the
// dropped records from its durable copy (replstore.TrimEpochs).
//
// Nothing dropped is ever needed. The histories are compared only to find
// where two logs part (Divergence) and whether a node holds solo writes
// the other lacks (SoloSuffix). Both nodes keep [1, shared] as it is
// forever: a node truncates only entries its peer lacks, and a resync
// installs a snapshot of the peer, which holds them. So two logs never part
// at or below shared, and no entry there is a solo write the other lacks.
// The first record left starts at or below shared+1, which both
// comparisons take as the floor of what the history describes
// (HistoryFloor): below it they assume agreement.
func TrimEpochs(h []EpochRecord, shared uint64) (kept, dropped []EpochRecord) {
	n := 0
	for n+1 < len(h) && h[n+1].Start <= shared+1 {
		n++ // record n ends at h[n+1].Start-1 <= shared
	}
	return append([]EpochRecord(nil), h[n:]...), append([]EpochRecord(nil), h[:n]...)
}

// HistoryFloor is the first index that history h describes (1 for an
// untrimmed history or an empty one): below it, TrimEpochs dropped only
// records of entries both nodes share.
func HistoryFloor(h []EpochRecord) uint64 {
	if len(h) == 0 || h[0].Start < 1 {
		return 1
	}
	return h[0].Start
}

// Retention bounds the log. An entry is trimmed once the log is over
// MaxBytes or the entry is older than MaxAge, whichever comes first, but the
// newest KeepLast entries always stay (they may not be acknowledged yet).
type Retention struct {
	MaxBytes int64
	MaxAge   int64 // ns
	KeepLast uint64
}
