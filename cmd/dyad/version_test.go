package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestBuildInfoNames(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		name       string
		b          buildInfo
		wantShort  string
		wantCommit string
	}{
		{name: "no commit", b: buildInfo{Version: "1.2.3"}, wantShort: "1.2.3", wantCommit: "unknown"},
		{name: "clean", b: buildInfo{Version: "1.2.3", Commit: rev}, wantShort: "1.2.3+0123456789ab", wantCommit: rev},
		{name: "modified", b: buildInfo{Version: "1.2.3", Commit: rev, Modified: true}, wantShort: "1.2.3+0123456789ab.dirty", wantCommit: rev + "+dirty"},
		{name: "short commit", b: buildInfo{Version: "1.2.3", Commit: "abc"}, wantShort: "1.2.3+abc", wantCommit: "abc"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.Short(); got != tc.wantShort {
				t.Errorf("Short() = %q, want %q", got, tc.wantShort)
			}
			if got := tc.b.commitString(); got != tc.wantCommit {
				t.Errorf("commitString() = %q, want %q", got, tc.wantCommit)
			}
			var out bytes.Buffer
			tc.b.write(&out)
			if !strings.Contains(out.String(), "Git SHA: "+tc.wantCommit+"\n") {
				t.Errorf("version output lacks the commit line:\n%s", out.String())
			}
		})
	}
}

// TestRootVersionFlag checks that dyad --version prints the same report as
// dyad version, with the commit line.
func TestRootVersionFlag(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		root := rootCmd()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		for _, want := range []string{"dyad Version: " + Version + "\n", "Git SHA: ", "etcd API Version: "} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v: output lacks %q:\n%s", args, want, out.String())
			}
		}
	}
}
