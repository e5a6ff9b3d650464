package target

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/dyad-db/dyad/internal/bench/netns"
	"github.com/dyad-db/dyad/internal/bench/proc"
)

// Pair is dyad's two-zone deployment: node "a" in one network namespace,
// node "b" in another, replicating over DDS across the veth between them.
// The bench's clients spread over both nodes' client addresses, as one
// kube-apiserver per zone would.
type Pair struct {
	env     Env
	g       *group
	net     *netns.Pair
	nodes   [2]*proc.Proc
	eps     [2]string
	version string
}

func newPair(env Env) (*Pair, error) {
	if env.Bins.Dyad == "" {
		return nil, errors.New("dyad-pair: no dyad binary given")
	}
	return &Pair{env: env}, nil
}

func (p *Pair) Name() string    { return "dyad-pair" }
func (p *Pair) Version() string { return p.version }

// Zones returns the client endpoint of zone a's node and of zone b's.
func (p *Pair) Zones() [2]string { return p.eps }

// Node returns the process of zone z's node (0: a, 1: b), for benchmarks
// that kill or pause a zone.
func (p *Pair) Node(z int) *proc.Proc { return p.nodes[z] }

// Net is the namespaces the pair runs in.
func (p *Pair) Net() *netns.Pair { return p.net }

func (p *Pair) Start(ctx context.Context) ([]string, error) {
	g, err := newGroup(p.env.WorkDir, p.Name())
	if err != nil {
		return nil, err
	}
	p.g = g
	if p.net, err = netns.New(); err != nil {
		return nil, fmt.Errorf("dyad-pair: %w", err)
	}
	cluster := fmt.Sprintf("a=http://%s:2380,b=http://%s:2380", p.net.ReplIP(0), p.net.ReplIP(1))
	for z, name := range []string{"a", "b"} {
		p.eps[z] = p.net.ClientIP(z) + ":2379"
		bin, args := p.net.Command(z, p.env.Bins.Dyad, "serve",
			"--name", name, "--data-dir", filepath.Join(g.dir, name),
			"--initial-cluster", cluster,
			"--dds-interface", netns.ReplIface,
			"--listen-client-urls", "http://"+p.eps[z],
			"--log-level", p.env.logLevel(), "--log-format", "text")
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
