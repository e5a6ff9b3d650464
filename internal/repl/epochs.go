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
