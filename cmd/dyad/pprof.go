package main

import (
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"
)

// Sampling of lock contention and blocking while --enable-pprof is on.
// Go records neither by default, so /debug/pprof/mutex and /block would
// come back empty. One contended unlock in mutexSampling is recorded,
// and on average one blocking event per blockSampling spent blocked:
// rates low enough to leave on in production, as the profiles are meant
// for a pair under its real load.
const (
	mutexSampling = 100
	blockSampling = time.Millisecond
)

// servePprof registers Go's profiling handlers under /debug/pprof/ on mux,
// the paths etcd's --enable-pprof serves, so that `go tool pprof
// http://host:2379/debug/pprof/profile` works against either. The handlers
// are registered on mux explicitly: importing net/http/pprof only for its
// side effect would put them on http.DefaultServeMux, which dyad does not
// serve.
//
// It also turns on the mutex and block profiles' sampling, process-wide.
func servePprof(mux *http.ServeMux) {
	runtime.SetMutexProfileFraction(mutexSampling)
	runtime.SetBlockProfileRate(int(blockSampling))
	mux.HandleFunc("/debug/pprof/", pprof.Index) // also the named profiles: heap, goroutine, mutex, block, ...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
