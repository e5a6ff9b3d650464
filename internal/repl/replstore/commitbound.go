package replstore

import "github.com/dyad-db/dyad/internal/storage"

// metaCommitBound is the meta key of a lower bound of the commit index
// (repl.RestartState.Commit), written with each batch of entries in the
// same transaction as the batch, so it costs no sync of its own. It is
// dyad's own: etcd tools ignore it. A data file without it (written by a
// build that did not keep it) restarts as before: everything it holds
// counts as committed.
const metaCommitBound = "dyad_commit_bound"

// PutCommitBound records c as the commit bound (in the caller's
// transaction). The caller passes a commit index it knew, within the log
// this transaction leaves (a truncation lowers it to what it keeps).
func PutCommitBound(tx storage.WriteTx, c uint64) error {
	return tx.Put(storage.BucketMeta, []byte(metaCommitBound), storage.PutUint64(c))
}

// CommitBound returns the durable commit bound (0: none).
func CommitBound(tx storage.ReadTx) uint64 {
	return storage.Uint64(tx.Get(storage.BucketMeta, []byte(metaCommitBound)))
}
