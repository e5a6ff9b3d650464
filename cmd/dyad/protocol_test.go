package main

import (
	"strings"
	"testing"

	"github.com/dyad-db/dyad/internal/repl"
)

// TestMinProtocolVersionFlag: --min-protocol-version (or
// DYAD_MIN_PROTOCOL_VERSION) reaches the pair's replication config, and a
// version this build does not speak is refused at start.
func TestMinProtocolVersionFlag(t *testing.T) {
	pair := []string{"--name", "a", "--initial-cluster", "a=http://127.0.0.1:2380,b=http://127.0.0.2:2380"}
	own := repl.Supported()
	tests := []struct {
		name    string
		args    []string
		env     []string
		want    uint16
		wantErr string
	}{
		{name: "default", want: 0},
		{name: "flag", args: []string{"--min-protocol-version", "2"}, want: 2},
		{name: "environment", env: []string{"DYAD_MIN_PROTOCOL_VERSION=2"}, want: 2},
		{name: "above this build", args: []string{"--min-protocol-version", "9"}, wantErr: "this build speaks protocol versions " + own.String()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fl, f := parsedServe(t, append(append([]string{}, pair...), tc.args...)...)
			if _, err := applyEnv(fl, tc.env); err != nil {
				t.Fatal(err)
			}
			p, err := f.cluster.plan(f.name)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.repl.MinProtocol != tc.want {
				t.Fatalf("minimum protocol %d, want %d", p.repl.MinProtocol, tc.want)
			}
		})
	}
}
