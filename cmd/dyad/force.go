package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/dyad-db/dyad/internal/server"
)

// forcePrimaryCmd is the operator's override for a node that waits for a
// peer that will not come back.
func forcePrimaryCmd() *cobra.Command {
	var dataDir string
	cmd := &cobra.Command{
		Use:   "force-primary --data-dir DIR",
		Short: "Let a stopped node serve alone at its next start, accepting the loss of its peer's unseen writes",
		Long: `force-primary edits the data dir of a STOPPED node so that, when started
again, it leads alone if its peer is absent, instead of waiting for it.

Use it only when the peer zone is gone for good or for longer than you can
wait, and only on the node you decide should win: writes the peer
acknowledged alone and this node never received are then not part of the
pair's history (if the peer returns, they are found as split brain and kept
as conflict records, never merged silently). See docs/OPERATIONS.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return fmt.Errorf("--data-dir is required")
			}
			rec, err := server.ForcePrimary(dataDir)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: will lead alone at its next start (solo epoch %s from index %d)\n", dataDir, rec.Epoch, rec.Start)
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "Data directory of the stopped node.")
	return cmd
}
