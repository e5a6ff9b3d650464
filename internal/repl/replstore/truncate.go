package replstore

import (
	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/storage"
)

// TruncateAfter deletes, in the caller's transaction, every log entry
// after index keep and every record of history h that starts after it,
// and returns the history left. It is the log's part of dropping a suffix
// that was never acknowledged; the caller drops the suffix's effects and
// sets the applied index to keep in the same transaction, so the log and
// the state never disagree after a crash.
func TruncateAfter(tx storage.WriteTx, h []repl.EpochRecord, keep uint64) ([]repl.EpochRecord, error) {
	var doomed [][]byte
	err := tx.Scan(storage.BucketLog, indexKey(keep+1), nil, func(k, _ []byte) (bool, error) {
		doomed = append(doomed, append([]byte(nil), k...))
		return true, nil
	})
	if err != nil {
		return h, err
	}
	for _, k := range doomed {
		if err := tx.Delete(storage.BucketLog, k); err != nil {
			return h, err
		}
	}
	var left []repl.EpochRecord
	for _, r := range h {
		if r.Start <= keep {
			left = append(left, r)
			continue
		}
		if err := tx.Delete(storage.BucketEpochs, epochKey(r.Epoch)); err != nil {
			return h, err
		}
	}
	return left, nil
}
