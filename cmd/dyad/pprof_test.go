package main

import (
	"net/http"
	"net/http/httptest"
	"runtime"
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
			defer runtime.SetMutexProfileFraction(runtime.SetMutexProfileFraction(-1))
			defer runtime.SetBlockProfileRate(0)
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

// TestPprofSamplesContention checks that serving pprof turns on the mutex
// profile's sampling, without which /debug/pprof/mutex is always empty.
func TestPprofSamplesContention(t *testing.T) {
	prev := runtime.SetMutexProfileFraction(0)
	defer runtime.SetMutexProfileFraction(prev)
	defer runtime.SetBlockProfileRate(0)
	opsHandler(nil, prometheus.NewRegistry(), true)
	if got := runtime.SetMutexProfileFraction(-1); got != mutexSampling {
		t.Fatalf("mutex profile fraction %d with pprof served, want %d", got, mutexSampling)
	}
}
