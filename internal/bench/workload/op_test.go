package workload

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestIsUnsupported covers the ways servers refuse a request kind: gRPC
// Unimplemented, and kine's plain errors, which reach the client as Unknown.
func TestIsUnsupported(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.Unimplemented, "serializable is not implemented by kine"), true},
		{status.Error(codes.Unknown, "lease keep alive is not supported"), true},
		{fmt.Errorf("probe: %w", status.Error(codes.Unknown, "lease revoke is not supported")), true},
		{status.Error(codes.Unavailable, "connection refused"), false},
		{errors.New("context deadline exceeded"), false},
		{nil, false},
	} {
		if got := IsUnsupported(c.err); got != c.want {
			t.Errorf("IsUnsupported(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestClientSeedReproducible checks that a client's stream depends only on
// the seed, the op, the client count and its index.
func TestClientSeedReproducible(t *testing.T) {
	a1, a2 := clientSeed(1, Put, 8, 3)
	b1, b2 := clientSeed(1, Put, 8, 3)
	if a1 != b1 || a2 != b2 {
		t.Fatal("same inputs, different seeds")
	}
	if _, c2 := clientSeed(1, Put, 8, 4); c2 == a2 {
		t.Error("clients 3 and 4 share a stream")
	}
}

// TestSplitList covers the flag lists: split on commas, blanks trimmed,
// empty items dropped.
func TestSplitList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"put", []string{"put"}},
		{" ddsperf, ,dyad-ddsnet,", []string{"ddsperf", "dyad-ddsnet"}},
		{",,", nil},
	} {
		if got := SplitList(c.in); !slices.Equal(got, c.want) {
			t.Errorf("SplitList(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
