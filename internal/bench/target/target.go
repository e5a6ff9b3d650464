package target

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Target is one system under test.
type Target interface {
	// Name is the registry name (dyad, etcd-3, kine-pg, ...).
	Name() string
	// Start brings the system up and returns its client endpoints
	// (host:port), once every one of them serves.
	Start(ctx context.Context) ([]string, error)
	// Stop shuts the system down and frees its resources.
	Stop() error
	// Version describes what runs ("etcd 3.6.16", "kine v0.17.5 on
	// PostgreSQL 15.8"); valid after Start.
	Version() string
}

// Restartable is a target that can restart all its processes on their
// data, for the time to serve after a restart.
type Restartable interface {
	Target
	// RestartAll stops every process with SIGTERM and starts them again.
	// It returns once they are started (not serving), with the time the
	// first one was started.
	RestartAll() (time.Time, error)
}

// Bins locates the binaries targets run.
type Bins struct {
	Dyad     string // the dyad binary
	PeersDir string // scripts/peers.sh's bin dir: etcd-3.6, kine
	PGBinDir string // PostgreSQL's bin dir (initdb, postgres, pg_isready); empty: Debian's newest
}

// Env is what every target is built from.
type Env struct {
	Bins Bins
	// WorkDir holds each target's data and logs (one subdirectory each).
	WorkDir string
	// External is the endpoint list of the "external" target.
	External []string
	// LogLevel is passed to servers that take one (dyad, etcd).
	LogLevel string
	// QuotaBytes, when above 0, is the data-file quota of dyad and etcd
	// (--quota-backend-bytes); their default of 2 GiB is too small for
	// the scale profile's 500,000 objects of 2 KiB.
	QuotaBytes int64
}

// quotaArgs is the quota flag for dyad and etcd, if any.
func (e Env) quotaArgs() []string {
	if e.QuotaBytes <= 0 {
		return nil
	}
	return []string{"--quota-backend-bytes", fmt.Sprint(e.QuotaBytes)}
}

type factory func(Env) (Target, error)

// registry maps names to constructors. It is written only here, at package
// initialisation, and read-only afterwards.
var registry = map[string]factory{
	"dyad":        func(e Env) (Target, error) { return newDyad(e) },
	"dyad-pair":   func(e Env) (Target, error) { return newPair(e) },
	"etcd-1":      func(e Env) (Target, error) { return newEtcd(e, 1) },
	"etcd-2":      func(e Env) (Target, error) { return newEtcd(e, 2) },
	"etcd-3":      func(e Env) (Target, error) { return newEtcd(e, 3) },
	"kine-sqlite": func(e Env) (Target, error) { return newKine(e, false) },
	"kine-pg":     func(e Env) (Target, error) { return newKine(e, true) },
	"external":    func(e Env) (Target, error) { return newExternal(e) },
}

// Names lists the known target names in a stable order.
func Names() []string {
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// New builds the named target. A replicated target's name may end in
// "@<delay>" (dyad-pair@2ms, etcd-3@0.5ms): its zones (etcd: its members)
// are then apart by that delay each way, through the userspace shaper;
// "@0s" goes through the shaper without a delay.
func New(name string, env Env) (Target, error) {
	if base, d, ok := strings.Cut(name, "@"); ok {
		delay, err := time.ParseDuration(d)
		if err != nil || delay < 0 {
			return nil, fmt.Errorf("target %q: %q is not a delay (e.g. 0.5ms)", name, d)
		}
		return newDelayed(base, delay, env)
	}
	f, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("unknown target %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return f(env)
}

// newDelayed builds base with its zones delay apart.
func newDelayed(base string, delay time.Duration, env Env) (Target, error) {
	switch base {
	case "dyad-pair":
		p, err := newPair(env)
		if err != nil {
			return nil, err
		}
		p.delay, p.shaped = delay, true
		return p, nil
	case "etcd-2", "etcd-3":
		e, err := newEtcd(env, int(base[len(base)-1]-'0'))
		if err != nil {
			return nil, err
		}
		e.delay, e.shaped = delay, true
		return e, nil
	}
	return nil, fmt.Errorf("target %q: only dyad-pair, etcd-2 and etcd-3 take a delay between zones", base)
}

// delaySuffix is the "@<delay>" a shaped target's name ends in.
func delaySuffix(shaped bool, delay time.Duration) string {
	if !shaped {
		return ""
	}
	return "@" + delay.String()
}

// IsDyad reports whether a target name is one of dyad's own (the figures
// the report compares against the others).
func IsDyad(name string) bool { return name == "dyad" || name == "dyad-pair" }

// peer returns a binary from the peers dir, or an error naming the script
// that builds it.
func (b Bins) peer(name string) (string, error) {
	if b.PeersDir == "" {
		return "", fmt.Errorf("%s: no peers bin dir (build it with scripts/peers.sh %s)", name, name)
	}
	p := filepath.Join(b.PeersDir, name)
	if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s not found at %s (build it with scripts/peers.sh %s)", name, p, name)
	}
	return p, nil
}

// moduleVersion reads the version of module mod (or of the main module if
// mod is empty) from a Go binary's build information.
func moduleVersion(bin, mod string) string {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "unknown"
	}
	if mod == "" {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == mod {
			return d.Version
		}
	}
	return "unknown"
}

// startTimeout bounds how long a target may take to serve.
const startTimeout = 90 * time.Second

// stopGrace is how long a server may take to exit after SIGTERM.
const stopGrace = 10 * time.Second

// waitServing polls every endpoint with a linearizable Get until all answer,
// failed() reports a dead process, or ctx ends.
func waitServing(ctx context.Context, endpoints []string, failed func() error) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	pending := slices.Clone(endpoints)
	var last error
	for len(pending) > 0 {
		if err := failed(); err != nil {
			return err
		}
		if err := probe(ctx, pending[0]); err != nil {
			last = err
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s not serving: %w (last error: %v)", pending[0], ctx.Err(), last)
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		pending = pending[1:]
	}
	return nil
}

func probe(ctx context.Context, ep string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = cli.Get(ctx, "bench-readiness-probe")
	return err
}
