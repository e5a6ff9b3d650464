package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// statusCmd shows both zones at a glance, from the etcd Status RPC of each
// endpoint (the same data "etcdctl endpoint status" shows).
func statusCmd() *cobra.Command {
	var endpoints string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show both zones of a pair: who leads, revisions, log positions",
		Long: `status asks every endpoint for its etcd Status and prints one line per node:
the role it reports (leading, following the other node, or without a
primary), its epoch term, applied log index, visible revision, data size and
alarms. A node that does not answer is shown as unreachable.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(out, "ENDPOINT\tMEMBER\tROLE\tTERM\tINDEX\tREVISION\tDB SIZE\tERRORS")
			bad := 0
			for _, ep := range strings.Split(endpoints, ",") {
				ep = strings.TrimSpace(ep)
				if ep == "" {
					continue
				}
				line, err := endpointStatus(cmd.Context(), ep, timeout)
				if err != nil {
					bad++
					fmt.Fprintf(out, "%s\t-\tunreachable\t-\t-\t-\t-\t%v\n", ep, err)
					continue
				}
				fmt.Fprintln(out, line)
			}
			out.Flush()
			if bad > 0 {
				return fmt.Errorf("%d endpoint(s) unreachable", bad)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&endpoints, "endpoints", "127.0.0.1:2379,127.0.0.1:22379", "Comma-separated client endpoints of the nodes.")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "Per-endpoint timeout.")
	return cmd
}

func endpointStatus(ctx context.Context, ep string, timeout time.Duration) (string, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: timeout, Logger: zap.NewNop()})
	if err != nil {
		return "", err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := cli.Status(ctx, ep)
	if err != nil {
		return "", err
	}
	member := st.Header.MemberId
	role := "no primary"
	switch {
	case st.Leader == member:
		role = "leading"
	case st.Leader != 0:
		role = fmt.Sprintf("replica of %x", st.Leader)
	}
	return fmt.Sprintf("%s\t%x\t%s\t%d\t%d\t%d\t%d\t%s", ep, member, role, st.RaftTerm, st.RaftIndex,
		st.Header.Revision, st.DbSize, strings.Join(st.Errors, "; ")), nil
}
