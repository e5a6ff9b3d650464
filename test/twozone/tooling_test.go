package twozone

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dyad-db/dyad/test/testutil"
)

// ctlAt runs the real etcdctl against node i's endpoint alone and decodes
// its JSON output (-w json) into v.
func (z *zones) ctlAt(t *testing.T, bin string, i int, v any, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	full := append([]string{"--endpoints=" + z.endpoint(i), "--dial-timeout=5s", "--command-timeout=10s", "-w", "json"}, args...)
	cmd := exec.CommandContext(ctx, bin, full...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCDCTL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("etcdctl %s: %v\n%s", strings.Join(full, " "), err, out)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("etcdctl %s: %v\n%s", strings.Join(full, " "), err, out)
	}
}

// TestEtcdctlReachesBothZones: given one node's endpoint, a real etcdctl
// lists both zones (member list, each with its client URL, neither a
// learner) and reaches both with --cluster (endpoint health and endpoint
// status), which take their endpoints from MemberList.
func TestEtcdctlReachesBothZones(t *testing.T) {
	bin := os.Getenv("DYAD_ETCDCTL_BIN")
	if bin == "" {
		bin = "etcdctl"
	}
	bin = testutil.RequireBinary(t, bin)
	z := newZones(t)
	z.start(0)
	z.start(1)
	leader := int(z.WaitPair(30 * time.Second))
	clientURLs := []string{"http://" + z.endpoint(0), "http://" + z.endpoint(1)}

	type member struct {
		ID         uint64   `json:"ID"`
		Name       string   `json:"name"`
		PeerURLs   []string `json:"peerURLs"`
		ClientURLs []string `json:"clientURLs"`
		IsLearner  bool     `json:"isLearner"`
	}
	for i := 0; i < 2; i++ {
		// The peer's client URL arrives with its announcement, every
		// couple of seconds: wait for it on this node.
		var got []member
		deadline := time.Now().Add(30 * time.Second)
		for {
			var r struct {
				Members []member `json:"members"`
			}
			z.ctlAt(t, bin, i, &r, "member", "list")
			got = r.Members
			if len(got) == 2 && len(got[1].ClientURLs) > 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if len(got) != 2 {
			t.Fatalf("member list through %c: %+v, want both zones", 'a'+i, got)
		}
		sort.Slice(got, func(x, y int) bool { return got[x].Name < got[y].Name })
		for j, m := range got {
			if m.Name != string(rune('a'+j)) || len(m.ClientURLs) != 1 || m.ClientURLs[0] != clientURLs[j] || len(m.PeerURLs) != 1 || m.IsLearner || m.ID == 0 {
				t.Errorf("member list through %c: member %d = %+v, want name %c, client URL %s, a peer URL, not a learner", 'a'+i, j, m, 'a'+j, clientURLs[j])
			}
		}
	}

	var health []struct {
		Endpoint string `json:"endpoint"`
		Health   bool   `json:"health"`
		Error    string `json:"error"`
	}
	z.ctlAt(t, bin, 1-leader, &health, "endpoint", "health", "--cluster")
	var healthy []string
	for _, h := range health {
		if !h.Health {
			t.Errorf("endpoint health --cluster: %s unhealthy: %s", h.Endpoint, h.Error)
		}
		healthy = append(healthy, h.Endpoint)
	}
	sort.Strings(healthy)
	if strings.Join(healthy, " ") != strings.Join(clientURLs, " ") {
		t.Errorf("endpoint health --cluster checked %v, want %v", healthy, clientURLs)
	}

	var status []struct {
		Endpoint string `json:"Endpoint"`
		Status   struct {
			Header struct {
				MemberID uint64 `json:"member_id"`
			} `json:"header"`
			Leader uint64 `json:"leader"`
		} `json:"Status"`
	}
	z.ctlAt(t, bin, 1-leader, &status, "endpoint", "status", "--cluster")
	if len(status) != 2 {
		t.Fatalf("endpoint status --cluster: %+v, want both zones", status)
	}
	leaders := 0
	for _, s := range status {
		if s.Status.Leader != status[0].Status.Leader || s.Status.Leader == 0 {
			t.Errorf("endpoint status --cluster: %s names leader %x, %s names %x", s.Endpoint, s.Status.Leader, status[0].Endpoint, status[0].Status.Leader)
		}
		if s.Status.Header.MemberID == s.Status.Leader {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("endpoint status --cluster: %d endpoints are the leader, want 1: %+v", leaders, status)
	}
}

// TestDyadStatusShowsSync: dyad status over both nodes of a formed pair
// shows both synchronous, the primary with a timed round trip after a
// write; after the replica is killed the primary shows solo.
func TestDyadStatusShowsSync(t *testing.T) {
	z := newZones(t)
	z.start(0)
	z.start(1)
	leader := int(z.WaitPair(30 * time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := z.client(leader).Put(ctx, "status", "v"); err != nil {
		t.Fatal(err)
	}
	type row struct {
		Endpoint, Role, Unreachable string
		Sync                        *bool
		PeerRoundTripSeconds        float64
	}
	status := func() map[string]row {
		t.Helper()
		out, err := exec.CommandContext(ctx, z.bin, "status", "--endpoints", z.endpoint(0)+","+z.endpoint(1), "-w", "json").Output()
		var rows []row
		if jerr := json.Unmarshal(out, &rows); jerr != nil {
			t.Fatalf("dyad status -w json: %v (exit %v)\n%s", jerr, err, out)
		}
		m := map[string]row{}
		for _, r := range rows {
			m[r.Endpoint] = r
		}
		return m
	}
	// Liveness is published every tick: wait for both nodes to report
	// sync.
	deadline := time.Now().Add(20 * time.Second)
	var rows map[string]row
	for {
		rows = status()
		p, r := rows[z.endpoint(leader)], rows[z.endpoint(1-leader)]
		if p.Sync != nil && *p.Sync && r.Sync != nil && *r.Sync || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	p, r := rows[z.endpoint(leader)], rows[z.endpoint(1-leader)]
	if p.Role != "primary" || p.Sync == nil || !*p.Sync || p.PeerRoundTripSeconds <= 0 {
		t.Errorf("primary's row %+v: want primary, sync, a round trip timed", p)
	}
	if r.Role != "replica" || r.Sync == nil || !*r.Sync {
		t.Errorf("replica's row %+v: want replica, sync", r)
	}

	if out, err := exec.CommandContext(ctx, z.bin, "status", "--endpoints", z.endpoint(0)+","+z.endpoint(1)).Output(); err == nil {
		t.Logf("dyad status:\n%s", out)
	}

	z.kill(1 - leader)
	deadline = time.Now().Add(30 * time.Second)
	for {
		rows = status()
		p = rows[z.endpoint(leader)]
		if p.Role == "solo" || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if p.Role != "solo" || p.Sync == nil || *p.Sync {
		t.Errorf("primary's row after the replica was killed %+v: want solo, not sync", p)
	}
	if u := rows[z.endpoint(1-leader)].Unreachable; u == "" {
		t.Errorf("killed replica's row %+v: want unreachable", rows[z.endpoint(1-leader)])
	}
}
