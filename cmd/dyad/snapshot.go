package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/storage"
)

func snapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Work with etcd-format snapshots (take one with: etcdctl snapshot save)",
	}
	var dataDir string
	restore := &cobra.Command{
		Use:   "restore SNAPSHOT_FILE",
		Short: "Create a data dir from an etcd-format snapshot (from dyad or from etcd 3.5/3.6)",
		Long: `restore checks the snapshot's SHA-256 trailer, then installs it as the data
file of a new data dir. The snapshot may come from dyad or from a real etcd
(etcdctl snapshot save): this is the migration path from etcd to dyad. Start
the node afterwards with "dyad serve --data-dir DIR".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dataDir == "" {
				return fmt.Errorf("--data-dir is required")
			}
			dst := server.DBPath(dataDir)
			if err := storage.RestoreSnapshot(args[0], dst); err != nil {
				return err
			}
			abs, _ := filepath.Abs(dataDir)
			fmt.Fprintf(cmd.OutOrStdout(), "restored %s into %s\n", args[0], abs)
			return nil
		},
	}
	restore.Flags().StringVar(&dataDir, "data-dir", "", "Path to the new data directory (must not hold a data file yet).")
	cmd.AddCommand(restore)
	return cmd
}
