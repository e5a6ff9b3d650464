package replstore

import (
	"encoding/binary"
	"fmt"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/storage"
)

func epochKey(e repl.Epoch) []byte {
	k := binary.BigEndian.AppendUint64(nil, e.Term)
	return binary.BigEndian.AppendUint64(k, e.Node)
}

// PutEpoch persists r (in the caller's transaction, which must commit
// before any entry of r.Epoch is acknowledged).
func PutEpoch(tx storage.WriteTx, r repl.EpochRecord) error {
	v := binary.AppendUvarint(nil, r.Start)
	if r.Solo {
		v = append(v, 1)
	} else {
		v = append(v, 0)
	}
	return tx.Put(storage.BucketEpochs, epochKey(r.Epoch), v)
}

// Epochs returns the epoch history, oldest first.
func Epochs(tx storage.ReadTx) ([]repl.EpochRecord, error) {
	var out []repl.EpochRecord
	err := tx.Scan(storage.BucketEpochs, nil, nil, func(k, v []byte) (bool, error) {
		if len(k) != 16 {
			return false, fmt.Errorf("%w: epoch key %x", storage.ErrCorrupt, k)
		}
		r := repl.EpochRecord{Epoch: repl.Epoch{Term: binary.BigEndian.Uint64(k), Node: binary.BigEndian.Uint64(k[8:])}}
		start, n := binary.Uvarint(v)
		if n <= 0 || len(v) != n+1 {
			return false, fmt.Errorf("%w: epoch record %x", storage.ErrCorrupt, k)
		}
		r.Start = start
		r.Solo = v[n] == 1
		out = append(out, r)
		return true, nil
	})
	return out, err
}

// TrimEpochs drops from h, and from tx, the records repl.TrimEpochs lets
// go for shared, and returns what is left.
func TrimEpochs(tx storage.WriteTx, h []repl.EpochRecord, shared uint64) ([]repl.EpochRecord, error) {
	kept, dropped := repl.TrimEpochs(h, shared)
	for _, r := range dropped {
		if err := DeleteEpoch(tx, r.Epoch); err != nil {
			return h, err
		}
	}
	return kept, nil
}

// DeleteEpoch deletes the record of epoch e (a record TrimEpochs let go).
func DeleteEpoch(tx storage.WriteTx, e repl.Epoch) error {
	return tx.Delete(storage.BucketEpochs, epochKey(e))
}
