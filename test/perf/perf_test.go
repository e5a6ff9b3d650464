package perf

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/perf"
	"github.com/dyad-db/dyad/internal/testenv"
	"github.com/dyad-db/dyad/test/testutil"
)

// TestPerfSmoke runs `dyad perf` on one small size and checks that every
// system produced a round-trip summary, that throughput was measured for
// every system (ddsnet's counted at the receiving owner, the pair's as
// Puts the replica acknowledged), that every transport row split its
// pings' writes (dds.Writer.WriteStamped), that the report
// files were written, and that no namespace of the run is left.
// It runs with --secure, so every system is also measured with DDS Security
// (authenticated, encrypted, access-controlled) and the secured ÷ plain
// table is printed.
func TestPerfSmoke(t *testing.T) {
	testenv.NeedRoot(t, "for network namespaces")
	bin := testutil.BuildDyad(t)
	out := t.TempDir()
	args := []string{"perf", "--sizes", "256", "--count", "300", "--tput-duration", "500ms", "--secure", "--out", out}
	_, err := exec.LookPath("ddsperf")
	haveDdsperf := err == nil
	cmd := exec.Command(bin, args...)
	cmd.WaitDelay = 5 * time.Second
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			cmd.Process.Kill()
		}
	}()
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("dyad perf: %v\n%s", err, stdout)
	}
	t.Logf("\n%s", stdout)

	var res perf.Results
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"dyad-inline": false, "dyad-inline+batch": false, "dyad-channel": false, "dyad-waitset": false,
		"dyad-ddsnet": false, "dyad-ddsnet+batch": false, "dyad-pair": false}
	if haveDdsperf {
		want["ddsperf"] = false
	}
	plain := make([]string, 0, len(want))
	for s := range want {
		plain = append(plain, s)
	}
	for _, s := range plain {
		want[s+perf.SecureSuffix] = false
	}
	for _, r := range res.Rows {
		if _, ok := want[r.System]; !ok {
			continue
		}
		if r.Err != "" || r.Size != 256 || r.RTT.P50 <= 0 || r.RTT.P99 < r.RTT.P50 || r.Tput.Rate <= 0 {
			t.Errorf("incomplete row %+v", r)
		}
		if strings.HasPrefix(r.System, "dyad") && r.RTT.Count != 300 {
			t.Errorf("%s: %d round trips, want 300", r.System, r.RTT.Count)
		}
		if strings.HasPrefix(r.System, "dyad") && !strings.HasPrefix(r.System, perf.PairSystem) {
			if w := r.Writes; w == nil || w.Count != 300 || w.P50.Send <= 0 {
				t.Errorf("%s: ping writes not split: %+v", r.System, w)
			}
		}
		want[r.System] = true
	}
	if !strings.Contains(string(stdout), "Where a ping's write goes") {
		t.Error("no write table in the output")
	}
	if !strings.Contains(string(stdout), "DDS Security cost") {
		t.Error("no secured ÷ plain table in the output")
	}
	for s, seen := range want {
		if !seen {
			t.Errorf("no row for %s", s)
		}
	}
	for _, f := range []string{"results.md", "rtt.svg"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
	ns, _ := exec.Command("ip", "netns", "list").Output()
	if pid := cmd.Process.Pid; strings.Contains(string(ns), "dyadperf-"+strconv.Itoa(pid%100000)+"-") {
		t.Errorf("namespaces of the run left behind:\n%s", ns)
	}
}
