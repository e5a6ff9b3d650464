// Command dyad is a two-zone cluster state store that speaks the etcd v3 API.
// This file only wires subcommands; the work happens in internal/.
package main

import (
	"os"
	"strings"

	"github.com/spf13/cobra"
)

func main() {
	if err := rootCmd().Execute(); err != nil {
		os.Exit(1)
	}
}

func rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "dyad",
		Short: "dyad: an etcd-compatible state store for Kubernetes sites with two zones",
		Long: `dyad serves the etcd v3 gRPC API to unmodified clients (kube-apiserver,
k3s --datastore-endpoint, etcdctl, clientv3). One node alone is a complete
single-node store; two nodes, one per zone, replicate over DDS.

Run "dyad serve --help" for the server's flags.`,
		SilenceUsage: true,
	}
	// dyad --version prints what dyad version prints, as etcd --version does.
	var sb strings.Builder
	readBuildInfo().write(&sb)
	root.Version = readBuildInfo().Short()
	root.SetVersionTemplate(sb.String())
	root.AddCommand(serveCmd(), versionCmd(), benchCmd(), snapshotCmd(), statusCmd(), forcePrimaryCmd(), resolveCmd(), perfCmd(), certsCmd())
	return root
}
