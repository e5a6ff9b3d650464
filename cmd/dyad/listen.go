package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
)

// listeners are serve's bound sockets: the client URLs (gRPC and HTTP/1.1
// on one port) and the HTTP-only ones (--listen-metrics-urls and
// --listen-client-http-urls).
type listeners struct {
	client []net.Listener
	http   []net.Listener
}

// listenAll binds every listener of serve, or none: on an error it closes
// what it bound.
//
// serve calls it before anything slow, the DDS participant and the data
// file included: the kernel accepts connections from then on and holds
// them until the servers take them, once the node's state is loaded. A
// client retrying through a restart so connects at its next attempt and
// waits for the load, instead of being refused and backing off (gRPC's
// reconnect backoff starts at a second) past the moment the node serves.
// A bad address still fails start-up before anything is served.
func listenAll(clientURLs, metricsURLs, httpURLs []*url.URL, tlsCfg *tls.Config) (ls *listeners, err error) {
	ls = &listeners{}
	defer func() {
		if err != nil {
			ls.close()
			ls = nil
		}
	}()
	for _, u := range clientURLs {
		l, err := net.Listen("tcp", u.Host)
		if err != nil {
			return ls, fmt.Errorf("listen on %s: %w", u, err)
		}
		ls.client = append(ls.client, l)
	}
	for _, u := range metricsURLs {
		l, err := net.Listen("tcp", u.Host)
		if err != nil {
			return ls, fmt.Errorf("listen on %s: %w", u, err)
		}
		ml, err := metricsListener(u, l, tlsCfg)
		if err != nil {
			l.Close()
			return ls, err
		}
		ls.http = append(ls.http, ml)
	}
	// --listen-client-http-urls are served like the metrics URLs, behind
	// the client TLS when they are https (HTTP/1.1 only in ALPN: the HTTP
	// server here speaks nothing else).
	for _, u := range httpURLs {
		l, err := net.Listen("tcp", u.Host)
		if err != nil {
			return ls, fmt.Errorf("listen on %s: %w", u, err)
		}
		if tlsCfg != nil {
			httpTLS := tlsCfg.Clone()
			httpTLS.NextProtos = []string{"http/1.1"}
			l = tls.NewListener(l, httpTLS)
		}
		ls.http = append(ls.http, l)
	}
	return ls, nil
}

// close closes every listener (those a server took already are closed
// by it as well; closing twice is harmless). A nil ls holds none.
func (ls *listeners) close() error {
	if ls == nil {
		return nil
	}
	var errs []error
	for _, l := range append(ls.client, ls.http...) {
		if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
