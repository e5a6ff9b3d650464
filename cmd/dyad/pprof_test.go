package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestOpsHandlerPprof checks that --enable-pprof adds etcd's /debug/pprof/
// paths to the operational endpoints, and that they are absent without it.
func TestOpsHandlerPprof(t *testing.T) {
	paths := []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=1", "/debug/pprof/symbol"}
	for _, tc := range []struct {
		name  string
		pprof bool
		want  int
	}{
		{"enabled", true, http.StatusOK},
		{"disabled", false, http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := opsHandler(nil, prometheus.NewRegistry(), tc.pprof)
			for _, p := range paths {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
				if rec.Code != tc.want {
					t.Errorf("GET %s: status %d, want %d", p, rec.Code, tc.want)
				}
			}
		})
	}
}
