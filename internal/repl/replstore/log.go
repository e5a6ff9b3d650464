package replstore

import (
	"encoding/binary"
	"fmt"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/storage"
)

func indexKey(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }

// Append stores e in the log. The caller appends in index order, inside the
// transaction that applies e. The key and the encoding are fresh, so they
// are handed over (storage.PutOwned), not copied again.
func Append(tx storage.WriteTx, e *repl.Entry) error {
	return storage.PutOwned(tx, storage.BucketLog, indexKey(e.Index), repl.AppendEntry(nil, e))
}

// Bounds returns the first and last index in the log (0, 0 when empty).
func Bounds(tx storage.ReadTx) (first, last uint64, err error) {
	err = tx.Scan(storage.BucketLog, nil, nil, func(k, _ []byte) (bool, error) {
		first = binary.BigEndian.Uint64(k)
		return false, nil
	})
	if err != nil {
		return 0, 0, err
	}
	err = tx.ScanReverse(storage.BucketLog, nil, nil, func(k, _ []byte) (bool, error) {
		last = binary.BigEndian.Uint64(k)
		return false, nil
	})
	return first, last, err
}

// Read returns the entries from index from on, consecutive, up to about
// maxBytes of data (at least one entry if there is one). The entries own
// their memory.
func Read(tx storage.ReadTx, from uint64, maxBytes int) ([]repl.Entry, error) {
	var out []repl.Entry
	size := 0
	next := from
	err := tx.Scan(storage.BucketLog, indexKey(from), nil, func(k, v []byte) (bool, error) {
		if len(out) > 0 && size+len(v) > maxBytes {
			return false, nil
		}
		e, err := repl.DecodeEntry(append([]byte(nil), v...))
		if err != nil {
			return false, fmt.Errorf("%w: log entry %x: %v", storage.ErrCorrupt, k, err)
		}
		if e.Index != next {
			return false, fmt.Errorf("%w: log hole: want %d, found %d", storage.ErrCorrupt, next, e.Index)
		}
		next++
		size += len(v)
		out = append(out, e)
		return true, nil
	})
	return out, err
}

// Get returns the entry at index i, if the log holds it.
func Get(tx storage.ReadTx, i uint64) (repl.Entry, bool, error) {
	v := tx.Get(storage.BucketLog, indexKey(i))
	if v == nil {
		return repl.Entry{}, false, nil
	}
	e, err := repl.DecodeEntry(append([]byte(nil), v...))
	return e, err == nil, err
}

// Trim deletes the oldest entries that r lets go, at most limit of
// them (so one transaction stays small), as of now (unix ns). It returns how
// many it deleted.
func Trim(tx storage.WriteTx, r repl.Retention, now int64, limit int) (int, error) {
	_, last, err := Bounds(tx)
	if err != nil || last == 0 {
		return 0, err
	}
	var total int64
	if r.MaxBytes > 0 {
		err = tx.Scan(storage.BucketLog, nil, nil, func(_, v []byte) (bool, error) {
			total += int64(len(v))
			return true, nil
		})
		if err != nil {
			return 0, err
		}
	}
	var doomed [][]byte
	err = tx.Scan(storage.BucketLog, nil, nil, func(k, v []byte) (bool, error) {
		i := binary.BigEndian.Uint64(k)
		if len(doomed) >= limit || i+r.KeepLast > last {
			return false, nil
		}
		e, err := repl.DecodeEntry(v)
		if err != nil {
			return false, err
		}
		tooBig := r.MaxBytes > 0 && total > r.MaxBytes
		tooOld := r.MaxAge > 0 && now-e.Time > r.MaxAge
		if !tooBig && !tooOld {
			return false, nil
		}
		total -= int64(len(v))
		doomed = append(doomed, append([]byte(nil), k...))
		return true, nil
	})
	if err != nil {
		return 0, err
	}
	for _, k := range doomed {
		if err := tx.Delete(storage.BucketLog, k); err != nil {
			return 0, err
		}
	}
	return len(doomed), nil
}

// Clear deletes the whole log (after a snapshot install).
func Clear(tx storage.WriteTx) error {
	var keys [][]byte
	err := tx.Scan(storage.BucketLog, nil, nil, func(k, _ []byte) (bool, error) {
		keys = append(keys, append([]byte(nil), k...))
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := tx.Delete(storage.BucketLog, k); err != nil {
			return err
		}
	}
	return nil
}
