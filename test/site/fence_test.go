package site

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/testenv"
	"github.com/dyad-db/dyad/test/testutil"
)

// redfishBMC is zone a's BMC as the shipped Redfish fence sees it, on
// loopback: system 1 is On until ForceOff is posted, then reports Off on
// the second state read after it.
type redfishBMC struct {
	password string

	mu        sync.Mutex
	resets    []string
	readsOff  int  // state reads since the reset
	offServed bool // Off has been reported
}

func (b *redfishBMC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if u, p, ok := r.BasicAuth(); !ok || u != "fence" || p != b.password {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/redfish/v1/Systems/1":
		state := "On"
		if len(b.resets) > 0 {
			b.readsOff++
			if b.readsOff >= 2 {
				state, b.offServed = "Off", true
			}
		}
		fmt.Fprintf(w, `{"Id": "1", "PowerState": "%s"}`, state)
	case r.Method == http.MethodPost && r.URL.Path == "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset":
		body, _ := io.ReadAll(r.Body)
		b.resets = append(b.resets, string(body))
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, r)
	}
}

// fenceFlags starts a fake BMC and returns zone b's extra serve flags that
// fence zone a through it with the shipped Redfish script, given the
// password the script is to use.
func fenceFlags(t *testing.T, bmc *redfishBMC, password string) []string {
	t.Helper()
	testenv.NeedCommand(t, "curl", "curl")
	srv := httptest.NewTLSServer(bmc)
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca := write("bmc-ca.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})))
	pass := write("bmc.pass", password)
	env := write("fence.env", fmt.Sprintf("BMC_URL=%s\nBMC_USER=fence\nBMC_PASSWORD_FILE=%s\nBMC_CACERT=%s\nBMC_SYSTEM=1\nFENCE_WAIT=20\nFENCE_POLL=0.1\n",
		srv.URL, pass, ca))
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "deploy/fence/fence-redfish.sh")
	return []string{"--fence-command=DYAD_FENCE_ENV=" + env + " " + script, "--fence-timeout=60s"}
}

// TestRedfishFenceOnPair: with the shipped Redfish fence as zone b's
// --fence-command, the loss of zone a's node makes b power a off through
// the (fake, loopback) BMC once, and b takes writes only after the BMC has
// reported a Off. With a password the BMC refuses, b does not promote: it
// logs the failed fence and refuses writes.
func TestRedfishFenceOnPair(t *testing.T) {
	t.Run("powers off, then promotes", func(t *testing.T) {
		bmc := &redfishBMC{password: "secret"}
		_, nodes, pki, procs := startStaticPodPairWith(t, map[string][]string{"b": fenceFlags(t, bmc, "secret")})
		cli := tlsEtcdClient(t, pki, "127.0.0.1:"+nodes["b"].client)
		procs["a"].cmd.Process.Kill()
		<-procs["a"].exited
		killed := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), startupWait)
		defer cancel()
		for {
			actx, acancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := cli.Put(actx, "after-fence", "x")
			acancel()
			if err == nil {
				t.Logf("zone b took its first write %v after zone a's node was killed (lease + fence)", time.Since(killed).Round(time.Millisecond))
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("zone b took no write after zone a died: %v", err)
			}
		}
		bmc.mu.Lock()
		defer bmc.mu.Unlock()
		if !bmc.offServed {
			t.Fatal("zone b took a write before the BMC reported zone a Off")
		}
		if len(bmc.resets) != 1 || !strings.Contains(bmc.resets[0], `"ForceOff"`) {
			t.Fatalf("resets posted %q, want one ForceOff", bmc.resets)
		}
	})
	t.Run("fence refused, no promotion", func(t *testing.T) {
		bmc := &redfishBMC{password: "secret"}
		_, nodes, pki, procs := startStaticPodPairWith(t, map[string][]string{"b": fenceFlags(t, bmc, "wrong")})
		cli := tlsEtcdClient(t, pki, "127.0.0.1:"+nodes["b"].client)
		procs["a"].cmd.Process.Kill()
		<-procs["a"].exited
		deadline := time.Now().Add(startupWait)
		for !strings.Contains(procs["b"].logText(t), "fence command failed; not promoting") {
			if time.Now().After(deadline) {
				t.Fatalf("zone b never reported the failed fence within %v", startupWait)
			}
			time.Sleep(100 * time.Millisecond) // poll interval
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := cli.Put(ctx, "after-failed-fence", "x"); err == nil {
			t.Fatal("zone b took a write although its fence failed")
		}
		bmc.mu.Lock()
		defer bmc.mu.Unlock()
		if !slices.Equal(bmc.resets, nil) {
			t.Fatalf("the BMC took resets %q with a wrong password", bmc.resets)
		}
	})
}
