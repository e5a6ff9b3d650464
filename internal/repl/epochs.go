package repl

import (
	"encoding/binary"
	"fmt"

	"github.com/dyad-db/dyad/internal/storage"
)

// EpochRecord is one entry of a node's epoch history: from index Start on,
// the log's entries belong to Epoch. Solo marks an epoch in which the
// leader acknowledged writes without its peer: a suffix in a solo epoch was
// acknowledged and is never truncated.
type EpochRecord struct {
	Epoch Epoch
	Start uint64
	Solo  bool
}

func epochKey(e Epoch) []byte {
	k := binary.BigEndian.AppendUint64(nil, e.Term)
	return binary.BigEndian.AppendUint64(k, e.Node)
}

// PutEpoch persists r (in the caller's transaction, which must commit
// before any entry of r.Epoch is acknowledged).
func PutEpoch(tx storage.WriteTx, r EpochRecord) error {
	v := binary.AppendUvarint(nil, r.Start)
	if r.Solo {
		v = append(v, 1)
	} else {
		v = append(v, 0)
	}
	return tx.Put(storage.BucketEpochs, epochKey(r.Epoch), v)
}

// Epochs returns the epoch history, oldest first.
func Epochs(tx storage.ReadTx) ([]EpochRecord, error) {
	var out []EpochRecord
	err := tx.Scan(storage.BucketEpochs, nil, nil, func(k, v []byte) (bool, error) {
		if len(k) != 16 {
			return false, fmt.Errorf("%w: epoch key %x", storage.ErrCorrupt, k)
		}
		d := decoder{b: v}
		r := EpochRecord{Epoch: Epoch{Term: binary.BigEndian.Uint64(k), Node: binary.BigEndian.Uint64(k[8:])}}
		r.Start = d.uvarint()
		if d.err != nil || len(d.b) != 1 {
			return false, fmt.Errorf("%w: epoch record %x", storage.ErrCorrupt, k)
		}
		r.Solo = d.b[0] == 1
		out = append(out, r)
		return true, nil
	})
	return out, err
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

// TrimEpochs drops from the history h (and from tx) every record whose
// entries all lie at or below shared, an index up to which both nodes'
// logs are known to hold the same entries (the replica acknowledged them,
// or applied them from a leader that confirmed its log), and returns what
// is left. The newest record always stays.
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
func TrimEpochs(tx storage.WriteTx, h []EpochRecord, shared uint64) ([]EpochRecord, error) {
	n := 0
	for n+1 < len(h) && h[n+1].Start <= shared+1 {
		n++ // record n ends at h[n+1].Start-1 <= shared
	}
	for _, r := range h[:n] {
		if err := tx.Delete(storage.BucketEpochs, epochKey(r.Epoch)); err != nil {
			return h, err
		}
	}
	return append([]EpochRecord(nil), h[n:]...), nil
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
