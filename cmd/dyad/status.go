package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/dyad-db/dyad/internal/api"
)

// statusFlags are dyad status's flags; the TLS and output flags carry
// etcdctl's names.
type statusFlags struct {
	endpoints        string
	timeout          time.Duration
	cacert, cert     string
	key              string
	insecureSkipVeri bool
	writeOut         string
}

// nodeStatus is one endpoint's line (and its -w json object).
type nodeStatus struct {
	Endpoint string `json:"endpoint"`
	// From etcd's Status RPC.
	MemberID string   `json:"memberID,omitempty"`
	Leader   string   `json:"leader,omitempty"`
	Term     uint64   `json:"term"`
	Index    uint64   `json:"index"`
	Revision int64    `json:"revision"`
	DBSize   int64    `json:"dbSize"`
	Errors   []string `json:"errors,omitempty"`
	// From dyad's Pair status (absent from a server that does not have it).
	Role                 string  `json:"role,omitempty"`
	Sync                 *bool   `json:"sync,omitempty"`
	PeerAlive            *bool   `json:"peerAlive,omitempty"`
	LagRevisions         *int64  `json:"lagRevisions,omitempty"`
	PeerRoundTripSeconds float64 `json:"peerRoundTripSeconds,omitempty"`
	RoundTripAgeSeconds  float64 `json:"roundTripAgeSeconds,omitempty"`
	// Protocols: the replication protocol versions the node speaks;
	// Protocol: the one the pair speaks (0: none yet); ProtocolRefused:
	// why the node refuses its peer (version skew).
	Protocols       string `json:"protocols,omitempty"`
	Protocol        int    `json:"protocol,omitempty"`
	ProtocolRefused string `json:"protocolRefused,omitempty"`
	// Unreachable: why the endpoint did not answer.
	Unreachable string `json:"unreachable,omitempty"`
}

// statusCmd shows both zones at a glance, from the etcd Status RPC of each
// endpoint (the same data "etcdctl endpoint status" shows) and dyad's own
// replication status.
func statusCmd() *cobra.Command {
	f := &statusFlags{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show both zones of a pair: who leads, sync or solo, lag, round trip, revisions",
		Long: `status asks every endpoint for its etcd Status and its replication state and
prints one line per node: the role it reports (leading, following the other
node, or without a primary), whether the pair replicates synchronously as
that node sees it (SYNC: sync, solo, waiting; single for a node without a
peer), how many revisions the peer (or this replica) is behind, the newest
replication round trip the node timed (a primary times them) and how long
ago, its epoch term, applied log index, visible revision, data size and
errors (alarms, or why a node waits for an operator). A node that does not
answer is shown as unreachable.

During a rolling restart, wait until both nodes show SYNC "sync" before
restarting the next one.

For a TLS client port, give https:// endpoints and etcdctl's --cacert, and
--cert/--key when the port requires client certificates.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runStatus(cmd.Context(), cmd.OutOrStdout(), f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.endpoints, "endpoints", "127.0.0.1:2379,127.0.0.1:22379", "Comma-separated client endpoints of the nodes (https:// for TLS).")
	fl.DurationVar(&f.timeout, "timeout", 3*time.Second, "Per-endpoint timeout.")
	fl.StringVar(&f.cacert, "cacert", "", "Verify the servers' certificates with this CA bundle (TLS).")
	fl.StringVar(&f.cert, "cert", "", "Client certificate, for client ports that require one.")
	fl.StringVar(&f.key, "key", "", "The client certificate's key.")
	fl.BoolVar(&f.insecureSkipVeri, "insecure-skip-tls-verify", false, "Do not verify the servers' certificates (TLS).")
	fl.StringVarP(&f.writeOut, "write-out", "w", "table", "Output format: table or json.")
	return cmd
}

func runStatus(ctx context.Context, w io.Writer, f *statusFlags) error {
	if f.writeOut != "table" && f.writeOut != "json" {
		return fmt.Errorf("--write-out %q: want table or json", f.writeOut)
	}
	if (f.cert == "") != (f.key == "") {
		return errors.New("--cert and --key go together")
	}
	var nodes []nodeStatus
	bad := 0
	for _, ep := range strings.Split(f.endpoints, ",") {
		ep = strings.TrimSpace(ep)
		if ep == "" {
			continue
		}
		ns, err := endpointStatus(ctx, ep, f)
		if err != nil {
			bad++
			ns = nodeStatus{Endpoint: ep, Unreachable: err.Error()}
		}
		nodes = append(nodes, ns)
	}
	if f.writeOut == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(nodes); err != nil {
			return err
		}
	} else {
		writeStatusTable(w, nodes)
	}
	if bad > 0 {
		return fmt.Errorf("%d endpoint(s) unreachable", bad)
	}
	return nil
}

func writeStatusTable(w io.Writer, nodes []nodeStatus) {
	out := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(out, "ENDPOINT\tMEMBER\tROLE\tSYNC\tLAG\tPEER RTT\tPROTOCOL\tTERM\tINDEX\tREVISION\tDB SIZE\tERRORS")
	for _, n := range nodes {
		if n.Unreachable != "" {
			fmt.Fprintf(out, "%s\t-\tunreachable\t-\t-\t-\t-\t-\t-\t-\t-\t%s\n", n.Endpoint, n.Unreachable)
			continue
		}
		role := "no primary"
		switch {
		case n.Leader == n.MemberID:
			role = "leading"
		case n.Leader != "":
			role = "replica of " + n.Leader
		}
		sync, lag, rtt := "-", "-", "-"
		if n.Sync != nil {
			sync = syncWord(n)
		}
		if n.LagRevisions != nil {
			lag = fmt.Sprint(*n.LagRevisions)
		}
		if n.PeerRoundTripSeconds > 0 {
			rtt = fmt.Sprintf("%s (%s ago)", fmtSeconds(n.PeerRoundTripSeconds), fmtSeconds(n.RoundTripAgeSeconds))
		}
		proto, errs := "-", n.Errors
		switch {
		case n.ProtocolRefused != "":
			proto = "refused (speaks " + n.Protocols + ")"
			errs = append(errs[:len(errs):len(errs)], "peer refused: "+n.ProtocolRefused)
		case n.Protocol > 0:
			proto = fmt.Sprintf("%d (speaks %s)", n.Protocol, n.Protocols)
		case n.Protocols != "":
			proto = "speaks " + n.Protocols
		}
		fmt.Fprintf(out, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", n.Endpoint, n.MemberID, role, sync, lag, rtt, proto,
			n.Term, n.Index, n.Revision, n.DBSize, strings.Join(errs, "; "))
	}
	out.Flush()
}

// syncWord is the SYNC column: sync while the pair replicates
// synchronously, else what the node does instead.
func syncWord(n nodeStatus) string {
	switch {
	case *n.Sync:
		return "sync"
	case n.Role == "solo" || n.Role == "single":
		return n.Role
	case n.Role == "primary":
		return "primary, replica not acking"
	}
	return n.Role
}

func fmtSeconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

func statusClientConfig(ep string, f *statusFlags) (clientv3.Config, error) {
	cfg := clientv3.Config{Endpoints: []string{ep}, DialTimeout: f.timeout, Logger: zap.NewNop()}
	if f.cacert == "" && f.cert == "" && !f.insecureSkipVeri && !strings.HasPrefix(ep, "https://") {
		return cfg, nil
	}
	info := transport.TLSInfo{TrustedCAFile: f.cacert, CertFile: f.cert, KeyFile: f.key, InsecureSkipVerify: f.insecureSkipVeri}
	tc, err := info.ClientConfig()
	if err != nil {
		return cfg, fmt.Errorf("TLS: %w", err)
	}
	cfg.TLS = tc
	return cfg, nil
}

func endpointStatus(ctx context.Context, ep string, f *statusFlags) (nodeStatus, error) {
	cfg, err := statusClientConfig(ep, f)
	if err != nil {
		return nodeStatus{}, err
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nodeStatus{}, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	st, err := cli.Status(ctx, ep)
	if err != nil {
		return nodeStatus{}, err
	}
	ns := nodeStatus{Endpoint: ep, MemberID: fmt.Sprintf("%x", st.Header.MemberId), Term: st.RaftTerm, Index: st.RaftIndex,
		Revision: st.Header.Revision, DBSize: st.DbSize, Errors: st.Errors}
	if st.Leader != 0 {
		ns.Leader = fmt.Sprintf("%x", st.Leader)
	}
	var ps structpb.Struct
	if err := cli.ActiveConnection().Invoke(ctx, api.PairStatusMethod, &emptypb.Empty{}, &ps); err != nil {
		// An etcd, or an older dyad: the etcd columns only.
		return ns, nil
	}
	fields := ps.GetFields()
	ns.Role = fields["role"].GetStringValue()
	sync, alive := fields["sync"].GetBoolValue(), fields["peerAlive"].GetBoolValue()
	lag := int64(fields["lagRevisions"].GetNumberValue())
	ns.Sync, ns.PeerAlive, ns.LagRevisions = &sync, &alive, &lag
	ns.PeerRoundTripSeconds = fields["peerRoundTripSeconds"].GetNumberValue()
	ns.RoundTripAgeSeconds = fields["roundTripAgeSeconds"].GetNumberValue()
	ns.Protocols = fields["protocols"].GetStringValue()
	ns.Protocol = int(fields["protocol"].GetNumberValue())
	ns.ProtocolRefused = fields["protocolRefused"].GetStringValue()
	return ns, nil
}
