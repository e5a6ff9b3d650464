package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// dumpMetrics writes, when DYAD_E2E_METRICS names a directory, the
// Prometheus metrics of every zone's apiserver and store member into it,
// one file each (<test>-<zone>-apiserver.txt, <test>-<member>-store.txt),
// so that a run's store operations can be compared backend by backend
// (etcd_request_duration_seconds by operation and type, the watch cache,
// the store's own figures). It observes only: it runs after the figure
// is taken and a failure to fetch is logged, not fatal.
func (s *site) dumpMetrics() {
	dir := os.Getenv("DYAD_E2E_METRICS")
	if dir == "" {
		return
	}
	t := s.t
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("metrics dir: %v", err)
		return
	}
	prefix := strings.ReplaceAll(t.Name(), "/", "_")
	write := func(name string, body []byte) {
		if err := os.WriteFile(filepath.Join(dir, prefix+"-"+name+".txt"), body, 0o644); err != nil {
			t.Logf("metrics: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, z := range zoneNames {
		body, err := s.clients[z].Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			t.Logf("metrics of zone %v's apiserver: %v", z, err)
			continue
		}
		write(z.String()+"-apiserver", body)
	}
	if s.pki != nil {
		return // the store's /metrics then needs a client certificate
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, m := range s.running() {
		resp, err := hc.Get(fmt.Sprintf("http://%s/metrics", s.endpoint(m)))
		if err != nil {
			t.Logf("metrics of store member %s: %v", m.name, err)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Logf("metrics of store member %s: %v", m.name, err)
			continue
		}
		write(m.name+"-store", body)
	}
}
