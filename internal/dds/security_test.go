package dds

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSecurityXML(t *testing.T) {
	full := Security{IdentityCA: "/p/ca.crt", IdentityCert: "/p/a-peer.crt", PrivateKey: "/p/a-peer.key",
		PermissionsCA: "/p/pca.crt", Governance: "/p/governance.p7s", Permissions: "/p/permissions.p7s"}
	tests := []struct {
		name    string
		sec     Security
		want    []string
		wantErr bool
	}{
		{name: "all three plugins by full path", sec: full, want: []string{
			`<Library initFunction="init_authentication" finalizeFunction="finalize_authentication" path="` + DefaultSecurityPluginDir + `/libdds_security_auth.so"/>`,
			`<Library initFunction="init_access_control" finalizeFunction="finalize_access_control" path="` + DefaultSecurityPluginDir + `/libdds_security_ac.so"/>`,
			`<Library initFunction="init_crypto" finalizeFunction="finalize_crypto" path="` + DefaultSecurityPluginDir + `/libdds_security_crypto.so"/>`,
			`<IdentityCA>file:/p/ca.crt</IdentityCA><IdentityCertificate>file:/p/a-peer.crt</IdentityCertificate><PrivateKey>file:/p/a-peer.key</PrivateKey>`,
			`<PermissionsCA>file:/p/pca.crt</PermissionsCA><Governance>file:/p/governance.p7s</Governance><Permissions>file:/p/permissions.p7s</Permissions>`,
		}},
		{name: "relative paths become absolute", sec: func() Security { s := full; s.IdentityCA = "rel/ca.crt"; return s }(),
			want: []string{`<IdentityCA>file:` + filepath.Join(mustWd(t), "rel/ca.crt") + `</IdentityCA>`}},
		{name: "plugin dir and escaping", sec: func() Security { s := full; s.PluginDir = `/x&y`; s.Permissions = `/a"b`; return s }(),
			want: []string{`path="/x&amp;y/libdds_security_ac.so"`, `<Permissions>file:/a&#34;b</Permissions>`}},
		{name: "missing file", sec: func() Security { s := full; s.Governance = ""; return s }(), wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.sec.XML()
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("XML lacks %s\n%s", w, got)
				}
			}
			if err == nil && (!strings.HasPrefix(got, "<Security><Authentication>") || !strings.HasSuffix(got, "</Cryptographic></Security>")) {
				t.Errorf("not one <Security> element: %s", got)
			}
		})
	}
}

func mustWd(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

func TestSecurityCheck(t *testing.T) {
	dir := t.TempDir()
	f := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plugins := t.TempDir()
	for _, l := range []string{"auth", "ac", "crypto"} {
		os.WriteFile(filepath.Join(plugins, "libdds_security_"+l+".so"), nil, 0o644)
	}
	ok := Security{IdentityCA: f("ca"), IdentityCert: f("c"), PrivateKey: f("k"), PermissionsCA: f("pca"), Governance: f("g"), Permissions: f("p"), PluginDir: plugins}
	tests := []struct {
		name    string
		edit    func(*Security)
		wantErr string
	}{
		{name: "complete", edit: func(*Security) {}},
		{name: "no key", edit: func(s *Security) { s.PrivateKey = "" }, wantErr: "no private key"},
		{name: "missing permissions file", edit: func(s *Security) { s.Permissions = filepath.Join(dir, "nope") }, wantErr: "permissions"},
		{name: "no plugins", edit: func(s *Security) { s.PluginDir = dir }, wantErr: "plugin auth missing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := ok
			tc.edit(&s)
			err := s.Check()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
