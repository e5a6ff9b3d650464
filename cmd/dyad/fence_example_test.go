package main

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dyad-db/dyad/internal/testenv"
)

// The shipped fence examples, relative to this package.
const (
	redfishScript = "../../deploy/fence/fence-redfish.sh"
	ipmiScript    = "../../deploy/fence/fence-ipmi.sh"
)

// fakeBMC is a Redfish service on loopback with one system: it answers
// PowerState On until ForceOff was posted and offAfter more state reads
// were made, then Off. It checks the account on every request.
type fakeBMC struct {
	user, password string
	offAfter       int

	mu         sync.Mutex
	resets     []string // ResetType of every reset posted
	readsAfter int      // state reads since the first ForceOff
	badAuth    int
}

func (b *fakeBMC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if u, p, ok := r.BasicAuth(); !ok || u != b.user || p != b.password {
		b.badAuth++
		http.Error(w, `{"error": "unauthorized"}`, http.StatusUnauthorized)
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/redfish/v1/Systems":
		fmt.Fprint(w, `{"Members@odata.count": 1,
  "Members": [ { "@odata.id": "/redfish/v1/Systems/node-a" } ]}`)
	case r.Method == http.MethodGet && r.URL.Path == "/redfish/v1/Systems/node-a":
		state := "On"
		if len(b.resets) > 0 {
			if b.readsAfter >= b.offAfter {
				state = "Off"
			}
			b.readsAfter++
		}
		fmt.Fprintf(w, "{\n  \"Id\": \"node-a\",\n  \"PowerState\": \"%s\"\n}", state)
	case r.Method == http.MethodPost && r.URL.Path == "/redfish/v1/Systems/node-a/Actions/ComputerSystem.Reset":
		var body struct{ ResetType string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b.resets = append(b.resets, body.ResetType)
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, r)
	}
}

// fencePlan is the pair's plan for a --fence-command, as serve builds it.
func fencePlan(t *testing.T, cmdline string) func() error {
	t.Helper()
	_, f := parsedServe(t, "--name", "b", "--initial-cluster", "a=http://127.0.0.1:2380,b=http://127.0.0.2:2380",
		"--fence-command", cmdline, "--fence-timeout", "60s")
	p, err := f.cluster.plan(f.name)
	if err != nil {
		t.Fatal(err)
	}
	return func() error {
		// As the replication loop calls it: bounded by --fence-timeout.
		ctx, cancel := context.WithTimeout(context.Background(), p.repl.FenceTimeout)
		defer cancel()
		return p.repl.Fence(ctx)
	}
}

// writeFile writes name in dir and returns its path.
func writeFile(t *testing.T, dir, name, text string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRedfishFenceExample runs deploy/fence/fence-redfish.sh as the fence
// command, against a fake BMC on loopback over TLS: it powers the system
// off once and succeeds only after the BMC reports Off; a wrong password
// or a BMC that never reports Off fails the fence.
func TestRedfishFenceExample(t *testing.T) {
	testenv.NeedCommand(t, "curl", "curl")
	script, err := filepath.Abs(redfishScript)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		password     string // what the script is given; the BMC wants "s3cr\"et"
		offAfter     int
		wait         string // FENCE_WAIT
		wantErr      bool
		wantResets   []string
		wantMinReads int
	}{
		{name: "powers off", password: `s3cr"et`, offAfter: 3, wait: "60", wantResets: []string{"ForceOff"}, wantMinReads: 4},
		{name: "wrong password", password: "nope", offAfter: 0, wait: "60", wantErr: true},
		{name: "never reports off", password: `s3cr"et`, offAfter: 1 << 30, wait: "0.3", wantErr: true, wantResets: []string{"ForceOff"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bmc := &fakeBMC{user: "fence", password: `s3cr"et`, offAfter: tc.offAfter}
			srv := httptest.NewTLSServer(bmc)
			defer srv.Close()
			dir := t.TempDir()
			ca := writeFile(t, dir, "bmc-ca.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})), 0o600)
			pass := writeFile(t, dir, "bmc.pass", tc.password, 0o600)
			env := writeFile(t, dir, "fence.env", fmt.Sprintf(
				"BMC_URL=%s\nBMC_USER=fence\nBMC_PASSWORD_FILE=%s\nBMC_CACERT=%s\nFENCE_WAIT=%s\nFENCE_POLL=0.05\n",
				srv.URL, pass, ca, tc.wait), 0o600)
			err := fencePlan(t, "DYAD_FENCE_ENV="+env+" "+script)()
			bmc.mu.Lock()
			defer bmc.mu.Unlock()
			if tc.wantErr != (err != nil) {
				t.Fatalf("fence = %v, want failure %v", err, tc.wantErr)
			}
			if !slices.Equal(bmc.resets, tc.wantResets) {
				t.Errorf("resets posted %v, want %v", bmc.resets, tc.wantResets)
			}
			if bmc.readsAfter < tc.wantMinReads {
				t.Errorf("the fence ended after %d state reads, before the BMC reported Off", bmc.readsAfter)
			}
			if tc.password != bmc.password && bmc.badAuth == 0 {
				t.Errorf("the BMC never saw the wrong password")
			}
			if tc.password == bmc.password && bmc.badAuth != 0 {
				t.Errorf("%d requests with a wrong account", bmc.badAuth)
			}
		})
	}
}

// fakeIpmitool is an ipmitool for the test's PATH: it logs its arguments,
// keeps the chassis power in a state file, and reports it off only after
// offAfter status queries once powered off. "fail" in the state file makes
// power off fail.
const fakeIpmitool = `#!/bin/sh
dir=$(dirname "$0")
echo "$*" >>"$dir/calls"
state=$(cat "$dir/state")
case "$*" in
*"chassis power off")
	[ "$state" = fail ] && { echo "Error: Unable to establish IPMI v2 / RMCP+ session" >&2; exit 1; }
	echo "Chassis Power Control: Down/Off"; echo 0 >"$dir/state" ;;
*"chassis power status")
	case "$state" in
	on|fail) echo "Chassis Power is on" ;;
	*) n=$((state + 1)); echo "$n" >"$dir/state"
	   if [ "$n" -gt OFFAFTER ]; then echo "Chassis Power is off"; else echo "Chassis Power is on"; fi ;;
	esac ;;
*) echo "unexpected: $*" >&2; exit 2 ;;
esac
`

// TestIPMIFenceExample runs deploy/fence/fence-ipmi.sh as the fence command
// with a fake ipmitool: lanplus to the configured BMC with the password
// file, power off once, success only once the status says off; a failing
// power off fails the fence.
func TestIPMIFenceExample(t *testing.T) {
	script, err := filepath.Abs(ipmiScript)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		state   string
		wantErr bool
	}{
		{name: "powers off", state: "on"},
		{name: "power off fails", state: "fail", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := t.TempDir()
			writeFile(t, bin, "ipmitool", strings.Replace(fakeIpmitool, "OFFAFTER", "2", 1), 0o755)
			writeFile(t, bin, "state", tc.state+"\n", 0o600)
			dir := t.TempDir()
			pass := writeFile(t, dir, "bmc.pass", "secret", 0o600)
			env := writeFile(t, dir, "fence.env", fmt.Sprintf(
				"BMC_HOST=127.0.0.1\nBMC_USER=fence\nBMC_PASSWORD_FILE=%s\nFENCE_WAIT=60\nFENCE_POLL=0.05\n", pass), 0o600)
			err := fencePlan(t, "PATH="+bin+":$PATH DYAD_FENCE_ENV="+env+" "+script)()
			if tc.wantErr != (err != nil) {
				t.Fatalf("fence = %v, want failure %v", err, tc.wantErr)
			}
			b, err := os.ReadFile(filepath.Join(bin, "calls"))
			if err != nil {
				t.Fatal(err)
			}
			calls := strings.Split(strings.TrimSpace(string(b)), "\n")
			prefix := "-I lanplus -H 127.0.0.1 -U fence -f " + pass + " "
			var ops []string
			for _, c := range calls {
				if !strings.HasPrefix(c, prefix) {
					t.Fatalf("ipmitool %q: want lanplus to the BMC with the password file", c)
				}
				ops = append(ops, c[strings.Index(c, "chassis"):])
			}
			want := []string{"chassis power status", "chassis power off", "chassis power status", "chassis power status", "chassis power status"}
			if tc.wantErr {
				want = want[:2]
			}
			if !slices.Equal(ops, want) {
				t.Fatalf("ipmitool calls %q, want %q", ops, want)
			}
		})
	}
}
