package main

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/dyad-db/dyad/internal/ddsnet"
)

// freeAddr returns a loopback address no listener holds right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestServeListensBeforeDDS checks that a pair's node binds its client and
// metrics ports before it makes its DDS transport, so that a client that
// connects while the participant starts is not refused, and that a
// transport that fails to start releases the ports again.
func TestServeListensBeforeDDS(t *testing.T) {
	client, metrics := freeAddr(t), freeAddr(t)
	f := &serveFlags{}
	fl := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	bindServeFlags(fl, f)
	err := fl.Parse([]string{
		"--name", "a", "--data-dir", t.TempDir(),
		"--initial-cluster", "a=http://127.0.0.1:2380,b=http://127.0.0.2:2380",
		"--listen-client-urls", "http://" + client,
		"--listen-metrics-urls", "http://" + metrics,
		"--log-level", "error",
	})
	if err != nil {
		t.Fatal(err)
	}
	errStop := errors.New("the test stops the start here")
	called := false
	var dialErrs []error
	newTransport := func(ddsnet.Config) (*ddsnet.Net, error) {
		called = true
		for _, addr := range []string{client, metrics} {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err == nil {
				c.Close()
			}
			dialErrs = append(dialErrs, err)
		}
		return nil, errStop
	}
	err = runServe(context.Background(), fl, f, io.Discard, newTransport)
	if !errors.Is(err, errStop) {
		t.Fatalf("runServe: %v, want the transport's error", err)
	}
	if !called {
		t.Fatal("the transport was never made")
	}
	for i, addr := range []string{client, metrics} {
		if dialErrs[i] != nil {
			t.Errorf("connecting to %s while the transport was made: %v", addr, dialErrs[i])
		}
		// Released after the failed start.
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s is still bound after the failed start: %v", addr, err)
			continue
		}
		l.Close()
	}
}
