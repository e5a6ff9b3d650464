package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/spf13/pflag"

	"github.com/dyad-db/dyad/internal/ddsnet"
)

// --dds-waitset reaches the pair's transport (ddsnet.Config.WaitSet, from
// the replication config's WaitInC, which server.New checks against it),
// and its default is defaultDDSWaitSet.
func TestServeDDSWaitSetFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{{nil, defaultDDSWaitSet}, {[]string{"--dds-waitset=true"}, true}, {[]string{"--dds-waitset=false"}, false}} {
		t.Run(fmt.Sprint(c.args), func(t *testing.T) {
			f := &serveFlags{}
			fl := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			bindServeFlags(fl, f)
			args := append([]string{
				"--name", "a", "--data-dir", t.TempDir(),
				"--initial-cluster", "a=http://127.0.0.1:2380,b=http://127.0.0.2:2380",
				"--listen-client-urls", "http://" + freeAddr(t),
				"--listen-metrics-urls", "http://" + freeAddr(t),
				"--log-level", "error",
			}, c.args...)
			if err := fl.Parse(args); err != nil {
				t.Fatal(err)
			}
			errStop := errors.New("the test stops the start here")
			var got *bool
			err := runServe(context.Background(), fl, f, io.Discard, func(cfg ddsnet.Config) (*ddsnet.Net, error) {
				got = &cfg.WaitSet
				return nil, errStop
			})
			if !errors.Is(err, errStop) {
				t.Fatalf("runServe: %v, want the transport's error", err)
			}
			if got == nil || *got != c.want {
				t.Fatalf("ddsnet.Config.WaitSet %v, want %v", got, c.want)
			}
		})
	}
}
