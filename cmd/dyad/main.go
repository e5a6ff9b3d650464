// Command dyad is a two-zone cluster state store that speaks the etcd v3 API.
// This file only wires subcommands; the work happens in internal/.
package main

import (
	"fmt"
	"os"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/dyad-db/dyad/internal/server"
)

// Version is dyad's own release version.
const Version = "0.1.0"

func main() {
	root := &cobra.Command{
		Use:   "dyad",
		Short: "dyad: an etcd-compatible state store for Kubernetes sites with two zones",
		Long: `dyad serves the etcd v3 gRPC API to unmodified clients (kube-apiserver,
k3s --datastore-endpoint, etcdctl, clientv3). One node alone is a complete
single-node store; two nodes, one per zone, replicate over DDS.

Run "dyad serve --help" for the server's flags.`,
		SilenceUsage: true,
	}
	root.AddCommand(serveCmd(), versionCmd(), benchCmd(), snapshotCmd(), statusCmd(), forcePrimaryCmd(), resolveCmd(), perfCmd(), certsCmd())
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print dyad's version and the etcd API version it reports",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "dyad Version: %s\netcd API Version: %s\nGo Version: %s\nGo OS/Arch: %s/%s\n",
				Version, server.EtcdVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
	}
}
