package replstore

import "github.com/dyad-db/dyad/internal/storage"

// metaFollowed is the meta key of the newest term of a leader this node
// followed (repl.HardState.Followed). It is dyad's own: etcd tools ignore
// it.
const metaFollowed = "dyad_followed_term"

// PutFollowed raises the durable term followed to t (in the caller's
// transaction, which must commit before anything is acknowledged to that
// leader). A lower t than the stored one changes nothing.
func PutFollowed(tx storage.WriteTx, t uint64) error {
	if t <= Followed(tx) {
		return nil
	}
	return tx.Put(storage.BucketMeta, []byte(metaFollowed), storage.PutUint64(t))
}

// Followed returns the durable term followed (0: none).
func Followed(tx storage.ReadTx) uint64 {
	return storage.Uint64(tx.Get(storage.BucketMeta, []byte(metaFollowed)))
}
