package main

import (
	"net/http"
	"net/http/pprof"
)

// servePprof registers Go's profiling handlers under /debug/pprof/ on mux,
// the paths etcd's --enable-pprof serves, so that `go tool pprof
// http://host:2379/debug/pprof/profile` works against either. The handlers
// are registered on mux explicitly: importing net/http/pprof only for its
// side effect would put them on http.DefaultServeMux, which dyad does not
// serve.
func servePprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index) // also the named profiles: heap, goroutine, mutex, block, ...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
