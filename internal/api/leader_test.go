package api

import (
	"context"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/metadata"
)

func TestRequiresLeader(t *testing.T) {
	for _, c := range []struct {
		name string
		md   metadata.MD
		want bool
	}{
		{"no metadata", nil, false},
		{"other keys", metadata.Pairs("authorization", "x", "user-agent", "etcd-client"), false},
		{"has leader", metadata.Pairs("user-agent", "etcd-client", rpctypes.MetadataRequireLeaderKey, rpctypes.MetadataHasLeader), true},
		{"other value", metadata.Pairs(rpctypes.MetadataRequireLeaderKey, "false"), false},
		{"mixed case key", metadata.MD{"HasLeader": {rpctypes.MetadataHasLeader}}, true},
	} {
		ctx := context.Background()
		if c.md != nil {
			ctx = metadata.NewIncomingContext(ctx, c.md)
		}
		if got := requiresLeader(ctx); got != c.want {
			t.Errorf("%s: requiresLeader = %v, want %v", c.name, got, c.want)
		}
	}
}

// The check runs on every request: without the key it must not copy the
// request's metadata.
func TestRequiresLeaderAllocatesNothingWithoutTheKey(t *testing.T) {
	ctx := metadata.NewIncomingContext(context.Background(),
		metadata.Pairs("authorization", "token", "user-agent", "etcd-client", ":authority", "127.0.0.1:2379"))
	if allocs := testing.AllocsPerRun(200, func() {
		if requiresLeader(ctx) {
			t.Fatal("no hasleader key, yet the request requires a leader")
		}
	}); allocs != 0 {
		t.Fatalf("requiresLeader allocates %.1f objects per request, want 0", allocs)
	}
}
