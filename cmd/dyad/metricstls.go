package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
)

// metricsListener serves an https:// --listen-metrics-urls over TLS, as
// etcd does: with the client port's server certificate and the same client
// certificate check (a site whose client port requires mTLS requires it of
// scrapers too). An http:// URL stays plaintext even when the client port
// is TLS, which is what kubeadm's http://127.0.0.1:2381 relies on. An
// https:// URL without a certificate is refused rather than served in the
// clear.
func metricsListener(u *url.URL, l net.Listener, clientTLS *tls.Config) (net.Listener, error) {
	if u.Scheme != "https" {
		return l, nil
	}
	if clientTLS == nil {
		return nil, fmt.Errorf("--listen-metrics-urls %s is https but no --cert-file/--key-file is given", u)
	}
	cfg := clientTLS.Clone()
	// The client port offers only h2 (gRPC); scrapers speak HTTP/1.1,
	// which is what the plain http.Server behind this listener serves.
	cfg.NextProtos = []string{"http/1.1"}
	return tls.NewListener(l, cfg), nil
}
