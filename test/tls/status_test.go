package tls

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dyad-db/dyad/test/testutil"
)

// TestDyadStatusOverTLS: dyad status reaches a node whose client port
// requires client certificates when given etcdctl's --cacert/--cert/--key,
// reports it in -w json with dyad's replication columns (a single node:
// role single, not sync), and shows it unreachable without a client
// certificate.
func TestDyadStatusOverTLS(t *testing.T) {
	dyad := testutil.BuildDyad(t)
	dir := pki(t, dyad)
	url := startTLS(t, testutil.TargetDyad, dyad, dir, []string{"--trusted-ca-file=" + filepath.Join(dir, "ca.crt")})
	status := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, dyad, append([]string{"status", "--endpoints", url, "--timeout", "5s"}, args...)...).Output()
		return string(out), err
	}
	ca := "--cacert=" + filepath.Join(dir, "ca.crt")
	cert, key := "--cert="+filepath.Join(dir, "kube-apiserver.crt"), "--key="+filepath.Join(dir, "kube-apiserver.key")

	out, err := status(ca, cert, key, "-w", "json")
	if err != nil {
		t.Fatalf("dyad status with a client certificate: %v\n%s", err, out)
	}
	var nodes []struct {
		Endpoint, MemberID, Leader, Role, Unreachable string
		Sync                                          *bool
		LagRevisions                                  *int64
		Revision                                      int64
	}
	if err := json.Unmarshal([]byte(out), &nodes); err != nil {
		t.Fatalf("dyad status -w json: %v\n%s", err, out)
	}
	if len(nodes) != 1 {
		t.Fatalf("dyad status -w json: %d nodes, want 1\n%s", len(nodes), out)
	}
	n := nodes[0]
	if n.Endpoint != url || n.Unreachable != "" || n.MemberID == "" || n.Leader != n.MemberID || n.Role != "single" ||
		n.Sync == nil || *n.Sync || n.LagRevisions == nil || n.Revision < 2 {
		t.Errorf("dyad status -w json = %s; want %s reached, leading itself, role single, not sync, lag 0, revision >= 2 (startTLS wrote)", out, url)
	}

	out, err = status("--write-out=table", ca, cert, key)
	if err != nil {
		t.Fatalf("dyad status (table): %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "SYNC") || !strings.Contains(lines[0], "PEER RTT") ||
		!strings.Contains(lines[1], "leading") || !strings.Contains(lines[1], "single") {
		t.Errorf("dyad status table =\n%s\nwant a header with SYNC and PEER RTT and one leading, single node", out)
	}

	out, err = status(ca, "-w", "json")
	if err == nil {
		t.Fatalf("dyad status without a client certificate against mTLS succeeded:\n%s", out)
	}
	if !strings.Contains(out, `"unreachable"`) {
		t.Errorf("dyad status without a client certificate = %s; want the endpoint shown unreachable", out)
	}
}
