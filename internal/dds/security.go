package dds

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// DefaultSecurityPluginDir is where Debian's libddsc0debian installs
// Cyclone's DDS Security plugins (libdds_security_{auth,ac,crypto}.so);
// it is not on the loader's default path, so plugins are named by full path.
const DefaultSecurityPluginDir = "/usr/lib/x86_64-linux-gnu/libddsc0debian"

// Security configures Cyclone's builtin DDS Security plugins:
// authentication (PKI-DH), access control (permissions) and cryptography.
// Every field but PluginDir is a file path.
type Security struct {
	IdentityCA    string // CA that signs every participant's identity
	IdentityCert  string // this participant's identity certificate
	PrivateKey    string // its key
	PermissionsCA string // CA that signed governance and permissions
	Governance    string // signed governance document (S/MIME)
	Permissions   string // signed permissions document (S/MIME)
	PluginDir     string // default DefaultSecurityPluginDir
}

// Check reports missing settings and unreadable files: Cyclone reports
// them only as a failure to create the participant.
func (s Security) Check() error {
	for _, f := range []struct{ name, path string }{
		{"identity CA", s.IdentityCA}, {"identity certificate", s.IdentityCert}, {"private key", s.PrivateKey},
		{"permissions CA", s.PermissionsCA}, {"governance", s.Governance}, {"permissions", s.Permissions},
	} {
		if f.path == "" {
			return fmt.Errorf("dds security: no %s file", f.name)
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("dds security: %s: %w", f.name, err)
		}
	}
	dir := s.pluginDir()
	for _, lib := range []string{"auth", "ac", "crypto"} {
		if _, err := os.Stat(filepath.Join(dir, "libdds_security_"+lib+".so")); err != nil {
			return fmt.Errorf("dds security: plugin %s missing (Debian package libddsc0debian): %w", lib, err)
		}
	}
	return nil
}

func (s Security) pluginDir() string {
	if s.PluginDir == "" {
		return DefaultSecurityPluginDir
	}
	return s.PluginDir
}

// XML returns the <Security> element for Config.SecurityXML. Relative
// paths are made absolute, since Cyclone's "file:" URIs are resolved
// against the process's directory at participant creation.
func (s Security) XML() (string, error) {
	uri := func(p string) (string, error) {
		if p == "" {
			return "", errors.New("dds security: empty path")
		}
		a, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		return esc("file:" + a), nil
	}
	var parts []string
	for _, p := range []string{s.IdentityCA, s.IdentityCert, s.PrivateKey, s.PermissionsCA, s.Governance, s.Permissions} {
		u, err := uri(p)
		if err != nil {
			return "", err
		}
		parts = append(parts, u)
	}
	lib := func(kind, name string) string {
		return fmt.Sprintf(`<Library initFunction="init_%s" finalizeFunction="finalize_%s" path="%s"/>`,
			kind, kind, esc(filepath.Join(s.pluginDir(), "libdds_security_"+name+".so")))
	}
	var b strings.Builder
	b.WriteString(`<Security><Authentication>`)
	b.WriteString(lib("authentication", "auth"))
	fmt.Fprintf(&b, `<IdentityCA>%s</IdentityCA><IdentityCertificate>%s</IdentityCertificate><PrivateKey>%s</PrivateKey>`, parts[0], parts[1], parts[2])
	b.WriteString(`</Authentication><AccessControl>`)
	b.WriteString(lib("access_control", "ac"))
	fmt.Fprintf(&b, `<PermissionsCA>%s</PermissionsCA><Governance>%s</Governance><Permissions>%s</Permissions>`, parts[3], parts[4], parts[5])
	b.WriteString(`</AccessControl><Cryptographic>`)
	b.WriteString(lib("crypto", "crypto"))
	b.WriteString(`</Cryptographic></Security>`)
	return b.String(), nil
}
