package storage

import (
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// WalkSnapshot checks the SHA-256 trailer and the page structure of the
// etcd-format snapshot at path, then calls onBucket for every top-level
// bucket in name order and onKV for each of its entries in key order (a
// nested bucket's entry has a nil value). It returns the size of the
// database part. The slices passed are valid only during the call.
//
// This is the walk etcdutl snapshot status makes; what to compute from it
// (hash, revision, live keys) belongs to the caller, which knows the
// schema.
func WalkSnapshot(path string, onBucket func(name []byte) error, onKV func(k, v []byte) error) (size int64, err error) {
	if _, err := VerifySnapshot(path); err != nil {
		return 0, err
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %v", ErrCorrupt, path, err)
	}
	defer db.Close()
	// A page id past the end of the file faults inside the memory map: a
	// panic of this goroutine, recovered below, instead of a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %v", ErrCorrupt, path, r)
		}
	}()
	err = db.View(func(tx *bolt.Tx) error {
		var problems []string
		for e := range tx.Check() {
			problems = append(problems, e.Error())
		}
		if len(problems) > 0 {
			return fmt.Errorf("%w: %s: %s", ErrCorrupt, path, strings.Join(problems, "; "))
		}
		size = tx.Size()
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if err := onBucket(name); err != nil {
				return err
			}
			return b.ForEach(onKV)
		})
	})
	return size, err
}
