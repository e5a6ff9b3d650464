package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/certs"
	"github.com/dyad-db/dyad/internal/dds"
	"github.com/dyad-db/dyad/internal/testenv"
)

func TestPeerSecurityFlags(t *testing.T) {
	testenv.NeedFile(t, filepath.Join(dds.DefaultSecurityPluginDir, "libdds_security_auth.so"),
		"Cyclone DDS Security plugins", "install Debian's libddsc0debian (scripts/setup.sh does)")
	mk := func() string {
		dir := t.TempDir()
		if _, err := certs.Write(certs.Plan{Dir: dir, Nodes: []certs.Node{{Name: "a", Hosts: []string{"127.0.0.1"}}}, Now: time.Now(), Validity: time.Hour, Domain: certs.AnyDomain}); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	pki, other := mk(), mk()
	files := certs.Files(pki, "a")
	good := peerSecurityFlags{certFile: files.PeerCert, keyFile: files.PeerKey, trustedCAFile: filepath.Join(pki, certs.CACertFile),
		governanceFile: filepath.Join(pki, certs.GovernanceFile), permissionsFile: filepath.Join(pki, certs.PermissionsFile), pluginDir: dds.DefaultSecurityPluginDir}
	tests := []struct {
		name    string
		edit    func(*peerSecurityFlags)
		off     bool
		wantErr string
	}{
		{name: "no flags: off", edit: func(f *peerSecurityFlags) { *f = peerSecurityFlags{pluginDir: dds.DefaultSecurityPluginDir} }, off: true},
		{name: "complete", edit: func(*peerSecurityFlags) {}},
		{name: "one flag alone", edit: func(f *peerSecurityFlags) {
			*f = peerSecurityFlags{certFile: files.PeerCert, pluginDir: dds.DefaultSecurityPluginDir}
		}, wantErr: "needs --peer-key-file"},
		{name: "governance signed by another CA", edit: func(f *peerSecurityFlags) { f.governanceFile = filepath.Join(other, certs.GovernanceFile) },
			wantErr: "--dds-governance-file: certs: document is not signed by this CA"},
		{name: "permissions CA given apart", edit: func(f *peerSecurityFlags) { f.permissionsCAFile = filepath.Join(other, certs.CACertFile) },
			wantErr: "--dds-governance-file"},
		{name: "key of another identity", edit: func(f *peerSecurityFlags) { f.keyFile = certs.Files(other, "a").PeerKey }, wantErr: "--peer-cert-file/--peer-key-file"},
		{name: "permissions not S/MIME", edit: func(f *peerSecurityFlags) { f.permissionsFile = files.PeerCert }, wantErr: "--dds-permissions-file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := good
			tc.edit(&f)
			sec, err := f.config()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (sec == nil) != tc.off {
				t.Fatalf("security config %+v, want off=%v", sec, tc.off)
			}
			if sec != nil && (sec.PermissionsCA != good.trustedCAFile || sec.IdentityCert != files.PeerCert) {
				t.Errorf("config %+v", sec)
			}
		})
	}
}

// TestPlanSecurity: the pair plan carries the <Security> element exactly
// when DDS Security is configured, and refuses domains DDS Security cannot
// govern.
func TestPlanSecurity(t *testing.T) {
	testenv.NeedFile(t, filepath.Join(dds.DefaultSecurityPluginDir, "libdds_security_auth.so"),
		"Cyclone DDS Security plugins", "install Debian's libddsc0debian (scripts/setup.sh does)")
	dir := t.TempDir()
	if _, err := certs.Write(certs.Plan{Dir: dir, Nodes: []certs.Node{{Name: "a", Hosts: []string{"127.0.0.1"}}}, Now: time.Now(), Validity: time.Hour, Domain: certs.AnyDomain}); err != nil {
		t.Fatal(err)
	}
	f := certs.Files(dir, "a")
	sec := peerSecurityFlags{certFile: f.PeerCert, keyFile: f.PeerKey, trustedCAFile: filepath.Join(dir, certs.CACertFile),
		governanceFile: filepath.Join(dir, certs.GovernanceFile), permissionsFile: filepath.Join(dir, certs.PermissionsFile), pluginDir: dds.DefaultSecurityPluginDir}
	base := clusterFlags{initialCluster: "a=http://127.0.0.1:2380,b=http://127.0.0.2:2380", initialClusterState: "new",
		splitBrainPolicy: "preferred", peerLease: time.Second, ackTimeout: 2 * time.Second}
	tests := []struct {
		name    string
		sec     peerSecurityFlags
		domain  uint32
		want    string // substring of the security XML; "" for none
		wantErr string
	}{
		{name: "plain", sec: peerSecurityFlags{pluginDir: dds.DefaultSecurityPluginDir}},
		{name: "secured", sec: sec, domain: 230, want: "<IdentityCertificate>file:" + f.PeerCert + "</IdentityCertificate>"},
		{name: "secured, domain beyond 230", sec: sec, domain: 231, wantErr: "0-230"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			c.sec, c.ddsDomain = tc.sec, tc.domain
			p, err := c.plan("a")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (p.securityXML == "") != (tc.want == "") || !strings.Contains(p.securityXML, tc.want) {
				t.Fatalf("security XML %q, want it to contain %q", p.securityXML, tc.want)
			}
		})
	}
}
