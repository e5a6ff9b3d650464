package monitoring

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/dyad-db/dyad/test/testutil"
)

// dashboard is the part of a Grafana dashboard that holds queries.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

// dashboardQueries returns every PromQL expression of the dashboard: its
// panels' targets and its query variables.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile(shipped(t, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	var out []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) == nil && q.Query != "" {
			out = append(out, q.Query)
		}
	}
	return out
}

// metricNames returns the metric names an expression selects: the
// identifiers left once literals, matchers and label lists are removed,
// with the prefixes of the series dyad exports (PromQL's functions and
// keywords have none of them). "up" is Prometheus' own, not dyad's.
func metricNames(expr string) []string {
	// What in a PromQL expression is not a metric name: string literals,
	// label matchers, range and subquery brackets, and the label lists of
	// grouping and matching clauses.
	notNames := []*regexp.Regexp{
		regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`),
		regexp.MustCompile(`\{[^}]*\}`),
		regexp.MustCompile(`\[[^\]]*\]`),
		regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`),
	}
	ident := regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	for _, re := range notNames {
		expr = re.ReplaceAllString(expr, " ")
	}
	var out []string
	for _, id := range ident.FindAllString(expr, -1) {
		for _, prefix := range []string{"etcd_", "grpc_", "dyad_", "go_", "process_"} {
			if strings.HasPrefix(id, prefix) {
				out = append(out, id)
				break
			}
		}
	}
	return out
}

func TestMetricNamesOfExpressions(t *testing.T) {
	got := metricNames(`histogram_quantile(0.99, sum by (instance, grpc_method, le) (rate(grpc_server_handling_seconds_bucket{job=~"$job", grpc_service=~"etcdserverpb\\..*", grpc_type="unary"}[5m]))) > on (job, instance) dyad_role{x="etcd_fake"} or up == 0`)
	want := []string{"grpc_server_handling_seconds_bucket", "dyad_role"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("metricNames = %q, want %q", got, want)
	}
}

// scrape returns the metric families a node's /metrics serves.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scraping %s: %v", url, err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s/metrics: %v", url, err)
	}
	return fams
}

// exported reports whether name is a series of one of fams: a family's
// own name, or a histogram's _bucket/_sum/_count or a summary's
// _sum/_count.
func exported(fams map[string]*dto.MetricFamily, name string) bool {
	if _, ok := fams[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		f, ok := fams[base]
		if !ok {
			continue
		}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			return true
		case dto.MetricType_SUMMARY:
			return suffix != "_bucket"
		}
	}
	return false
}

// TestQueriedSeriesAreExported starts a real pair (two zones in network
// namespaces), writes through both nodes so that RPCs, replication and
// round trips have happened, and checks that every metric the dashboard
// and the alert rules query is on /metrics of the pair: a renamed or
// missing series would leave a panel empty or an alert unable to fire.
func TestQueriedSeriesAreExported(t *testing.T) {
	queries := dashboardQueries(t)
	dashNames := map[string]bool{}
	for _, q := range queries {
		for _, n := range metricNames(q) {
			dashNames[n] = true
		}
	}
	// The panels the dashboard promises (RPC, peer, disk/commit,
	// replication) are there.
	for _, n := range []string{"grpc_server_handling_seconds_bucket", "grpc_server_handled_total", "grpc_server_started_total",
		"etcd_network_peer_round_trip_time_seconds_bucket", "etcd_network_peer_sent_bytes_total", "etcd_network_peer_received_bytes_total",
		"etcd_disk_wal_fsync_duration_seconds_bucket", "etcd_disk_backend_commit_duration_seconds_bucket", "dyad_replication_lag_revisions", "dyad_role"} {
		if !dashNames[n] {
			t.Errorf("dashboard.json queries no %s", n)
		}
	}
	spec, _ := loadRules(t, t.TempDir())
	ruleNames := map[string][]string{}
	for _, g := range spec.Groups {
		for _, r := range g.Rules {
			for _, n := range metricNames(r.Expr) {
				if l := ruleNames[n]; len(l) == 0 || l[len(l)-1] != r.Alert {
					ruleNames[n] = append(l, r.Alert)
				}
			}
		}
	}

	p := testutil.NewPair(t, testutil.BuildDyad(t), time.Second)
	p.Start(testutil.ZoneA)
	p.Start(testutil.ZoneB)
	leader := p.WaitPair(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, z := range []testutil.Zone{leader, 1 - leader} {
		cli := p.Client(z)
		if _, err := cli.Put(ctx, "monitoring/"+z.String(), "v"); err != nil {
			t.Fatalf("put through %v: %v", z, err)
		}
		if _, err := cli.Get(ctx, "monitoring/"+z.String()); err != nil {
			t.Fatalf("get through %v: %v", z, err)
		}
	}

	both := map[string]*dto.MetricFamily{}
	for _, z := range []testutil.Zone{testutil.ZoneA, testutil.ZoneB} {
		for name, f := range scrape(t, p.MetricsURL(z)) {
			both[name] = f
		}
	}
	var missing []string
	for n := range dashNames {
		if !exported(both, n) {
			missing = append(missing, n+" (dashboard)")
		}
	}
	for n, alerts := range ruleNames {
		if !exported(both, n) {
			missing = append(missing, n+" (alerts "+strings.Join(alerts, ", ")+")")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("queried but not exported by the pair: %s", m)
	}
}
