package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/storage"
)

func snapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save and restore etcd-format snapshots",
	}
	var dataDir, name, initialCluster, token string
	restore := &cobra.Command{
		Use:   "restore SNAPSHOT_FILE",
		Short: "Create a data dir from an etcd-format snapshot (from dyad or from etcd 3.5/3.6)",
		Long: `restore checks the snapshot's SHA-256 trailer, then installs it as the data
file of a new data dir. The snapshot may come from dyad or from a real etcd
(etcdctl snapshot save): this is the migration path from etcd to dyad. Start
the node afterwards with "dyad serve --data-dir DIR".

For a node of a pair, give the node's --name, --initial-cluster and
--initial-cluster-token (as etcdutl snapshot restore takes them, and as
serve will get them): the restored file then belongs to this node, even
when the snapshot was taken on the other zone's node. See "Restore a pair
from a snapshot" in docs/OPERATIONS.md.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dataDir == "" {
				return fmt.Errorf("--data-dir is required")
			}
			var plan *pairPlan
			if initialCluster != "" {
				// The pair's identity exactly as serve derives it; the
				// timing values only pass plan's checks.
				c := clusterFlags{initialCluster: initialCluster, initialClusterState: "existing", initialClusterToken: token,
					splitBrainPolicy: "preferred", peerLease: time.Second, ackTimeout: 2 * time.Second}
				var err error
				if plan, err = c.plan(name); err != nil {
					return err
				}
				if plan == nil {
					return fmt.Errorf("--initial-cluster %q names no pair: restore a single node without it", initialCluster)
				}
			}
			// A journal left in the data dir would be replayed over the
			// restored file at the first start: refuse it as RestoreSnapshot
			// refuses an existing data file.
			if _, err := os.Stat(server.JournalDir(dataDir)); err == nil {
				return fmt.Errorf("%s already holds a journal (%s): restore into a new data dir", dataDir, server.JournalDir(dataDir))
			}
			dst := server.DBPath(dataDir)
			if err := storage.RestoreSnapshot(args[0], dst); err != nil {
				return err
			}
			if plan != nil {
				if err := server.AdoptIdentity(dataDir, plan.clusterID, plan.memberID); err != nil {
					return err
				}
			}
			abs, _ := filepath.Abs(dataDir)
			fmt.Fprintf(cmd.OutOrStdout(), "restored %s into %s\n", args[0], abs)
			return nil
		},
	}
	restore.Flags().StringVar(&dataDir, "data-dir", "", "Path to the new data directory (must not hold a data file yet).")
	restore.Flags().StringVar(&name, "name", "default", "This node's --name (with --initial-cluster).")
	restore.Flags().StringVar(&initialCluster, "initial-cluster", "", "The pair, as serve's --initial-cluster: the restored file is made this node's (--name) of that pair. Empty: a single node; the file keeps the identity it has.")
	restore.Flags().StringVar(&token, "initial-cluster-token", "dyad-cluster", "The pair's --initial-cluster-token.")
	cmd.AddCommand(restore, snapshotSaveCmd(), snapshotStatusCmd())
	return cmd
}
