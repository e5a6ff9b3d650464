package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/testenv"
)

// start is the one instant a test builds every certificate from. It is the
// wall clock at the test's start, less a minute: S/MIME signatures carry
// the wall-clock signing time (the pkcs7 library takes it itself), and
// verification checks it against the signer's validity, so a fixed
// calendar date here would make every test fail once that date is past.
func start() time.Time { return time.Now().UTC().Truncate(time.Second).Add(-time.Minute) }

func mustCA(t *testing.T, cn string, t0 time.Time) *CA {
	t.Helper()
	ca, err := NewCA(pkix.Name{CommonName: cn}, t0, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func parseCert(t *testing.T, p []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(p)
	if b == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestIssue(t *testing.T) {
	t0 := start()
	ca := mustCA(t, "ca", t0)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	tests := []struct {
		name    string
		req     Request
		wantErr string
		eku     x509.ExtKeyUsage // verified against the CA for this use
		dns     []string
		ips     []string
		capped  bool // NotAfter clipped to the CA's
	}{
		{name: "server with SANs", req: Request{Subject: pkix.Name{CommonName: "a"}, Hosts: []string{"10.0.0.1", "a.example", "::1"}, Usage: UsageServer, NotBefore: t0, Validity: time.Hour},
			eku: x509.ExtKeyUsageServerAuth, dns: []string{"a.example"}, ips: []string{"10.0.0.1", "::1"}},
		{name: "server cert also authenticates as client", req: Request{Subject: pkix.Name{CommonName: "a"}, Hosts: []string{"h"}, Usage: UsageServer, NotBefore: t0, Validity: time.Hour},
			eku: x509.ExtKeyUsageClientAuth, dns: []string{"h"}},
		{name: "client", req: Request{Subject: pkix.Name{CommonName: "kube-apiserver"}, Usage: UsageClient, NotBefore: t0, Validity: time.Hour},
			eku: x509.ExtKeyUsageClientAuth},
		{name: "identity outliving the CA is clipped", req: Request{Subject: pkix.Name{CommonName: "a"}, Usage: UsageIdentity, NotBefore: t0, Validity: 1000 * time.Hour},
			eku: x509.ExtKeyUsageAny, capped: true},
		{name: "server without hosts", req: Request{Subject: pkix.Name{CommonName: "a"}, Usage: UsageServer, NotBefore: t0, Validity: time.Hour}, wantErr: "at least one host"},
		{name: "no common name", req: Request{Usage: UsageClient, NotBefore: t0, Validity: time.Hour}, wantErr: "common name"},
		{name: "zero validity", req: Request{Subject: pkix.Name{CommonName: "a"}, Usage: UsageClient, NotBefore: t0}, wantErr: "validity"},
		{name: "unknown usage", req: Request{Subject: pkix.Name{CommonName: "a"}, Usage: Usage(9), NotBefore: t0, Validity: time.Hour}, wantErr: "unknown usage"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kp, err := ca.Issue(tc.req)
			if checkErr(t, err, tc.wantErr) {
				return
			}
			if _, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM); err != nil {
				t.Fatalf("key does not match certificate: %v", err)
			}
			c := parseCert(t, kp.CertPEM)
			if _, err := c.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: t0.Add(time.Minute), KeyUsages: []x509.ExtKeyUsage{tc.eku}}); err != nil {
				t.Fatalf("verify for %v: %v", tc.eku, err)
			}
			if strings.Join(c.DNSNames, ",") != strings.Join(tc.dns, ",") {
				t.Errorf("DNS SANs %v, want %v", c.DNSNames, tc.dns)
			}
			var ips []string
			for _, ip := range c.IPAddresses {
				ips = append(ips, ip.String())
			}
			if strings.Join(ips, ",") != strings.Join(tc.ips, ",") {
				t.Errorf("IP SANs %v, want %v", ips, tc.ips)
			}
			if got := c.NotAfter.Equal(ca.Cert.NotAfter); got != tc.capped {
				t.Errorf("NotAfter %v (CA %v), capped=%v want %v", c.NotAfter, ca.Cert.NotAfter, got, tc.capped)
			}
			if c.Subject.CommonName != tc.req.Subject.CommonName {
				t.Errorf("CN %q", c.Subject.CommonName)
			}
		})
	}
}

func TestLoadCA(t *testing.T) {
	t0 := start()
	ca, other := mustCA(t, "ca", t0), mustCA(t, "other", t0)
	leaf, err := ca.Issue(Request{Subject: pkix.Name{CommonName: "c"}, Usage: UsageClient, NotBefore: t0, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		cert, key []byte
		wantErr   string
	}{
		{name: "round trip", cert: ca.CertPEM, key: ca.KeyPEM},
		{name: "key of another CA", cert: ca.CertPEM, key: other.KeyPEM, wantErr: "does not match"},
		{name: "leaf is not a CA", cert: leaf.CertPEM, key: leaf.KeyPEM, wantErr: "not a CA"},
		{name: "garbage certificate", cert: []byte("nope"), key: ca.KeyPEM, wantErr: "no PEM"},
		{name: "garbage key", cert: ca.CertPEM, key: []byte("nope"), wantErr: "no PEM"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LoadCA(tc.cert, tc.key)
			if checkErr(t, err, tc.wantErr) {
				return
			}
			// The loaded CA signs what the original verifies.
			msg, err := got.SignSMIME([]byte("<dds/>\n"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ca.VerifySMIME(msg); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSMIME(t *testing.T) {
	t0 := start()
	ca, other := mustCA(t, "ca", t0), mustCA(t, "other", t0)
	doc := []byte("<?xml version=\"1.0\"?>\n<dds>\n  <x>1</x>\n</dds>\n")
	signed, err := ca.SignSMIME(doc)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		msg     []byte
		by      *CA
		wantErr string
	}{
		{name: "verifies against its CA", msg: signed, by: ca},
		{name: "another CA refuses it", msg: signed, by: other, wantErr: "not signed by this CA"},
		{name: "tampered document", msg: bytes.Replace(signed, []byte("<x>1</x>"), []byte("<x>2</x>"), 1), by: ca, wantErr: "does not verify"},
		{name: "not S/MIME", msg: doc, by: ca, wantErr: "not an S/MIME"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.by.VerifySMIME(tc.msg)
			if checkErr(t, err, tc.wantErr) {
				return
			}
			if want := canonical(doc); !bytes.Equal(got, want) {
				t.Fatalf("document %q, want %q", got, want)
			}
		})
	}
	// A CA that is not valid yet at the signing clock signs nothing: every
	// verifier would refuse the signing time.
	if _, err := mustCA(t, "future", t0.Add(48*time.Hour)).SignSMIME(doc); err == nil || !strings.Contains(err.Error(), "not valid now") {
		t.Errorf("a CA valid only from the day after tomorrow signed: err = %v", err)
	}
	if _, err := ca.SignSMIME([]byte("a\n--b\n")); err == nil {
		t.Error("a line starting with -- was signed; it would be read as a boundary")
	}
}

// TestSMIMEOpenSSL checks the signed documents the way Cyclone's
// access-control plugin does (PKCS7_TEXT|PKCS7_NOVERIFY|PKCS7_NOINTERN with
// the permissions CA as the only candidate signer), through the openssl
// command, which uses the same library calls.
func TestSMIMEOpenSSL(t *testing.T) {
	openssl := testenv.NeedCommand(t, "openssl", "openssl")
	dir := t.TempDir()
	if _, err := Write(Plan{Dir: dir, Nodes: []Node{{Name: "a", Hosts: []string{"127.0.0.1"}}}, Now: time.Now(), Validity: time.Hour, Domain: AnyDomain}); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if _, err := Write(Plan{Dir: other, Nodes: []Node{{Name: "a", Hosts: []string{"127.0.0.1"}}}, Now: time.Now(), Validity: time.Hour, Domain: AnyDomain}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		doc, ca string
		ok      bool
		want    string
	}{
		{doc: filepath.Join(dir, GovernanceFile), ca: filepath.Join(dir, CACertFile), ok: true, want: "<enable_join_access_control>true"},
		{doc: filepath.Join(dir, PermissionsFile), ca: filepath.Join(dir, CACertFile), ok: true, want: "<subject_name>CN=a,O=dyad</subject_name>"},
		{doc: filepath.Join(dir, PermissionsFile), ca: filepath.Join(other, CACertFile), ok: false},
	}
	for _, tc := range tests {
		t.Run(filepath.Base(tc.doc)+"-"+filepath.Base(filepath.Dir(tc.ca)), func(t *testing.T) {
			out, err := exec.Command(openssl, "smime", "-verify", "-in", tc.doc, "-text", "-noverify", "-nointern", "-certfile", tc.ca).Output()
			if (err == nil) != tc.ok {
				t.Fatalf("openssl verify err = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && !strings.Contains(string(out), tc.want) {
				t.Fatalf("verified document lacks %q:\n%s", tc.want, out)
			}
		})
	}
}

func TestWrite(t *testing.T) {
	t0 := start()
	ok := Plan{Nodes: []Node{{Name: "a", Hosts: []string{"10.0.0.1"}}, {Name: "b", Hosts: []string{"10.0.0.2", "b.example"}}},
		Clients: []string{"kube-apiserver"}, Now: t0, Validity: time.Hour, Domain: 3}
	tests := []struct {
		name    string
		edit    func(p *Plan)
		wantErr string
	}{
		{name: "pair", edit: func(p *Plan) {}},
		{name: "no nodes", edit: func(p *Plan) { p.Nodes = nil }, wantErr: "at least one node"},
		{name: "node without hosts", edit: func(p *Plan) { p.Nodes[0].Hosts = nil }, wantErr: "no host"},
		{name: "bad name", edit: func(p *Plan) { p.Nodes[0].Name = "../x" }, wantErr: "node name"},
		{name: "client named like a node", edit: func(p *Plan) { p.Clients = []string{"a"} }, wantErr: "already a node"},
		{name: "domain out of range", edit: func(p *Plan) { p.Domain = 231 }, wantErr: "out of range"},
		{name: "no validity", edit: func(p *Plan) { p.Validity = 0 }, wantErr: "validity"},
		// A plan dated two days ahead makes a CA that is not valid yet when
		// the documents are signed (at the wall clock): refused, not written.
		{name: "plan dated after the signing clock", edit: func(p *Plan) { p.Now = p.Now.Add(48 * time.Hour) }, wantErr: "not valid now"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := ok
			p.Nodes = append([]Node(nil), ok.Nodes...)
			p.Dir = t.TempDir()
			tc.edit(&p)
			_, err := Write(p)
			if checkErr(t, err, tc.wantErr) {
				return
			}
			checkPair(t, p)
		})
	}
}

// checkPair checks every file a pair plan promises.
func checkPair(t *testing.T, p Plan) {
	t.Helper()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(p.Dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ca, err := LoadCA(read(CACertFile), read(CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(p.Dir, CAKeyFile)); st.Mode().Perm() != 0o600 {
		t.Errorf("ca.key mode %v", st.Mode().Perm())
	}
	gov, err := ca.VerifySMIME(read(GovernanceFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(gov, []byte(domainsXML(p.Domain))) || !bytes.Contains(gov, []byte("<data_protection_kind>ENCRYPT</data_protection_kind>")) {
		t.Errorf("governance:\n%s", gov)
	}
	perm, err := ca.VerifySMIME(read(PermissionsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range p.Nodes {
		f := Files(p.Dir, n.Name)
		if _, err := tls.LoadX509KeyPair(f.Cert, f.Key); err != nil {
			t.Errorf("%s TLS pair: %v", n.Name, err)
		}
		id := parseCert(t, read(filepath.Base(f.PeerCert)))
		if err := id.CheckSignatureFrom(ca.Cert); err != nil {
			t.Errorf("%s identity not signed by the CA: %v", n.Name, err)
		}
		// The grant names the identity exactly as Cyclone prints it (RFC 2253).
		if want := "<subject_name>" + p.Subject(n.Name) + "</subject_name>"; !bytes.Contains(perm, []byte(want)) || id.Subject.String() != p.Subject(n.Name) {
			t.Errorf("%s: identity subject %q, permissions lack %q", n.Name, id.Subject, want)
		}
	}
	for _, c := range p.Clients {
		if _, err := tls.LoadX509KeyPair(filepath.Join(p.Dir, c+".crt"), filepath.Join(p.Dir, c+".key")); err != nil {
			t.Errorf("client %s: %v", c, err)
		}
	}
}

// TestWriteReusesCA: a second run in the same directory keeps the CA, so a
// renewed or added node still trusts the first one.
func TestWriteReusesCA(t *testing.T) {
	dir := t.TempDir()
	p := Plan{Dir: dir, Nodes: []Node{{Name: "a", Hosts: []string{"h"}}}, Now: start(), Validity: time.Hour, Domain: AnyDomain}
	first, err := Write(p)
	if err != nil {
		t.Fatal(err)
	}
	ca1, _ := os.ReadFile(filepath.Join(dir, CACertFile))
	p.Nodes = append(p.Nodes, Node{Name: "b", Hosts: []string{"h2"}})
	second, err := Write(p)
	if err != nil {
		t.Fatal(err)
	}
	ca2, _ := os.ReadFile(filepath.Join(dir, CACertFile))
	if !bytes.Equal(ca1, ca2) {
		t.Fatal("CA was replaced")
	}
	has := func(list []string, name string) bool { // the CA itself, not the nodes' copies of ca.crt
		for _, w := range list {
			if w == filepath.Join(dir, name) {
				return true
			}
		}
		return false
	}
	if !has(first, CACertFile) || has(second, CACertFile) {
		t.Errorf("first run wrote CA=%v, second=%v; want true, false", has(first, CACertFile), has(second, CACertFile))
	}
	checkPair(t, p)
	os.Remove(filepath.Join(dir, CAKeyFile))
	if _, err := Write(p); err == nil || !strings.Contains(err.Error(), "only one of") {
		t.Fatalf("CA certificate without key: err = %v", err)
	}
}

// checkErr fails t unless err matches want (a substring; "" wants none),
// and reports whether an error was expected, so the case ends there.
func checkErr(t *testing.T, err error, want string) bool {
	t.Helper()
	if want != "" {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("err = %v, want %q", err, want)
		}
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return false
}

// TestWriteNodeDir: each node gets a directory with exactly the files a
// deployed node reads, under the names deploy/ uses (kubeadm's etcd names),
// and its server certificate also covers the loopback names.
func TestWriteNodeDir(t *testing.T) {
	now := start()
	p := Plan{Dir: t.TempDir(), Nodes: []Node{{Name: "a", Hosts: []string{"10.0.1.10", "localhost"}}, {Name: "b", Hosts: []string{"10.0.2.10"}}},
		Now: now, Validity: time.Hour, Domain: AnyDomain}
	if _, err := Write(p); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(p.Dir, CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range p.Nodes {
		nd := NodeDir(p.Dir, n.Name)
		entries, err := os.ReadDir(nd)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		want := []string{CACertFile, GovernanceFile, NodePeerCert, NodePeerKey, PermissionsFile, NodeServerCert, NodeServerKey}
		slices.Sort(want)
		if !slices.Equal(names, want) {
			t.Errorf("%s: files %v, want %v (and never %s)", nd, names, want, CAKeyFile)
		}
		if got, _ := os.ReadFile(filepath.Join(nd, CACertFile)); !bytes.Equal(got, caPEM) {
			t.Errorf("%s: ca.crt differs from the CA", nd)
		}
		if _, err := tls.LoadX509KeyPair(filepath.Join(nd, NodeServerCert), filepath.Join(nd, NodeServerKey)); err != nil {
			t.Errorf("%s: server pair: %v", nd, err)
		}
		if _, err := tls.LoadX509KeyPair(filepath.Join(nd, NodePeerCert), filepath.Join(nd, NodePeerKey)); err != nil {
			t.Errorf("%s: peer pair: %v", nd, err)
		}
		pemBytes, _ := os.ReadFile(filepath.Join(nd, NodeServerCert))
		cert := parseCert(t, pemBytes)
		for _, h := range append(slices.Clone(n.Hosts), LoopbackHosts()...) {
			if err := cert.VerifyHostname(h); err != nil {
				t.Errorf("%s server certificate: %v", n.Name, err)
			}
		}
		if len(cert.DNSNames) != len(slices.Compact(slices.Sorted(slices.Values(cert.DNSNames)))) {
			t.Errorf("%s: duplicate DNS SANs %v", n.Name, cert.DNSNames)
		}
	}
}
