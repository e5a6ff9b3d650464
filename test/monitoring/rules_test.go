package monitoring

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/dyad-db/dyad/test/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

// shipped is the path of a file under deploy/monitoring.
func shipped(t *testing.T, name string) string {
	t.Helper()
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "deploy", "monitoring", name)
}

// promtool finds promtool, or skips (fails with DYAD_REQUIRE_PEERS=1)
// saying what to install.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err == nil {
		return p
	}
	msg := "promtool not found: install Debian's prometheus package (apt-get install --no-install-recommends prometheus)"
	if testutil.PeersRequired() {
		t.Fatalf("%s [%s=1 makes this a failure]", msg, testutil.EnvRequirePeers)
	}
	t.Skipf("%s [set %s=1 to make this a failure]", msg, testutil.EnvRequirePeers)
	return ""
}

// ruleGroups is the spec of the shipped PrometheusRule: a plain Prometheus
// rule file, which is what promtool reads.
type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert,omitempty"`
			Record      string            `json:"record,omitempty"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels,omitempty"`
			Annotations map[string]string `json:"annotations,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

// loadRules reads the PrometheusRule and returns its spec, both parsed and
// as a plain rule file written to dir/rules.yaml.
func loadRules(t *testing.T, dir string) (ruleGroups, string) {
	t.Helper()
	raw, err := os.ReadFile(shipped(t, "prometheus-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec json.RawMessage `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(raw, &obj); err != nil {
		t.Fatalf("prometheus-rules.yaml: %v", err)
	}
	if obj.APIVersion != "monitoring.coreos.com/v1" || obj.Kind != "PrometheusRule" {
		t.Fatalf("prometheus-rules.yaml is %s %s, want monitoring.coreos.com/v1 PrometheusRule", obj.APIVersion, obj.Kind)
	}
	var spec ruleGroups
	if err := yaml.UnmarshalStrict(obj.Spec, &spec); err != nil {
		t.Fatalf("prometheus-rules.yaml spec: %v", err)
	}
	path := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(path, obj.Spec, 0o644); err != nil {
		t.Fatal(err)
	}
	return spec, path
}

// TestRulesPassPromtoolCheck: promtool accepts every rule (PromQL parses,
// durations and templates are valid) and the file holds the alerts the
// docs promise.
func TestRulesPassPromtoolCheck(t *testing.T) {
	bin := promtool(t)
	spec, path := loadRules(t, t.TempDir())
	out, err := exec.Command(bin, "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	alerts := map[string]bool{}
	for _, g := range spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				if r.Labels["severity"] == "" {
					t.Errorf("alert %s has no severity label", r.Alert)
				}
				alerts[r.Alert] = true
			}
		}
	}
	for _, want := range []string{"DyadSolo", "DyadSoloTooLong", "DyadReplicationLag", "DyadConflictRecords", "DyadSplitBrain", "DyadNoPrimary",
		"DyadGRPCErrors", "DyadGRPCSlow", "DyadPeerRoundTripSlow", "DyadMemberDown"} {
		if !alerts[want] {
			t.Errorf("prometheus-rules.yaml has no alert %s", want)
		}
	}
}

// TestRulesUnit runs promtool's unit tests (testdata/rules_test.yaml)
// against the shipped rules: each alert there must fire on the series
// given, and stay silent where the test says so.
func TestRulesUnit(t *testing.T) {
	bin := promtool(t)
	dir := t.TempDir()
	loadRules(t, dir)
	tests, err := os.ReadFile(filepath.Join("testdata", "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rules_test.yaml")
	if err := os.WriteFile(path, tests, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "test", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
