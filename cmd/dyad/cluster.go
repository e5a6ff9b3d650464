package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/dyad-db/dyad/internal/certs"
	"github.com/dyad-db/dyad/internal/dds"
	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
)

// clusterFlags configure the two-zone pair. Without --initial-cluster the
// node runs alone.
type clusterFlags struct {
	initialCluster      string
	initialClusterState string
	initialClusterToken string
	ddsInterface        string
	ddsDomain           uint32
	ddsConfig           string
	ddsWaitSet          bool
	peerLease           time.Duration
	ackTimeout          time.Duration
	preferredZone       string
	splitBrainPolicy    string
	fenceCommand        string
	fenceTimeout        optDuration
	logRetentionBytes   int64
	logRetentionAge     time.Duration
	minProtocol         uint16
	sec                 peerSecurityFlags
}

// peerSecurityFlags turn on DDS Security for replication. Names follow
// etcd's --peer-* TLS flags where the meaning carries over: the peer
// certificate is the DDS identity, the peer trusted CA is the identity CA
// (and, unless --dds-permissions-ca-file says otherwise, the CA that signed
// the governance and permissions documents).
type peerSecurityFlags struct {
	certFile, keyFile, trustedCAFile string
	governanceFile, permissionsFile  string
	permissionsCAFile, pluginDir     string
}

func (s *peerSecurityFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&s.certFile, "peer-cert-file", "", "DDS Security: this node's identity certificate (dyad certs: NAME-peer.crt). Setting any --peer-*/--dds-*-file flag turns DDS Security on, and then all are required.")
	fl.StringVar(&s.keyFile, "peer-key-file", "", "DDS Security: the identity's private key (NAME-peer.key).")
	fl.StringVar(&s.trustedCAFile, "peer-trusted-ca-file", "", "DDS Security: the CA that signs both nodes' identities (ca.crt).")
	fl.StringVar(&s.governanceFile, "dds-governance-file", "", "DDS Security: the S/MIME-signed governance document (governance.p7s).")
	fl.StringVar(&s.permissionsFile, "dds-permissions-file", "", "DDS Security: the S/MIME-signed permissions document (permissions.p7s).")
	fl.StringVar(&s.permissionsCAFile, "dds-permissions-ca-file", "", "DDS Security: the CA that signed governance and permissions (default: --peer-trusted-ca-file).")
	fl.StringVar(&s.pluginDir, "dds-security-plugin-dir", dds.DefaultSecurityPluginDir, "Directory of Cyclone's libdds_security_{auth,ac,crypto}.so.")
}

// config returns the DDS Security configuration, or nil when no flag asks
// for it. The signed documents are checked here against the permissions CA
// so that a wrong file is a clear start-up error rather than Cyclone's
// opaque failure to create the participant.
func (s *peerSecurityFlags) config() (*dds.Security, error) {
	if *s == (peerSecurityFlags{pluginDir: s.pluginDir}) {
		return nil, nil
	}
	sec := &dds.Security{
		IdentityCA: s.trustedCAFile, IdentityCert: s.certFile, PrivateKey: s.keyFile,
		PermissionsCA: s.permissionsCAFile, Governance: s.governanceFile, Permissions: s.permissionsFile,
		PluginDir: s.pluginDir,
	}
	if sec.PermissionsCA == "" {
		sec.PermissionsCA = s.trustedCAFile
	}
	for _, f := range []struct{ flag, val string }{
		{"--peer-cert-file", s.certFile}, {"--peer-key-file", s.keyFile}, {"--peer-trusted-ca-file", s.trustedCAFile},
		{"--dds-governance-file", s.governanceFile}, {"--dds-permissions-file", s.permissionsFile},
	} {
		if f.val == "" {
			return nil, fmt.Errorf("DDS Security needs %s (with --peer-cert-file, --peer-key-file, --peer-trusted-ca-file, --dds-governance-file and --dds-permissions-file)", f.flag)
		}
	}
	if err := sec.Check(); err != nil {
		return nil, err
	}
	if _, err := tls.LoadX509KeyPair(s.certFile, s.keyFile); err != nil {
		return nil, fmt.Errorf("--peer-cert-file/--peer-key-file: %w", err)
	}
	if err := certs.VerifySMIMEFile(s.governanceFile, sec.PermissionsCA); err != nil {
		return nil, fmt.Errorf("--dds-governance-file: %w", err)
	}
	if err := certs.VerifySMIMEFile(s.permissionsFile, sec.PermissionsCA); err != nil {
		return nil, fmt.Errorf("--dds-permissions-file: %w", err)
	}
	return sec, nil
}

func (c *clusterFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&c.initialCluster, "initial-cluster", "", "The pair, in etcd's form: \"a=http://10.0.0.1:2380,b=http://10.0.0.2:2380\". --name picks this node; the other host is the DDS unicast peer (the port is not used: DDS has its own). Empty, or only this node (kubeadm's single-member form): a single node.")
	fl.StringVar(&c.initialClusterState, "initial-cluster-state", "new", "\"new\": this node may start the pair when its data dir is empty (the --preferred-zone node, or the first member listed). \"existing\": an empty node joins as the replica and never starts a pair (replacing a destroyed node).")
	fl.StringVar(&c.initialClusterToken, "initial-cluster-token", "dyad-cluster", "Token mixed into the cluster ID; both nodes need the same one. A node refuses a data dir, and ignores a peer, of another cluster.")
	fl.StringVar(&c.ddsInterface, "dds-interface", "", "Network interface (name) for DDS traffic. Empty: \"lo\" when this node's --initial-cluster host is a loopback address, else Cyclone's choice.")
	fl.Uint32Var(&c.ddsDomain, "dds-domain", 0, "DDS domain ID (0-232). Both nodes need the same one.")
	fl.BoolVar(&c.ddsWaitSet, "dds-waitset", true, "The replication loop waits for the peer's messages in Cyclone DDS (a waitset, one call into C) instead of being woken by Cyclone's receive thread through Go (docs/ARCHITECTURE.md). false: the receive thread notifies the loop.")
	fl.StringVar(&c.ddsConfig, "dds-config", "", "Extra Cyclone DDS XML (inside <Domain>) for experts, or @FILE to read it from a file.")
	fl.DurationVar(&c.peerLease, "peer-lease", time.Second, "Failure detection lease: a peer silent this long (on this node's own running time) is dead, and leases between the nodes last this long.")
	fl.DurationVar(&c.ackTimeout, "ack-timeout", 2*time.Second, "A replica that leaves an entry unacknowledged this long is declared dead (the primary then goes solo).")
	fl.StringVar(&c.preferredZone, "preferred-zone", "", "Name of the member in the preferred zone: it starts a new pair and wins split brain (with --split-brain-policy preferred). Default: the first member of --initial-cluster.")
	fl.StringVar(&c.splitBrainPolicy, "split-brain-policy", "preferred", "After a split brain in which both sides acknowledged writes alone, the preferred zone's history wins and the other node's diverged writes become conflict records (see \"dyad resolve\"). \"preferred\": the other node then resyncs and serves again at once. \"manual\": it stops serving until an operator runs \"dyad resolve accept\" on it.")
	fl.StringVar(&c.fenceCommand, "fence-command", "", "Command run (through /bin/sh) before this node promotes itself; if it fails there is no promotion. Empty: no fencing.")
	fl.Var(&c.fenceTimeout, "fence-timeout", "How long --fence-command may run before it is killed and counts as failed (no promotion). IPMI/Redfish power-off can take 10-60s; the node keeps heartbeating and stays replica meanwhile. Default: 5 × --peer-lease.")
	fl.Uint16Var(&c.minProtocol, "min-protocol-version", 0, fmt.Sprintf("Lowest replication protocol version this node speaks (this build: %v). A peer that speaks none from here up is refused, with an error in the log, dyad_peer_protocol_mismatch_total and dyad status. Raise it once both nodes run builds that speak it, so that a node rolled back too far is refused instead of paired (docs/OPERATIONS.md, version skew). 0: the build's lowest.", repl.Supported()))
	c.sec.register(fl)
	fl.Int64Var(&c.logRetentionBytes, "log-retention-bytes", 1<<30, "Keep at most this many bytes of replication log for catch-up.")
	fl.DurationVar(&c.logRetentionAge, "log-retention-age", 2*time.Hour, "Trim replication log entries older than this (the newest 10000 always stay). A zone away for less than this catches up from the log, not from a snapshot.")
}

type member struct {
	name string
	host string
	url  string // as given, for MemberList's peer URLs
}

// eachNameValue calls fn, in order, with the name and value of every
// element of s, a comma-separated "name=value" list as etcd's flags take
// them, skipping empty elements. It stops at fn's first error, and at an
// element with no '=' or an empty name, reported as not of the form want.
func eachNameValue(s, want string, fn func(name, value string) error) error {
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, value, ok := strings.Cut(part, "=")
		if !ok || name == "" {
			return fmt.Errorf("%q: want %s", part, want)
		}
		if err := fn(name, value); err != nil {
			return err
		}
	}
	return nil
}

// parseInitialCluster reads etcd's "name=url,..." form.
func parseInitialCluster(s string) ([]member, error) {
	var out []member
	seen := map[string]bool{}
	err := eachNameValue(s, "name=url", func(name, raw string) error {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return fmt.Errorf("%q: bad URL %q", name, raw)
		}
		if seen[name] {
			return fmt.Errorf("member %q listed twice", name)
		}
		seen[name] = true
		out = append(out, member{name: name, host: u.Hostname(), url: raw})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) != 1 && len(out) != 2 {
		return nil, fmt.Errorf("a dyad pair has exactly two members (or one: this node alone), got %d", len(out))
	}
	return out, nil
}

// idOf hashes its parts into a non-zero ID.
func idOf(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	if v := h.Sum64(); v != 0 {
		return v
	}
	return 1
}

// pairPlan is what the cluster flags resolve to.
type pairPlan struct {
	self, peer member
	clusterID  uint64
	memberID   uint64
	peerID     uint64 // the peer's member ID, derived as memberID is
	repl       server.ReplConfig
	iface      string
	extraXML   string
	// securityXML is the Cyclone <Security> element, empty without DDS
	// Security.
	securityXML string
}

func (c *clusterFlags) plan(name string) (*pairPlan, error) {
	if c.initialCluster == "" {
		return nil, nil
	}
	ms, err := parseInitialCluster(c.initialCluster)
	if err != nil {
		return nil, fmt.Errorf("--initial-cluster: %w", err)
	}
	if len(ms) == 1 {
		// kubeadm's form for the first control-plane node: this node alone.
		if ms[0].name != name {
			return nil, fmt.Errorf("--name %q is not in --initial-cluster", name)
		}
		return nil, nil
	}
	p := &pairPlan{}
	switch name {
	case ms[0].name:
		p.self, p.peer = ms[0], ms[1]
	case ms[1].name:
		p.self, p.peer = ms[1], ms[0]
	default:
		return nil, fmt.Errorf("--name %q is not in --initial-cluster", name)
	}
	switch c.initialClusterState {
	case "new", "existing":
	default:
		return nil, fmt.Errorf("--initial-cluster-state: %q is neither new nor existing", c.initialClusterState)
	}
	switch c.splitBrainPolicy {
	case "preferred", "manual":
	default:
		return nil, fmt.Errorf("--split-brain-policy: %q is neither preferred nor manual", c.splitBrainPolicy)
	}
	if c.peerLease < 100*time.Millisecond {
		return nil, errors.New("--peer-lease: at least 100ms")
	}
	if c.ackTimeout < c.peerLease {
		return nil, errors.New("--ack-timeout: at least --peer-lease")
	}
	if own := repl.Supported(); c.minProtocol != 0 && !own.Speaks(c.minProtocol) {
		return nil, fmt.Errorf("--min-protocol-version %d: this build speaks protocol versions %v", c.minProtocol, own)
	}
	if c.fenceTimeout.set && c.fenceTimeout.d <= 0 {
		return nil, errors.New("--fence-timeout: must be greater than 0")
	}
	preferred := c.preferredZone
	if preferred == "" {
		preferred = ms[0].name
	}
	if preferred != ms[0].name && preferred != ms[1].name {
		return nil, fmt.Errorf("--preferred-zone %q is not in --initial-cluster", preferred)
	}
	names := []string{ms[0].name + "=" + ms[0].host, ms[1].name + "=" + ms[1].host}
	sort.Strings(names)
	p.clusterID = idOf(append([]string{c.initialClusterToken}, names...)...)
	p.memberID = idOf(fmt.Sprint(p.clusterID), p.self.name)
	p.peerID = idOf(fmt.Sprint(p.clusterID), p.peer.name)
	p.repl = server.ReplConfig{
		Lease:            c.peerLease,
		AckTimeout:       c.ackTimeout,
		Bootstrap:        c.initialClusterState == "new" && preferred == p.self.name,
		Preferred:        preferred == p.self.name,
		ManualSplitBrain: c.splitBrainPolicy == "manual",
		MinProtocol:      c.minProtocol,
		Retention:        repl.Retention{MaxBytes: c.logRetentionBytes, MaxAge: int64(c.logRetentionAge), KeepLast: 10000},
	}
	if c.fenceCommand != "" {
		p.repl.FenceTimeout = 5 * c.peerLease
		if c.fenceTimeout.set {
			p.repl.FenceTimeout = c.fenceTimeout.d
		}
		cmdline := c.fenceCommand
		p.repl.Fence = func(ctx context.Context) error { return runFence(ctx, cmdline) }
	}
	p.iface = c.ddsInterface
	if ip := net.ParseIP(p.self.host); p.iface == "" && ip != nil && ip.IsLoopback() {
		p.iface = "lo"
	}
	sec, err := c.sec.config()
	if err != nil {
		return nil, err
	}
	if sec != nil {
		if c.ddsDomain > 230 {
			return nil, fmt.Errorf("--dds-domain %d: DDS Security governs domains 0-230 only", c.ddsDomain)
		}
		if p.securityXML, err = sec.XML(); err != nil {
			return nil, err
		}
	}
	p.extraXML = c.ddsConfig
	if strings.HasPrefix(p.extraXML, "@") {
		b, err := os.ReadFile(p.extraXML[1:])
		if err != nil {
			return nil, fmt.Errorf("--dds-config: %w", err)
		}
		p.extraXML = string(b)
	}
	return p, nil
}

// optDuration is a duration flag whose default is computed from other
// flags (an empty DefValue): set tells whether it was given at all, so
// that an explicit 0 can be refused rather than taken as "default".
type optDuration struct {
	d   time.Duration
	set bool
}

func (o *optDuration) String() string {
	if !o.set {
		return ""
	}
	return o.d.String()
}

// Set parses a duration; "" (the default, as applyConfigFile restores it)
// makes the flag unset again.
func (o *optDuration) Set(v string) error {
	if v == "" {
		*o = optDuration{}
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	*o = optDuration{d: d, set: true}
	return nil
}

func (o *optDuration) Type() string { return "duration" }
