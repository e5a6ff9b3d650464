package workload

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestProfileOps checks the profile names and that "all" is every profile
// in order.
func TestProfileOps(t *testing.T) {
	all := slices.Concat(Profiles["raw"], Profiles["k8s"], Profiles["phases"])
	for _, c := range []struct {
		in      string
		want    []Op
		wantErr bool
	}{
		{"raw", AllOps, false},
		{"k8s", Profiles["k8s"], false},
		{"phases", []Op{PhaseSteady, PhaseBurst}, false},
		{"k8s, phases", slices.Concat(Profiles["k8s"], Profiles["phases"]), false},
		{"all", all, false},
		{"bogus", nil, true},
	} {
		got, err := ProfileOps(c.in)
		if (err != nil) != c.wantErr {
			t.Errorf("ProfileOps(%q): err %v, want error %v", c.in, err, c.wantErr)
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("ProfileOps(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	// Every profile's kinds parse as --ops too.
	for _, op := range all {
		if _, err := ParseOps(string(op)); err != nil {
			t.Errorf("ParseOps(%q): %v", op, err)
		}
	}
}

// TestMixShape checks the Kubernetes mix against the shape it claims: about
// 84% reads, over half of the reads on the hot keys, LISTs among them.
func TestMixShape(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 200000
	count := map[int]int{}
	for range n {
		count[mixKind(rng)]++
	}
	reads := count[mixHotGet] + count[mixGet] + count[mixList]
	if pct := 100 * float64(reads) / n; pct < 83 || pct > 85 {
		t.Errorf("reads are %.1f%% of the mix, want about 84%%", pct)
	}
	if hot := float64(count[mixHotGet]) / float64(reads); hot <= 0.5 {
		t.Errorf("hot Gets are %.2f of the reads, want over half", hot)
	}
	for _, k := range []int{mixList, mixUpdate, mixHotUpdate, mixEvent} {
		if count[k] == 0 {
			t.Errorf("request kind %d never drawn", k)
		}
	}
}
