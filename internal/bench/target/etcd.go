package target

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/dyad-db/dyad/internal/bench/proc"
)

// etcd is a real etcd 3.6 cluster of 1, 2 or 3 members on loopback, built by
// scripts/peers.sh. Three members is the study's two zones plus a witness;
// on one machine the zones are not separated by a network. Two members (one
// per zone, no witness) exists for the contrast benchmark of a zone loss.
type etcd struct {
	env     Env
	members int
	bin     string
	g       *group
}

func newEtcd(env Env, members int) (*etcd, error) {
	bin, err := env.Bins.peer("etcd-3.6")
	if err != nil {
		return nil, err
	}
	return &etcd{env: env, members: members, bin: bin}, nil
}

func (e *etcd) Name() string { return fmt.Sprintf("etcd-%d", e.members) }

func (e *etcd) Version() string {
	return fmt.Sprintf("etcd %s, %d member(s)", strings.TrimPrefix(moduleVersion(e.bin, "go.etcd.io/etcd/server/v3"), "v"), e.members)
}

func (e *etcd) Start(ctx context.Context) ([]string, error) {
	g, err := newGroup(e.env.WorkDir, e.Name())
	if err != nil {
		return nil, err
	}
	e.g = g
	ports, err := proc.FreePorts(2 * e.members)
	if err != nil {
		return nil, err
	}
	var cluster, eps []string
	for i := range e.members {
		cluster = append(cluster, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, ports[2*i+1]))
		eps = append(eps, fmt.Sprintf("127.0.0.1:%d", ports[2*i]))
	}
	for i := range e.members {
		name := fmt.Sprintf("m%d", i)
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		_, err = g.start(name, proc.Spec{Bin: e.bin, Args: []string{
			"--name", name, "--data-dir", filepath.Join(g.dir, name),
			"--listen-client-urls", "http://" + eps[i], "--advertise-client-urls", "http://" + eps[i],
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(cluster, ","), "--initial-cluster-state", "new",
			"--log-level", e.env.logLevel()}})
		if err != nil {
			break
		}
	}
	if err == nil {
		err = waitServing(ctx, eps, g.failed)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%s: %w", e.Name(), err), e.Stop())
	}
	return eps, nil
}

func (e *etcd) Stop() error {
	if e.g == nil {
		return nil
	}
	return e.g.stop()
}

// external is an etcd-API endpoint the user runs; the bench neither starts
// nor stops it, and writes only under its own key prefix.
type external struct{ eps []string }

func newExternal(env Env) (*external, error) {
	if len(env.External) == 0 {
		return nil, errors.New("external: no endpoints given (--endpoints)")
	}
	return &external{eps: env.External}, nil
}

func (x *external) Name() string    { return "external" }
func (x *external) Version() string { return "external " + strings.Join(x.eps, ",") }
func (x *external) Stop() error     { return nil }

func (x *external) Start(ctx context.Context) ([]string, error) {
	if err := waitServing(ctx, x.eps, func() error { return nil }); err != nil {
		return nil, fmt.Errorf("external: %w", err)
	}
	return x.eps, nil
}
