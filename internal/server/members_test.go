package server_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/status"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/transport"
)

// TestPairMemberListShowsBothZones: each node of a pair lists itself and
// its peer, each with the peer and client URLs that node advertises, so
// that tools which discover endpoints from MemberList reach both zones.
func TestPairMemberListShowsBothZones(t *testing.T) {
	net := transport.NewMemNet()
	cfgs := [2]server.Config{pairConfig(net, t.TempDir(), 1, true), pairConfig(net, t.TempDir(), 2, false)}
	for i := range cfgs {
		cfgs[i].PeerURLs = []string{fmt.Sprintf("http://10.0.%d.1:2380", i+1)}
		cfgs[i].ClientURLs = []string{fmt.Sprintf("http://10.0.%d.1:2379", i+1)}
	}
	for i := range cfgs {
		other := cfgs[1-i]
		cfgs[i].Peer = &server.Member{ID: other.MemberID, Name: other.Name, PeerURLs: other.PeerURLs}
	}
	a, b := startNode(t, cfgs[0]), startNode(t, cfgs[1])
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)

	for i, n := range []*node{a, b} {
		self, peer := cfgs[i], cfgs[1-i]
		want := fmt.Sprintf("[{%x %s %v %v} {%x %s %v %v}]",
			self.MemberID, self.Name, self.PeerURLs, self.ClientURLs, peer.MemberID, peer.Name, peer.PeerURLs, peer.ClientURLs)
		// The peer's client URLs come from its announcement, which may
		// still be on its way: wait for it, up to many periods.
		deadline := time.Now().Add(30 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			resp, err := n.cli.MemberList(ctx)
			cancel()
			if err != nil {
				t.Fatalf("%s: member list: %v", self.Name, err)
			}
			var got []string
			for _, m := range resp.Members {
				if m.IsLearner {
					t.Errorf("%s lists %s as a learner", self.Name, m.Name)
				}
				got = append(got, fmt.Sprintf("{%x %s %v %v}", m.ID, m.Name, m.PeerURLs, m.ClientURLs))
			}
			if s := "[" + strings.Join(got, " ") + "]"; s == want {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("%s: member list = %s, want %s", self.Name, s, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Membership changes are refused as before, for either member; an
	// unknown ID is "member not found", as in etcd.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := a.cli.MemberRemove(ctx, cfgs[1].MemberID); status.Convert(err).Message() != "dyad: membership is set by --initial-cluster; runtime reconfiguration is not supported" {
		t.Errorf("removing the peer: %v, want the membership refusal", err)
	}
	if _, err := a.cli.MemberRemove(ctx, 0x77); !errors.Is(err, rpctypes.ErrMemberNotFound) {
		t.Errorf("removing an unknown member: %v, want etcdserver: member not found", err)
	}
}
