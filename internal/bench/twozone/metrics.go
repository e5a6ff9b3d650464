package twozone

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// dyad's metric names (internal/server/metrics.go).
const (
	mRole           = "dyad_role"
	mApplied        = "dyad_applied_index"
	mCommit         = "dyad_commit_index"
	mLagRevisions   = "dyad_replication_lag_revisions"
	mSolo           = "dyad_solo_seconds_total"
	mSoloEntered    = "dyad_solo_entered_total"
	mFailovers      = "dyad_failovers_total"
	mFalseFailovers = "dyad_false_failovers_total"
	mSplitBrains    = "dyad_split_brains_total"
)

// dyad_role values.
const (
	roleWaiting = 0
	roleReplica = 1
	rolePrimary = 2 // leading with a synchronous replica
	roleSolo    = 3 // leading alone
)

// metrics is one scrape: unlabelled gauges and counters by name.
type metrics map[string]float64

var scrapeClient = &http.Client{Timeout: time.Second}

// scrape reads a node's /metrics. A node that is down is an error.
func scrape(ctx context.Context, url string) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := scrapeClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	m := metrics{}
	for name, f := range fams {
		for _, s := range f.GetMetric() {
			if len(s.GetLabel()) > 0 {
				continue
			}
			switch {
			case s.Gauge != nil:
				m[name] = s.GetGauge().GetValue()
			case s.Counter != nil:
				m[name] = s.GetCounter().GetValue()
			}
		}
	}
	return m, nil
}

// role is the node's dyad_role, or -1 when it does not answer.
func role(ctx context.Context, url string) int {
	m, err := scrape(ctx, url)
	if err != nil {
		return -1
	}
	r, ok := m[mRole]
	if !ok {
		return -1
	}
	return int(r)
}
