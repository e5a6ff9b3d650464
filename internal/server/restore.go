package server

import (
	"github.com/dyad-db/dyad/internal/storage"
)

// AdoptIdentity makes the data file of the stopped node at dataDir belong
// to member of cluster. A snapshot of a dyad node carries that node's
// identity; restored on the other zone's node as it is, the restored node
// would take itself for its own peer. Run it right after the restore,
// before the node's first start.
func AdoptIdentity(dataDir string, cluster, member uint64) error {
	if err := settleJournal(dataDir); err != nil {
		return err
	}
	be, err := storage.Open(DBPath(dataDir), storage.Options{})
	if err != nil {
		return err
	}
	defer be.Close()
	return be.Update(func(tx storage.WriteTx) error {
		if err := tx.Put(storage.BucketMeta, metaClusterID, storage.PutUint64(cluster)); err != nil {
			return err
		}
		return tx.Put(storage.BucketMeta, metaMemberID, storage.PutUint64(member))
	})
}
