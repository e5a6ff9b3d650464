package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// CA is a certificate authority able to issue certificates and sign
// documents.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte
}

// KeyPair is an issued certificate and its private key, PEM encoded.
type KeyPair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// Usage says what a leaf certificate may be used for.
type Usage int

const (
	// UsageServer certificates authenticate a TLS server; they also carry
	// client auth so a node can present its certificate as a client.
	UsageServer Usage = iota
	// UsageClient certificates authenticate a TLS client.
	UsageClient
	// UsageIdentity certificates are DDS Security participant identities:
	// digital signature only, no TLS extended key usage.
	UsageIdentity
)

// Request describes a leaf certificate.
type Request struct {
	Subject pkix.Name
	// Hosts become SANs: IP literals as IP addresses, anything else as DNS
	// names.
	Hosts     []string
	Usage     Usage
	NotBefore time.Time
	Validity  time.Duration
}

// newKey makes an ECDSA P-256 key and its PKCS#8 PEM.
func newKey() (*ecdsa.PrivateKey, []byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return k, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// NewCA makes a self-signed CA valid from notBefore for validity.
func NewCA(subject pkix.Name, notBefore time.Time, validity time.Duration) (*CA, error) {
	if validity <= 0 {
		return nil, errors.New("certs: validity must be positive")
	}
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               subject,
		NotBefore:             notBefore,
		NotAfter:              notBefore.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}, nil
}

// LoadCA reads a CA from PEM: the first CERTIFICATE block of certPEM and
// a PKCS#8, PKCS#1 or SEC1 private key that matches it.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New("certs: CA certificate: no PEM CERTIFICATE block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("certs: CA certificate is not a CA (basic constraints)")
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("certs: CA key: no PEM block")
	}
	var key any
	switch kb.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(kb.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(kb.Bytes)
	default:
		return nil, fmt.Errorf("certs: CA key: unsupported PEM type %q", kb.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("certs: CA key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("certs: CA key cannot sign")
	}
	type equaler interface{ Equal(crypto.PublicKey) bool }
	if pub, ok := signer.Public().(equaler); !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("certs: CA key does not match the CA certificate")
	}
	return &CA{Cert: cert, Key: signer, CertPEM: pem.EncodeToMemory(cb), KeyPEM: keyPEM}, nil
}

// Issue makes a new key and a certificate for it signed by ca. The
// certificate never outlives the CA.
func (ca *CA) Issue(r Request) (KeyPair, error) {
	if r.Validity <= 0 {
		return KeyPair{}, errors.New("certs: validity must be positive")
	}
	if r.Subject.CommonName == "" {
		return KeyPair{}, errors.New("certs: a certificate needs a common name")
	}
	key, keyPEM, err := newKey()
	if err != nil {
		return KeyPair{}, err
	}
	sn, err := serial()
	if err != nil {
		return KeyPair{}, err
	}
	notAfter := r.NotBefore.Add(r.Validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	ski := sha256.Sum256(elliptic.MarshalCompressed(key.Curve, key.X, key.Y))
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      r.Subject,
		NotBefore:    r.NotBefore,
		NotAfter:     notAfter,
		SubjectKeyId: ski[:20],
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	switch r.Usage {
	case UsageServer:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	case UsageClient:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	case UsageIdentity:
	default:
		return KeyPair{}, fmt.Errorf("certs: unknown usage %d", r.Usage)
	}
	for _, h := range r.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if r.Usage == UsageServer && len(tmpl.IPAddresses)+len(tmpl.DNSNames) == 0 {
		return KeyPair{}, fmt.Errorf("certs: server certificate %q needs at least one host name or IP", r.Subject.CommonName)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return KeyPair{}, err
	}
	return KeyPair{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: keyPEM}, nil
}
