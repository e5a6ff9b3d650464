package target

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/dyad-db/dyad/internal/bench/netns"
	"github.com/dyad-db/dyad/internal/bench/proc"
)

// etcd is a real etcd 3.6 cluster of 1, 2 or 3 members on loopback, built by
// scripts/peers.sh. Three members is the study's two zones plus a witness;
// on one machine the zones are not separated by a network. Two members (one
// per zone, no witness) exists for the contrast benchmark of a zone loss.
//
// Shaped (etcd-3@<delay>), every member runs in its own network namespace
// and every link between two members is delay long each way, through the
// userspace shaper (internal/bench/netns), so that a quorum pays the same
// distance as dyad's pair does; clients reach each member directly.
type etcd struct {
	env     Env
	members int
	bin     string
	g       *group
	shaped  bool
	delay   time.Duration
	net     *netns.Pair // when shaped
}

func newEtcd(env Env, members int) (*etcd, error) {
	bin, err := env.Bins.peer("etcd-3.6")
	if err != nil {
		return nil, err
	}
	return &etcd{env: env, members: members, bin: bin}, nil
}

func (e *etcd) Name() string {
	return fmt.Sprintf("etcd-%d", e.members) + delaySuffix(e.shaped, e.delay)
}

func (e *etcd) Version() string {
	v := fmt.Sprintf("etcd %s, %d member(s)", strings.TrimPrefix(moduleVersion(e.bin, "go.etcd.io/etcd/server/v3"), "v"), e.members)
	if e.shaped {
		v += fmt.Sprintf(", %v apart each way (userspace shaper)", e.delay)
	}
	return v
}

func (e *etcd) Start(ctx context.Context) ([]string, error) {
	g, err := newGroup(e.env.WorkDir, e.Name())
	if err != nil {
		return nil, err
	}
	e.g = g
	var clientAddr, peerAddr func(i int) string
	if e.shaped {
		if e.net, err = netns.NewWith(netns.Options{Zones: e.members, Delay: e.delay, Hub: true}); err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		clientAddr = func(i int) string { return e.net.ClientIP(i) + ":2379" }
		peerAddr = func(i int) string { return e.net.ReplIP(i) + ":2380" }
	} else {
		ports, err := proc.FreePorts(2 * e.members)
		if err != nil {
			return nil, err
		}
		clientAddr = func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[2*i]) }
		peerAddr = func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[2*i+1]) }
	}
	var cluster, eps []string
	for i := range e.members {
		cluster = append(cluster, fmt.Sprintf("m%d=http://%s", i, peerAddr(i)))
		eps = append(eps, clientAddr(i))
	}
	for i := range e.members {
		name := fmt.Sprintf("m%d", i)
		peer := "http://" + peerAddr(i)
		bin, args := e.bin, []string{
			"--name", name, "--data-dir", filepath.Join(g.dir, name),
			"--listen-client-urls", "http://" + eps[i], "--advertise-client-urls", "http://" + eps[i],
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(cluster, ","), "--initial-cluster-state", "new",
			"--log-level", e.env.logLevel()}
		args = append(args, e.env.quotaArgs()...)
		if e.shaped {
			bin, args = e.net.Command(i, bin, args...)
		}
		if _, err = g.start(name, proc.Spec{Bin: bin, Args: args}); err != nil {
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
	var errs []error
	if e.g != nil {
		errs = append(errs, e.g.stop())
	}
	if e.net != nil {
		errs = append(errs, e.net.Close())
		e.net = nil
	}
	return errors.Join(errs...)
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

// RestartAll restarts every member (target.Restartable).
func (e *etcd) RestartAll() (time.Time, error) { return e.g.restartAll() }
