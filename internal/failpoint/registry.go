package failpoint

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Registry holds the armed failpoints of one process. A failpoints build
// has one, filled from EnvVar at start; tests make their own. It is safe for
// concurrent use.
type Registry struct {
	// crash ends the process; sleep waits. Tests replace them.
	crash func()
	sleep func(time.Duration)

	mu    sync.Mutex
	armed map[string]Term
	fired map[string]int // hits that acted, per name, since start
}

// NewRegistry returns a registry with nothing armed whose crash action sends
// SIGKILL to the process itself.
func NewRegistry() *Registry {
	return &Registry{
		crash: killSelf,
		sleep: time.Sleep,
		armed: map[string]Term{},
		fired: map[string]int{},
	}
}

// killSelf is the crash action: SIGKILL, so nothing runs after it (no
// deferred call, no buffered log line), as when the power goes.
func killSelf() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	// SIGKILL to oneself is delivered before the syscall returns; this is
	// never reached, but a crash must not return either way.
	select {}
}

// Arm sets name's term (Off disarms). Unknown names are an error.
func (r *Registry) Arm(name string, t Term) error {
	if !Known(name) {
		return fmt.Errorf("failpoint %q: unknown (known: %s)", name, strings.Join(Names(), ", "))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.Kind == Off {
		delete(r.armed, name)
	} else {
		r.armed[name] = t
	}
	return nil
}

// ArmList arms every "name=term" of s (EnvVar's format).
func (r *Registry) ArmList(s string) error {
	m, err := ParseList(s)
	if err != nil {
		return err
	}
	for name, t := range m {
		if err := r.Arm(name, t); err != nil {
			return err
		}
	}
	return nil
}

// Armed returns a copy of the armed terms.
func (r *Registry) Armed() map[string]Term {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]Term, len(r.armed))
	for k, v := range r.armed {
		m[k] = v
	}
	return m
}

// Fired is how many times name acted.
func (r *Registry) Fired(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fired[name]
}

// Hit runs name's term, if armed: it crashes, sleeps, or returns the error
// the call site must treat as an I/O failure. Unarmed, it returns nil.
func (r *Registry) Hit(name string) error {
	r.mu.Lock()
	t, ok := r.armed[name]
	if ok && t.Percent > 0 && t.Percent < 100 && rand.Float64()*100 >= t.Percent {
		ok = false
	}
	if ok {
		r.fired[name]++
		if t.Count > 0 {
			if t.Count == 1 {
				delete(r.armed, name)
			} else {
				n := t
				n.Count--
				r.armed[name] = n
			}
		}
	}
	r.mu.Unlock()
	if !ok {
		return nil
	}
	switch t.Kind {
	case Crash:
		r.crash()
	case Sleep:
		r.sleep(t.Sleep)
	case Error:
		return t.Err(name)
	}
	return nil
}

// Handler serves the registry over HTTP:
//
//	GET    <prefix>         "name=term" per armed failpoint, sorted
//	PUT    <prefix>/<name>  arm name with the term in the body
//	DELETE <prefix>/<name>  disarm name
//
// where prefix is the path it is mounted at (use http.StripPrefix or mount
// it at "/debug/failpoints" and "/debug/failpoints/").
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		name := req.URL.Path
		if i := strings.LastIndexByte(name, '/'); i >= 0 {
			name = name[i+1:]
		}
		switch {
		case req.Method == http.MethodGet && (name == "" || name == "failpoints"):
			armed := r.Armed()
			lines := make([]string, 0, len(armed))
			for k, v := range armed {
				lines = append(lines, k+"="+v.String())
			}
			slices.Sort(lines)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			for _, l := range lines {
				fmt.Fprintln(w, l)
			}
		case req.Method == http.MethodPut:
			body, err := io.ReadAll(io.LimitReader(req.Body, 4096))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			t, err := Parse(string(body))
			if err == nil {
				err = r.Arm(name, t)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		case req.Method == http.MethodDelete:
			if err := r.Arm(name, Term{Kind: Off}); err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		default:
			http.Error(w, "GET the list, PUT or DELETE /<name>", http.StatusMethodNotAllowed)
		}
	})
}
