package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dyad-db/dyad/test/testutil"
)

// bins is shared by every test of the binary: the Kubernetes components
// are located (and built if missing) once.
var bins k8sBinsOnce

// TestZoneLossSmoke is CI's scenario: 100 pods over both zones, then the
// primary's zone is lost entirely and comes back.
func TestZoneLossSmoke(t *testing.T) {
	s := newSite(t, &bins, siteOptions{backend: backendDyad, nodesPerZone: 2, mtls: true})
	const app, replicas = "web", 100
	took := s.deploy(testutil.ZoneA, app, replicas, 3*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pl, err := s.placement(ctx, s.clients[testutil.ZoneA], app)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d pods running in %v: zone a %d, zone b %d", replicas, took.Round(10*time.Millisecond), pl.runningIn["a"], pl.runningIn["b"])
	for _, z := range zoneNames {
		if pl.runningIn[z.String()] < replicas/4 {
			t.Fatalf("pods not spread over the zones: %v", pl.runningIn)
		}
	}
	primary := s.waitStore(30 * time.Second)
	r := s.zoneLoss(primary, app, replicas, true, time.Minute)
	figure(t, "dyad, loss of the primary's zone (%v), %d pods: writes after %v, nodes NotReady after %v, pods rescheduled after %v, new deployment ready in %v, rejoin in %v, objects lost %d, API errors %d, stuck pods nudged %d, controller restarts %d",
		primary, replicas, r.writes.Round(10*time.Millisecond), r.notReady.Round(10*time.Millisecond),
		r.rescheduled.Round(10*time.Millisecond), r.newDeploy.Round(10*time.Millisecond), r.rejoin.Round(10*time.Millisecond), r.lost, r.apiErrors, r.nudges, r.restarts)
	// Objects lost fail zoneLoss itself; the rest is asserted here.
	r.quiet(t)
}

// TestFull is the documented full run (not in CI): DYAD_E2E_FULL=1.
func TestFull(t *testing.T) {
	if os.Getenv("DYAD_E2E_FULL") != "1" {
		t.Skip("the full end-to-end run is not part of CI: set DYAD_E2E_FULL=1 (see docs/OPERATIONS.md)")
	}
	t.Run("dyad", func(t *testing.T) {
		s := newSite(t, &bins, siteOptions{backend: backendDyad, nodesPerZone: 5, bothEndpoints: false})
		const app, replicas = "web", 100
		s.deploy(testutil.ZoneA, app, replicas, 3*time.Minute)
		primary := s.waitStore(30 * time.Second)
		r := s.zoneLoss(primary, app, replicas, true, time.Minute)
		figure(t, "dyad, loss of the primary's zone (%v): writes after %v, nodes NotReady after %v, pods rescheduled after %v, new deployment ready in %v, rejoin in %v, objects lost %d, API errors %d, stuck pods nudged %d, controller restarts %d",
			primary, r.writes.Round(10*time.Millisecond), r.notReady.Round(10*time.Millisecond),
			r.rescheduled.Round(10*time.Millisecond), r.newDeploy.Round(10*time.Millisecond), r.rejoin.Round(10*time.Millisecond), r.lost, r.apiErrors, r.nudges, r.restarts)
		r.quiet(t)
		replica := s.waitStore(30 * time.Second).Other()
		r = s.zoneLoss(replica, app, replicas, true, time.Minute)
		figure(t, "dyad, loss of the replica's zone (%v): writes after %v, nodes NotReady after %v, pods rescheduled after %v, new deployment ready in %v, rejoin in %v, objects lost %d, API errors %d, stuck pods nudged %d, controller restarts %d",
			replica, r.writes.Round(10*time.Millisecond), r.notReady.Round(10*time.Millisecond),
			r.rescheduled.Round(10*time.Millisecond), r.newDeploy.Round(10*time.Millisecond), r.rejoin.Round(10*time.Millisecond), r.lost, r.apiErrors, r.nudges, r.restarts)
		r.quiet(t)
	})
	// 1,000 pods on dyad and on etcd (one member per zone: both replicate
	// every write synchronously to the other zone), in the same run. The
	// first site of a run pays alone for what the machine warms up (page
	// cache, the binaries): dyad, always first, took 11.7 s there and
	// 8.6 s in fourth place, against etcd's 9.1 and 8.8 s in between. So
	// a warm-up run on etcd comes first and is not counted. Then each
	// backend runs three times, in the order dyad, etcd, etcd, dyad, dyad,
	// etcd, so that neither holds the better places; each backend's
	// figure is the mean of its three. With two runs each, one run of
	// either moved the ratio by 0.1 (single runs ranged 9.2-12.8 s).
	took := map[backend][]time.Duration{}
	storeCPU := map[backend][]time.Duration{}
	order := []backend{backendEtcd2, backendDyad, backendEtcd2, backendEtcd2, backendDyad, backendDyad, backendEtcd2}
	for i, b := range order {
		name := "scale-" + string(b)
		if i == 0 {
			name = "scale-warmup-" + string(b)
		}
		t.Run(name, func(t *testing.T) {
			s := newSite(t, &bins, siteOptions{backend: b, nodesPerZone: 10})
			cpu0 := s.cpuTimes()
			d, errs := s.scale(10, 100, 10*time.Minute)
			cpu := s.cpuTimes().since(cpu0)
			what := string(b)
			if i == 0 {
				what += " (warm-up, not counted)"
			}
			figure(t, "%s: 1,000 pods (10 deployments x 100, created at once) all Running in %v, %d errors, stuck pods nudged %d, controller restarts %d; CPU: store %v, whole site %v (%.0f%% store)",
				what, d.Round(100*time.Millisecond), errs, s.nudges.Load(), s.restarts(),
				cpu.store.Round(10*time.Millisecond), cpu.site.Round(10*time.Millisecond), 100*cpu.store.Seconds()/max(cpu.site.Seconds(), 0.01))
			s.dumpMetrics()
			if errs != 0 {
				t.Errorf("%d errors creating the deployments", errs)
			}
			if i > 0 {
				took[b] = append(took[b], d)
				storeCPU[b] = append(storeCPU[b], cpu.store)
			}
		})
	}
	if a, e := took[backendDyad], took[backendEtcd2]; len(a) == 3 && len(e) == 3 {
		ma, me := mean(a), mean(e)
		ca, ce := mean(storeCPU[backendDyad]), mean(storeCPU[backendEtcd2])
		figure(t, "1,000 pods, mean of three runs each after a warm-up (%s): dyad %v (%v), etcd2 %v (%v), dyad / etcd2 %.2fx; store CPU per run dyad %v, etcd2 %v (%.2fx)",
			runOrder(order[1:]), ma.Round(100*time.Millisecond), roundAll(a), me.Round(100*time.Millisecond), roundAll(e), ma.Seconds()/me.Seconds(),
			ca.Round(10*time.Millisecond), ce.Round(10*time.Millisecond), ca.Seconds()/max(ce.Seconds(), 0.001))
	}
	// The same zone loss on etcd: two members (one per zone), and three with
	// two in the lost zone. Frozen writes are the expected outcome.
	for _, b := range []backend{backendEtcd2, backendEtcd3} {
		t.Run("contrast-"+string(b), func(t *testing.T) {
			s := newSite(t, &bins, siteOptions{backend: b, nodesPerZone: 2})
			const app, replicas = "web", 100
			s.deploy(testutil.ZoneA, app, replicas, 3*time.Minute)
			r := s.zoneLoss(testutil.ZoneA, app, replicas, false, time.Minute)
			outcome := "writes FROZEN for the whole minute"
			if r.writesOK {
				outcome = fmt.Sprintf("writes resumed after %v", r.writes.Round(10*time.Millisecond))
			}
			figure(t, "%s, loss of zone a (%d of %d members): %s; after zone a returned: rejoin in %v, objects lost %d",
				b, len(s.zoneMembers(testutil.ZoneA)), len(s.members), outcome, r.rejoin.Round(10*time.Millisecond), r.lost)
		})
	}
	// Rolling restart of both dyad nodes under load, as the runbook says
	// (restart the replica, move the primary role to it, restart the
	// former primary), and plainly (SIGTERM each node in turn, the
	// primary's restart then costs a failover): the latter's outcome is
	// reported, the former must keep the API available.
	for _, moveLeader := range []bool{true, false} {
		name := map[bool]string{true: "rolling-restart-dyad-move-leader", false: "rolling-restart-dyad-plain"}[moveLeader]
		t.Run(name, func(t *testing.T) {
			s := newSite(t, &bins, siteOptions{backend: backendDyad, nodesPerZone: 2, bothEndpoints: true})
			s.deploy(testutil.ZoneA, "web", 100, 3*time.Minute)
			s.rollingRestart(moveLeader)
		})
	}
}

// scale creates deployments Deployments of replicas pods each at once
// (one goroutine each, alternating zones) and waits until every pod runs;
// it returns the time from the first create to all Running, and how many
// API calls failed.
func (s *site) scale(deployments, replicas int, within time.Duration) (time.Duration, int) {
	t := s.t
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, deployments)
	for i := 0; i < deployments; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			z := zoneNames[i%2]
			_, err := s.clients[z].AppsV1().Deployments(testNS).Create(ctx, deployment(fmt.Sprintf("scale-%d", i), int32(replicas)), metav1.CreateOptions{})
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		t.Logf("create: %v", err)
		n++
	}
	want := deployments * replicas
	s.waitFor(within, fmt.Sprintf("%d pods running", want), func(cs *kubernetes.Clientset) (bool, error) {
		total := 0
		for i := 0; i < deployments; i++ {
			pl, err := s.placement(ctx, cs, fmt.Sprintf("scale-%d", i))
			if err != nil {
				return false, err
			}
			total += pl.running
		}
		return total == want, nil
	}, testutil.ZoneA)
	return time.Since(start), n
}

// siteCPU is CPU time used by a site's processes: its store members, and
// all of them (store, apiservers, controller managers, schedulers, kwok).
type siteCPU struct{ store, site time.Duration }

func (c siteCPU) since(o siteCPU) siteCPU { return siteCPU{c.store - o.store, c.site - o.site} }

// cpuTimes reads the CPU time the site's running processes have used so
// far. A process that exited is left out, so a difference of two readings
// is exact only when none exited or was restarted in between: the scale
// figures report the controller restarts beside it.
func (s *site) cpuTimes() siteCPU {
	var c siteCPU
	add := func(p *testutil.Proc, store bool) {
		if p == nil || p.Exited() {
			return
		}
		d, err := p.CPUTime()
		if err != nil {
			return
		}
		c.site += d
		if store {
			c.store += d
		}
	}
	for _, m := range s.running() {
		add(m.proc, true)
	}
	for z := range s.zones {
		zp := &s.zones[z]
		add(zp.apiserver, false)
		for _, sv := range []*supervisor{zp.kcm, zp.scheduler, zp.kwok} {
			if sv == nil {
				continue
			}
			add(sv.current(), false)
		}
	}
	return c
}

// rollingRestart restarts the dyad nodes one at a time, the replica
// first (SIGTERM, start on the same data dir, wait for the pair), while
// config maps are written through both apiservers (each lists both dyad
// nodes) and a Deployment is scaled. With moveLeader the primary role is
// moved to the restarted node before the other one stops (the runbook's
// planned maintenance), and the API must stay available: neither apiserver
// may go more than maxGap without a successful write. Without it the
// primary is simply stopped; the gaps are reported.
func (s *site) rollingRestart(moveLeader bool) {
	t := s.t
	const maxGap = 5 * time.Second
	load := s.startLoad("rolling")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	leader := s.waitStore(30 * time.Second)
	for _, z := range []testutil.Zone{leader.Other(), leader} {
		m := s.zoneMembers(z)[0]
		t.Logf("%v: stopping dyad %s (SIGTERM)", load.since(), m.name)
		if err := m.proc.Term(); err != nil {
			t.Errorf("stopping dyad %s: %v", m.name, err)
		}
		// Churn pods while the node is down.
		scale := s.clients[z.Other()].AppsV1().Deployments(testNS)
		sc, err := scale.GetScale(ctx, "web", metav1.GetOptions{})
		if err == nil {
			sc.Spec.Replicas = 250 - sc.Spec.Replicas // 100 <-> 150
			_, err = scale.UpdateScale(ctx, "web", sc, metav1.UpdateOptions{})
		}
		if err != nil {
			msg := fmt.Sprintf("scaling web with dyad %s down: %v", m.name, err)
			if moveLeader {
				t.Error(msg)
			} else {
				t.Log("OUTCOME: " + msg)
			}
		}
		time.Sleep(5 * time.Second)
		s.startMember(m)
		now := s.waitStore(time.Minute)
		t.Logf("%v: dyad %s restarted; the pair leads from zone %v", load.since(), m.name, now)
		if moveLeader && z != leader {
			s.moveLeader(m, time.Minute)
			t.Logf("%v: primary role moved to dyad %s", load.since(), m.name)
		}
		time.Sleep(5 * time.Second)
	}
	took := load.since()
	st := load.stop()
	how := map[bool]string{true: "replica restarted, role moved to it, former primary restarted", false: "each node SIGTERMed and restarted in turn"}[moveLeader]
	figure(t, "dyad rolling restart of both nodes under load (%s; %v): writes ok a=%d b=%d, errors a=%d b=%d, longest gap without a write a=%v (ended at %v) b=%v (ended at %v)",
		how, took, st[0].ok, st[1].ok, st[0].errs, st[1].errs,
		st[0].maxGap.Round(10*time.Millisecond), st[0].gapEnded.Round(10*time.Millisecond),
		st[1].maxGap.Round(10*time.Millisecond), st[1].gapEnded.Round(10*time.Millisecond))
	for _, z := range zoneNames {
		if st[z].maxGap > maxGap {
			msg := fmt.Sprintf("apiserver of zone %v went %v without a successful write (last error: %v)", z, st[z].maxGap, st[z].lastError)
			if moveLeader {
				t.Error(msg)
			} else {
				t.Log("OUTCOME: " + msg)
			}
		}
	}
	s.hashAgreement(time.Minute)
}

// moveLeader hands the primary role to m (etcd's MoveLeader, which dyad
// serves as a hand-over), retrying while the pair is not yet synchronous.
func (s *site) moveLeader(m *member, within time.Duration) {
	t := s.t
	t.Helper()
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		target, ok := s.storeStatus(m)
		if !ok {
			time.Sleep(500 * time.Millisecond)
			continue
		}
		if target.Leader == target.Header.MemberId {
			return
		}
		for _, p := range s.running() {
			st, ok := s.storeStatus(p)
			if !ok || st.Header.MemberId != target.Leader {
				continue
			}
			cli, err := s.storeClient(p, 2*time.Second)
			if err != nil {
				last = err
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, last = cli.MoveLeader(ctx, target.Header.MemberId)
			cancel()
			cli.Close()
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("could not move the primary role to dyad %s within %v: %v", m.name, within, last)
}

// mean is the mean of ds (0 for none).
func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// roundAll is ds to a tenth of a second, for a figure.
func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(100 * time.Millisecond)
	}
	return out
}

// runOrder names the backends in the order they ran ("dyad, etcd2, ...").
func runOrder(bs []backend) string {
	names := make([]string, len(bs))
	for i, b := range bs {
		names[i] = string(b)
	}
	return strings.Join(names, ", ")
}
