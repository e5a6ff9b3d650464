package target

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/dyad-db/dyad/internal/bench/netns"
	"github.com/dyad-db/dyad/internal/bench/proc"
)

// Pair is dyad's two-zone deployment: node "a" in one network namespace,
// node "b" in another, replicating over DDS across the veth between them.
// Each node also serves Prometheus metrics on its client address, port
// metricsPort (the two-zone benchmarks read roles and counters there).
// The bench's clients spread over both nodes' client addresses, as one
// kube-apiserver per zone would.
type Pair struct {
	env Env
	// shaped puts the zones delay apart through the userspace shaper
	// (name dyad-pair@<delay>).
	shaped  bool
	delay   time.Duration
	g       *group
	net     *netns.Pair
	nodes   [2]*proc.Proc
	eps     [2]string
	version string
}

const metricsPort = "2381"

func newPair(env Env) (*Pair, error) {
	if env.Bins.Dyad == "" {
		return nil, errors.New("dyad-pair: no dyad binary given")
	}
	return &Pair{env: env}, nil
}

func (p *Pair) Name() string    { return "dyad-pair" + delaySuffix(p.shaped, p.delay) }
func (p *Pair) Version() string { return p.version }

// Zones returns the client endpoint of zone a's node and of zone b's.
func (p *Pair) Zones() [2]string { return p.eps }

// Node returns the process of zone z's node (0: a, 1: b), for benchmarks
// that kill or pause a zone.
func (p *Pair) Node(z int) *proc.Proc { return p.nodes[z] }

// Net is the namespaces the pair runs in.
func (p *Pair) Net() *netns.Pair { return p.net }

// MetricsURL is zone z's Prometheus endpoint (http://host:port/metrics).
func (p *Pair) MetricsURL(z int) string {
	return "http://" + p.net.ClientIP(z) + ":" + metricsPort + "/metrics"
}

// Kill takes zone z's node down with SIGKILL, as a zone's loss does, and
// returns once it is reaped.
func (p *Pair) Kill(z int) { p.nodes[z].KillGroup() }

// Restart starts zone z's node again on its data directory, after Kill. It
// does not wait for the node to serve.
func (p *Pair) Restart(z int) error {
	n, err := p.g.restart(p.nodes[z])
	if err != nil {
		return fmt.Errorf("dyad-pair: restart %c: %w", 'a'+z, err)
	}
	p.nodes[z] = n
	return nil
}

func (p *Pair) Start(ctx context.Context) ([]string, error) {
	g, err := newGroup(p.env.WorkDir, p.Name())
	if err != nil {
		return nil, err
	}
	p.g = g
	if p.net, err = netns.NewWith(netns.Options{Delay: p.delay, Hub: p.shaped}); err != nil {
		return nil, fmt.Errorf("dyad-pair: %w", err)
	}
	cluster := fmt.Sprintf("a=http://%s:2380,b=http://%s:2380", p.net.ReplIP(0), p.net.ReplIP(1))
	for z, name := range []string{"a", "b"} {
		p.eps[z] = p.net.ClientIP(z) + ":2379"
		serve := append([]string{"serve",
			"--name", name, "--data-dir", filepath.Join(g.dir, name),
			"--initial-cluster", cluster,
			"--dds-interface", netns.ReplIface,
			"--listen-client-urls", "http://" + p.eps[z],
			"--listen-metrics-urls", "http://" + p.net.ClientIP(z) + ":" + metricsPort,
			"--log-level", p.env.logLevel(), "--log-format", "text"}, p.env.quotaArgs()...)
		bin, args := p.net.Command(z, p.env.Bins.Dyad, serve...)
		if p.nodes[z], err = g.start(name, proc.Spec{Bin: bin, Args: args}); err != nil {
			break
		}
	}
	// A linearizable Get succeeds on the replica only once it holds a read
	// lease from the primary, so both answering means the pair has formed.
	if err == nil {
		err = waitServing(ctx, p.eps[:], g.failed)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("dyad-pair: %w", err), p.Stop())
	}
	p.version = dyadVersion(p.env.Bins.Dyad) + ", 2 zones over Cyclone DDS"
	if p.shaped {
		p.version += fmt.Sprintf(", %v apart each way (userspace shaper)", p.delay)
	}
	return p.eps[:], nil
}

func (p *Pair) Stop() error {
	var errs []error
	if p.g != nil {
		errs = append(errs, p.g.stop())
	}
	if p.net != nil {
		errs = append(errs, p.net.Close())
		p.net = nil
	}
	return errors.Join(errs...)
}

// RestartAll restarts both nodes (target.Restartable).
func (p *Pair) RestartAll() (time.Time, error) {
	t, err := p.g.restartAll()
	copy(p.nodes[:], p.g.procs)
	return t, err
}
