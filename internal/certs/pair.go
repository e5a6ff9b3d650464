package certs

import (
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"
)

// Node is one dyad node: its name (the --name of dyad serve) and the host
// names and IPs its client URLs are reached by.
type Node struct {
	Name  string
	Hosts []string
}

// Plan is what Write makes.
type Plan struct {
	// Dir receives the files. It is created if missing. A CA already in
	// Dir (ca.crt, ca.key) is reused, so nodes and clients can be added or
	// their certificates renewed without re-keying the other node.
	Dir   string
	Nodes []Node
	// Clients are the common names of TLS client certificates to make.
	Clients []string
	// Organization is the O of every subject (default "dyad").
	Organization string
	// Domain is the DDS domain the documents cover, or AnyDomain.
	Domain int
	// Topics are the topic patterns the permissions grant (default
	// "dyad_*", the replication topics).
	Topics []string
	// Partitions are the partition patterns granted; none: the default
	// partition only, which is all dyad uses.
	Partitions []string
	// Now and Validity bound every certificate and grant. A new CA is
	// valid for ten times Validity.
	Now      time.Time
	Validity time.Duration
}

// File names inside Plan.Dir.
const (
	CACertFile      = "ca.crt"
	CAKeyFile       = "ca.key"
	GovernanceFile  = "governance.p7s"
	PermissionsFile = "permissions.p7s"
)

// Names inside a node's own directory, Plan.Dir/NAME/. They are the names
// kubeadm gives etcd's files in /etc/kubernetes/pki/etcd/, and the paths
// deploy/systemd/dyad.service and deploy/kubernetes/dyad-static-pod.yaml
// read, so the directory is copied to the node's host as it is.
const (
	NodeServerCert = "server.crt"
	NodeServerKey  = "server.key"
	NodePeerCert   = "peer.crt"
	NodePeerKey    = "peer.key"
)

// LoopbackHosts are added to every node's server certificate: the apiserver
// and probes on a node's own host reach it on https://127.0.0.1:2379 (or
// [::1], or localhost).
func LoopbackHosts() []string { return []string{"127.0.0.1", "::1", "localhost"} }

// NodeDir is the directory holding everything one node reads and nothing
// else (no CA key): server and peer pairs, ca.crt, governance.p7s and
// permissions.p7s.
func NodeDir(dir, node string) string { return filepath.Join(dir, node) }

// NodeFiles are the paths of one node's material.
type NodeFiles struct {
	Cert, Key         string // TLS server certificate for --cert-file/--key-file
	PeerCert, PeerKey string // DDS identity for --peer-cert-file/--peer-key-file
}

// Files names a node's files in dir.
func Files(dir, node string) NodeFiles {
	return NodeFiles{
		Cert: filepath.Join(dir, node+".crt"), Key: filepath.Join(dir, node+".key"),
		PeerCert: filepath.Join(dir, node+"-peer.crt"), PeerKey: filepath.Join(dir, node+"-peer.key"),
	}
}

// validName keeps names safe as file names and inside subjects.
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

func (p *Plan) check() error {
	if p.Dir == "" {
		return errors.New("certs: no output directory")
	}
	if len(p.Nodes) == 0 {
		return errors.New("certs: at least one node is needed")
	}
	if p.Validity <= 0 {
		return errors.New("certs: validity must be positive")
	}
	if p.Domain != AnyDomain && (p.Domain < 0 || p.Domain > 230) {
		return fmt.Errorf("certs: DDS domain %d out of range 0..230 (DDS Security)", p.Domain)
	}
	seen := map[string]string{}
	name := func(kind, n string) error {
		if !validName.MatchString(n) {
			return fmt.Errorf("certs: %s name %q: use letters, digits, '.', '_' or '-'", kind, n)
		}
		if k, dup := seen[n]; dup {
			return fmt.Errorf("certs: %s name %q is already a %s name (files would collide)", kind, n, k)
		}
		seen[n] = kind
		return nil
	}
	for _, n := range p.Nodes {
		if err := name("node", n.Name); err != nil {
			return err
		}
		if len(n.Hosts) == 0 {
			return fmt.Errorf("certs: node %q has no host name or IP for its server certificate", n.Name)
		}
	}
	for _, c := range p.Clients {
		if err := name("client", c); err != nil {
			return err
		}
	}
	if !validName.MatchString(p.org()) {
		return fmt.Errorf("certs: organization %q: use letters, digits, '.', '_' or '-'", p.org())
	}
	return nil
}

func (p *Plan) org() string {
	if p.Organization == "" {
		return "dyad"
	}
	return p.Organization
}

// Subject is the DDS identity subject of a node, as permissions name it.
func (p *Plan) Subject(node string) string { return "CN=" + node + ",O=" + p.org() }

// loadOrCreateCA reuses the CA in Dir or makes and writes a new one.
func (p *Plan) loadOrCreateCA() (*CA, error) {
	certPath, keyPath := filepath.Join(p.Dir, CACertFile), filepath.Join(p.Dir, CAKeyFile)
	c, cerr := os.ReadFile(certPath)
	k, kerr := os.ReadFile(keyPath)
	switch {
	case cerr == nil && kerr == nil:
		return LoadCA(c, k)
	case !errors.Is(cerr, os.ErrNotExist) && cerr != nil:
		return nil, cerr
	case !errors.Is(kerr, os.ErrNotExist) && kerr != nil:
		return nil, kerr
	case cerr == nil || kerr == nil:
		return nil, fmt.Errorf("certs: only one of %s and %s exists", certPath, keyPath)
	}
	ca, err := NewCA(pkix.Name{CommonName: p.org() + " development CA", Organization: []string{p.org()}}, p.Now.Add(-time.Hour), 10*p.Validity)
	if err != nil {
		return nil, err
	}
	if err := writeFile(keyPath, ca.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	return ca, writeFile(certPath, ca.CertPEM, 0o644)
}

// Write makes the whole plan and returns the paths it wrote (a reused CA
// is not listed).
func Write(p Plan) ([]string, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	if len(p.Topics) == 0 {
		p.Topics = []string{"dyad_*"}
	}
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		return nil, err
	}
	_, statErr := os.Stat(filepath.Join(p.Dir, CACertFile))
	ca, err := p.loadOrCreateCA()
	if err != nil {
		return nil, err
	}
	var wrote []string
	if statErr != nil {
		wrote = append(wrote, filepath.Join(p.Dir, CACertFile), filepath.Join(p.Dir, CAKeyFile))
	}
	// Back-date by an hour so that small clock differences between the
	// nodes do not make a fresh certificate "not yet valid".
	from := p.Now.Add(-time.Hour)
	put := func(certPath, keyPath string, kp KeyPair) error {
		if err := writeFile(keyPath, kp.KeyPEM, 0o600); err != nil {
			return err
		}
		wrote = append(wrote, certPath, keyPath)
		return writeFile(certPath, kp.CertPEM, 0o644)
	}
	var grants []Grant
	for _, n := range p.Nodes {
		f := Files(p.Dir, n.Name)
		subj := pkix.Name{CommonName: n.Name, Organization: []string{p.org()}}
		tlsKP, err := ca.Issue(Request{Subject: subj, Hosts: withLoopback(n.Hosts), Usage: UsageServer, NotBefore: from, Validity: p.Validity})
		if err != nil {
			return wrote, err
		}
		if err := put(f.Cert, f.Key, tlsKP); err != nil {
			return wrote, err
		}
		idKP, err := ca.Issue(Request{Subject: subj, Usage: UsageIdentity, NotBefore: from, Validity: p.Validity})
		if err != nil {
			return wrote, err
		}
		if err := put(f.PeerCert, f.PeerKey, idKP); err != nil {
			return wrote, err
		}
		nd := NodeDir(p.Dir, n.Name)
		if err := os.MkdirAll(nd, 0o755); err != nil {
			return wrote, err
		}
		if err := put(filepath.Join(nd, NodeServerCert), filepath.Join(nd, NodeServerKey), tlsKP); err != nil {
			return wrote, err
		}
		if err := put(filepath.Join(nd, NodePeerCert), filepath.Join(nd, NodePeerKey), idKP); err != nil {
			return wrote, err
		}
		if err := writeFile(filepath.Join(nd, CACertFile), ca.CertPEM, 0o644); err != nil {
			return wrote, err
		}
		wrote = append(wrote, filepath.Join(nd, CACertFile))
		notAfter := from.Add(p.Validity)
		if notAfter.After(ca.Cert.NotAfter) {
			notAfter = ca.Cert.NotAfter
		}
		grants = append(grants, Grant{Name: n.Name, Subject: p.Subject(n.Name), Domain: p.Domain, Topics: p.Topics, Partitions: p.Partitions, NotBefore: from, NotAfter: notAfter})
	}
	for _, c := range p.Clients {
		kp, err := ca.Issue(Request{Subject: pkix.Name{CommonName: c, Organization: []string{p.org()}}, Usage: UsageClient, NotBefore: from, Validity: p.Validity})
		if err != nil {
			return wrote, err
		}
		if err := put(filepath.Join(p.Dir, c+".crt"), filepath.Join(p.Dir, c+".key"), kp); err != nil {
			return wrote, err
		}
	}
	for _, d := range []struct {
		name string
		doc  []byte
	}{{GovernanceFile, Governance(p.Domain)}, {PermissionsFile, Permissions(grants)}} {
		signed, err := ca.SignSMIME(d.doc)
		if err != nil {
			return wrote, err
		}
		dirs := []string{p.Dir}
		for _, n := range p.Nodes {
			dirs = append(dirs, NodeDir(p.Dir, n.Name))
		}
		for _, dir := range dirs {
			path := filepath.Join(dir, d.name)
			if err := writeFile(path, signed, 0o644); err != nil {
				return wrote, err
			}
			wrote = append(wrote, path)
		}
	}
	return wrote, nil
}

// withLoopback is hosts plus LoopbackHosts, without duplicates, hosts first.
func withLoopback(hosts []string) []string {
	out := append([]string(nil), hosts...)
	for _, l := range LoopbackHosts() {
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// writeFile replaces path atomically (write to a temporary file, rename),
// so a reader never sees half a key.
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
