package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dyad-db/dyad/internal/certs"
)

func certsCmd() *cobra.Command {
	var (
		dir, org       string
		nodes, clients []string
		topics         []string
		domain         int
		validity       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Create development TLS and DDS Security material for a secure pair",
		Long: `certs writes into --dir a development CA (reused if ca.crt and ca.key are
already there), and for every --node NAME=HOST[,HOST...]:

  NAME.crt, NAME.key            TLS server certificate (SANs: the HOSTs and
                                127.0.0.1, ::1, localhost) for --cert-file/--key-file
  NAME-peer.crt, NAME-peer.key  DDS Security identity (subject CN=NAME,O=ORG)
                                for --peer-cert-file/--peer-key-file
  NAME/                         everything that node reads and nothing else (no
                                CA key), under the names deploy/ and kubeadm use:
                                server.crt, server.key, peer.crt, peer.key,
                                ca.crt, governance.p7s, permissions.p7s. Copy it
                                to /etc/dyad/pki (systemd) or
                                /etc/kubernetes/pki/dyad (static pod) on that host.

for every --client NAME a TLS client certificate NAME.crt/NAME.key (for
kube-apiserver's --etcd-certfile/--etcd-keyfile or etcdctl's --cert/--key),
and the S/MIME documents signed by the CA:

  governance.p7s    authentication required, discovery, liveliness and
                    topic data encrypted, access control on    (--dds-governance-file)
  permissions.p7s   each node may publish and subscribe the
                    replication topics, nothing else           (--dds-permissions-file)

ca.crt is --trusted-ca-file and --peer-trusted-ca-file. Keys are ECDSA P-256.
This is development material: keep ca.key offline in production.`,
		Example: `  dyad certs --dir pki --node a=10.0.1.10,a.example --node b=10.0.2.10 --client kube-apiserver`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := certs.Plan{Dir: dir, Clients: clients, Organization: org, Domain: domain, Topics: topics, Now: time.Now(), Validity: validity}
			for _, n := range nodes {
				name, hosts, ok := strings.Cut(n, "=")
				if !ok || hosts == "" {
					return fmt.Errorf("--node %q: want NAME=HOST[,HOST...]", n)
				}
				p.Nodes = append(p.Nodes, certs.Node{Name: name, Hosts: strings.Split(hosts, ",")})
			}
			wrote, err := certs.Write(p)
			for _, w := range wrote {
				fmt.Fprintln(cmd.OutOrStdout(), w)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "pki", "Directory to write into (created if missing).")
	f.StringArrayVar(&nodes, "node", nil, "A node and the names/IPs of its client URLs: NAME=HOST[,HOST...]. Repeat for each node.")
	f.StringArrayVar(&clients, "client", []string{"client"}, "Common name of a TLS client certificate to make. Repeatable.")
	f.StringVar(&org, "org", "dyad", "Organization (O) of every subject.")
	f.IntVar(&domain, "dds-domain", certs.AnyDomain, "DDS domain the governance and permissions cover (-1: every domain).")
	f.StringArrayVar(&topics, "dds-topic", []string{"dyad_*"}, "Topic pattern the nodes may publish and subscribe. Repeatable.")
	f.DurationVar(&validity, "validity", 365*24*time.Hour, "Validity of certificates and grants (a new CA gets ten times this).")
	return cmd
}
