package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dyad-db/dyad/internal/certs"
)

func TestCertsCmd(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		wantErr   string
		wantFiles []string
	}{
		{name: "pair and two clients", args: []string{"--node", "a=10.0.0.1,a.example", "--node", "b=10.0.0.2", "--client", "kube-apiserver", "--client", "etcdctl"},
			wantFiles: []string{"ca.crt", "ca.key", "a.crt", "a.key", "a-peer.crt", "a-peer.key", "b.crt", "b-peer.key", "kube-apiserver.crt", "etcdctl.key", certs.GovernanceFile, certs.PermissionsFile}},
		{name: "node without hosts", args: []string{"--node", "a"}, wantErr: "want NAME=HOST"},
		{name: "node with empty hosts", args: []string{"--node", "a="}, wantErr: "want NAME=HOST"},
		{name: "no node", args: nil, wantErr: "at least one node"},
		{name: "domain out of range", args: []string{"--node", "a=h", "--dds-domain", "231"}, wantErr: "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "pki")
			cmd := certsCmd()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(append([]string{"--dir", dir}, tc.args...))
			err := cmd.Execute()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range tc.wantFiles {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("%s: %v", f, err)
				}
				if !strings.Contains(out.String(), filepath.Join(dir, f)+"\n") {
					t.Errorf("%s not listed in the output", f)
				}
			}
		})
	}
}
