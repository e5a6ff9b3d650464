package target

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dyad-db/dyad/internal/bench/proc"
)

// dyadVersion asks the binary for its version ("dyad 0.1.0, etcd API 3.5.x").
func dyadVersion(bin string) string {
	out, err := proc.Output(bin, "version")
	if err != nil {
		return "unknown"
	}
	var ver, api string
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "dyad Version: "); ok {
			ver = v
		}
		if v, ok := strings.CutPrefix(l, "etcd API Version: "); ok {
			api = v
		}
	}
	return fmt.Sprintf("dyad %s (etcd API %s)", ver, api)
}

// dyad is one `dyad serve` with no peer: the embedded single-node default.
type dyad struct {
	env     Env
	g       *group
	version string
}

func newDyad(env Env) (*dyad, error) {
	if env.Bins.Dyad == "" {
		return nil, errors.New("dyad: no dyad binary given")
	}
	return &dyad{env: env}, nil
}

func (d *dyad) Name() string    { return "dyad" }
func (d *dyad) Version() string { return d.version }

func (d *dyad) Start(ctx context.Context) ([]string, error) {
	g, err := newGroup(d.env.WorkDir, d.Name())
	if err != nil {
		return nil, err
	}
	d.g = g
	ports, err := proc.FreePorts(1)
	if err != nil {
		return nil, err
	}
	ep := fmt.Sprintf("127.0.0.1:%d", ports[0])
	_, err = g.start("dyad", proc.Spec{Bin: d.env.Bins.Dyad, Args: append([]string{"serve",
		"--name", "bench", "--data-dir", g.dir + "/data",
		"--listen-client-urls", "http://" + ep,
		"--log-level", d.env.logLevel(), "--log-format", "text"}, d.env.quotaArgs()...)})
	if err == nil {
		err = waitServing(ctx, []string{ep}, g.failed)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("dyad: %w", err), d.Stop())
	}
	d.version = dyadVersion(d.env.Bins.Dyad)
	return []string{ep}, nil
}

func (d *dyad) Stop() error {
	if d.g == nil {
		return nil
	}
	return d.g.stop()
}

func (e Env) logLevel() string {
	if e.LogLevel == "" {
		return "warn"
	}
	return e.LogLevel
}

// RestartAll restarts the node (target.Restartable).
func (d *dyad) RestartAll() (time.Time, error) { return d.g.restartAll() }
