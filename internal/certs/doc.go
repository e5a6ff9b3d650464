// Package certs makes development key material for a secure dyad pair:
// a CA, TLS server certificates for each node's client URLs, a TLS client
// certificate (kube-apiserver, etcdctl), one DDS Security identity
// certificate per node, and the governance and permissions documents that
// Cyclone DDS's access-control plugin requires, signed as S/MIME.
//
// # One CA
//
// The development CA plays every CA role: it signs the TLS server and client
// certificates, it is the DDS identity CA (authentication plugin) and the
// DDS permissions CA (access-control plugin, which checks that both signed
// documents were signed by exactly that certificate). Production sites may
// split these roles; dyad's flags take separate files for each.
//
// # Signed documents
//
// Cyclone reads the governance and permissions files with OpenSSL's
// SMIME_read_PKCS7 and checks them with PKCS7_verify(PKCS7_TEXT |
// PKCS7_NOVERIFY | PKCS7_NOINTERN) against the permissions CA certificate.
// So a document must be S/MIME multipart/signed (RFC 5751 §3.4.3) whose
// first part is "Content-Type: text/plain" followed by the XML, with CRLF
// line ends, and whose second part is a detached PKCS#7 SignedData made by
// the CA's key itself. The PKCS#7 structure is built with
// github.com/smallstep/pkcs7 (the maintained fork of Mozilla's package, used
// by step-ca) instead of shelling out to openssl: no run-time dependency on a
// binary, errors as Go values, and testable without a subprocess. Only the
// MIME framing around it is written here, because no Go library writes
// S/MIME and it is a few fixed lines.
//
// Keys are ECDSA P-256: Cyclone's authentication plugin accepts RSA-2048
// and EC prime256v1 identities, and P-256 is the cheaper handshake.
package certs
