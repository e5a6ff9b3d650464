package certs

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/smallstep/pkcs7"
)

// textHeader is the MIME header of the signed part. Cyclone verifies with
// PKCS7_TEXT, which requires it and strips it from the document.
const textHeader = "Content-Type: text/plain\r\n\r\n"

// canonical returns doc with CRLF line ends and no final line end: the
// bytes OpenSSL's S/MIME reader hands to PKCS7_verify for a part (it
// rewrites every line end as CRLF and gives the CRLF before the boundary to
// the boundary).
func canonical(doc []byte) []byte {
	s := strings.ReplaceAll(string(doc), "\r\n", "\n")
	s = strings.TrimRight(s, "\n")
	return []byte(strings.ReplaceAll(s, "\n", "\r\n"))
}

// SignSMIME signs doc (an XML document) with the CA's key and returns the
// S/MIME multipart/signed message Cyclone DDS's access-control plugin
// reads: the signed part holds doc, the detached PKCS#7 SignedData
// (SHA-256, the CA certificate included) is the second part.
func (ca *CA) SignSMIME(doc []byte) ([]byte, error) {
	// The pkcs7 library stamps the wall-clock signing time itself, and every
	// verifier (VerifySMIME, OpenSSL, Cyclone) refuses a signing time outside
	// the signer's validity. Refuse here rather than write a document that
	// no node would accept.
	if now := time.Now(); now.Before(ca.Cert.NotBefore) || now.After(ca.Cert.NotAfter) {
		return nil, fmt.Errorf("certs: the CA %q is not valid now (%s): it is valid from %s to %s",
			ca.Cert.Subject.CommonName, now.UTC().Format(time.RFC3339),
			ca.Cert.NotBefore.UTC().Format(time.RFC3339), ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	body := canonical(doc)
	if bytes.Contains(body, []byte("\r\n--")) {
		// A line starting "--" could be read as a MIME boundary.
		return nil, errors.New("certs: document has a line starting with \"--\"")
	}
	signed := append([]byte(textHeader), body...)
	sd, err := pkcs7.NewSignedData(signed)
	if err != nil {
		return nil, err
	}
	sd.SetDigestAlgorithm(pkcs7.OIDDigestAlgorithmSHA256)
	if err := sd.AddSigner(ca.Cert, ca.Key, pkcs7.SignerInfoConfig{}); err != nil {
		return nil, fmt.Errorf("certs: signing: %w", err)
	}
	sd.Detach()
	der, err := sd.Finish()
	if err != nil {
		return nil, fmt.Errorf("certs: signing: %w", err)
	}
	var rb [16]byte
	if _, err := rand.Read(rb[:]); err != nil {
		return nil, err
	}
	boundary := "----" + strings.ToUpper(hex.EncodeToString(rb[:]))

	var b bytes.Buffer
	b.WriteString("MIME-Version: 1.0\r\n")
	fmt.Fprintf(&b, "Content-Type: multipart/signed; protocol=\"application/x-pkcs7-signature\"; micalg=\"sha-256\"; boundary=\"%s\"\r\n\r\n", boundary)
	b.WriteString("This is an S/MIME signed message\r\n\r\n")
	fmt.Fprintf(&b, "--%s\r\n", boundary)
	b.Write(signed)
	fmt.Fprintf(&b, "\r\n--%s\r\n", boundary)
	b.WriteString("Content-Type: application/x-pkcs7-signature; name=\"smime.p7s\"\r\n")
	b.WriteString("Content-Transfer-Encoding: base64\r\n")
	b.WriteString("Content-Disposition: attachment; filename=\"smime.p7s\"\r\n\r\n")
	enc := base64.StdEncoding.EncodeToString(der)
	for len(enc) > 64 {
		b.WriteString(enc[:64] + "\r\n")
		enc = enc[64:]
	}
	b.WriteString(enc + "\r\n\r\n")
	fmt.Fprintf(&b, "--%s--\r\n", boundary)
	return b.Bytes(), nil
}

// VerifySMIME checks a document made by SignSMIME (or by `openssl smime
// -sign -text`) the way Cyclone does: the signature must verify and its
// signer must be ca's certificate itself. It returns the XML document.
func (ca *CA) VerifySMIME(msg []byte) ([]byte, error) { return VerifySMIME(msg, ca.Cert) }

// VerifySMIME checks that msg is an S/MIME signed document whose signer is
// the certificate signer itself, and returns the document.
func VerifySMIME(msg []byte, signer *x509.Certificate) ([]byte, error) {
	content, sig, err := splitSMIME(msg)
	if err != nil {
		return nil, err
	}
	p7, err := pkcs7.Parse(sig)
	if err != nil {
		return nil, fmt.Errorf("certs: signature: %w", err)
	}
	p7.Content = content
	if err := p7.Verify(); err != nil {
		return nil, fmt.Errorf("certs: signature does not verify: %w", err)
	}
	if s := p7.GetOnlySigner(); s == nil || !s.Equal(signer) {
		return nil, errors.New("certs: document is not signed by this CA")
	}
	doc, ok := bytes.CutPrefix(content, []byte(textHeader))
	if !ok {
		return nil, errors.New("certs: signed part is not text/plain")
	}
	return doc, nil
}

// VerifySMIMEFile is VerifySMIME on files: the document and a PEM file
// whose first certificate is the signer.
func VerifySMIMEFile(docFile, signerFile string) error {
	msg, err := os.ReadFile(docFile)
	if err != nil {
		return err
	}
	p, err := os.ReadFile(signerFile)
	if err != nil {
		return err
	}
	b, _ := pem.Decode(p)
	if b == nil || b.Type != "CERTIFICATE" {
		return fmt.Errorf("certs: %s: no PEM certificate", signerFile)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return fmt.Errorf("certs: %s: %w", signerFile, err)
	}
	_, err = VerifySMIME(msg, c)
	return err
}

// splitSMIME returns the signed part (canonical, as signed) and the DER
// signature of a multipart/signed message.
func splitSMIME(msg []byte) (content, sig []byte, err error) {
	s := strings.ReplaceAll(string(msg), "\r\n", "\n")
	i := strings.Index(s, "boundary=\"")
	if i < 0 {
		return nil, nil, errors.New("certs: not an S/MIME multipart/signed message")
	}
	rest := s[i+len("boundary=\""):]
	j := strings.IndexByte(rest, '"')
	if j <= 0 {
		return nil, nil, errors.New("certs: bad MIME boundary")
	}
	delim := "\n--" + rest[:j]
	parts := strings.Split(s, delim)
	// parts: preamble, signed part, signature part, epilogue ("--\n").
	if len(parts) != 4 || !strings.HasPrefix(parts[3], "--") {
		return nil, nil, errors.New("certs: want exactly two MIME parts")
	}
	signed := strings.TrimPrefix(parts[1], "\n")
	content = []byte(strings.ReplaceAll(signed, "\n", "\r\n"))
	hdr, b64, ok := strings.Cut(strings.TrimPrefix(parts[2], "\n"), "\n\n")
	if !ok || !strings.Contains(hdr, "base64") {
		return nil, nil, errors.New("certs: signature part is not base64")
	}
	sig, err = base64.StdEncoding.DecodeString(strings.Join(strings.Fields(b64), ""))
	if err != nil {
		return nil, nil, fmt.Errorf("certs: signature part: %w", err)
	}
	return content, sig, nil
}
