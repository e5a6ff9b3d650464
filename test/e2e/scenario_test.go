package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dyad-db/dyad/test/testutil"
)

// figure logs one measured figure and appends it to $DYAD_E2E_FIGURES.
func figure(t *testing.T, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	t.Log("FIGURE " + line)
	if path := os.Getenv("DYAD_E2E_FIGURES"); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Errorf("figures file: %v", err)
			return
		}
		defer f.Close()
		fmt.Fprintf(f, "%s %s: %s\n", time.Now().UTC().Format(time.RFC3339), t.Name(), line)
	}
}

func configMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Data:       map[string]string{"payload": strings.Repeat("x", 512)},
	}
}

// createConfigMaps creates n config maps prefix-0..n-1 through zone z.
func (s *site) createConfigMaps(z testutil.Zone, prefix string, n int) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < n; i++ {
		if _, err := s.clients[z].CoreV1().ConfigMaps(testNS).Create(ctx, configMap(fmt.Sprintf("%s-%d", prefix, i)), metav1.CreateOptions{}); err != nil {
			s.t.Fatalf("create config map %s-%d through zone %v: %v", prefix, i, z, err)
		}
	}
}

// deploy creates a Deployment through zone z and waits until all its
// replicas run; it returns how long that took.
func (s *site) deploy(z testutil.Zone, name string, replicas int, within time.Duration) time.Duration {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	start := time.Now()
	if _, err := s.clients[z].AppsV1().Deployments(testNS).Create(ctx, deployment(name, int32(replicas)), metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("create deployment %s: %v", name, err)
	}
	s.waitFor(within, "deployment "+name+" running", func(cs *kubernetes.Clientset) (bool, error) {
		pl, err := s.placement(ctx, cs, name)
		return pl.running == replicas, err
	}, z)
	return time.Since(start)
}

// hashAgreement checks that every running store member has the same
// HashKV at a revision they all have, retrying while a member catches up.
func (s *site) hashAgreement(within time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		ok, detail := s.hashOnce()
		if ok {
			s.t.Logf("HashKV agrees: %s", detail)
			return
		}
		last = detail
		time.Sleep(500 * time.Millisecond)
	}
	s.t.Fatalf("HashKV differs between the store members within %v: %s", within, last)
}

func (s *site) hashOnce() (bool, string) {
	members := s.running()
	clients := make([]*clientv3.Client, len(members))
	for i, m := range members {
		cli, err := s.storeClient(m, 2*time.Second)
		if err != nil {
			return false, err.Error()
		}
		defer cli.Close()
		clients[i] = cli
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The control plane writes all the time (leases): hash at the lowest
	// revision any member has reached.
	var rev int64
	for i, m := range members {
		st, err := clients[i].Status(ctx, s.endpoint(m))
		if err != nil {
			return false, fmt.Sprintf("status of %s: %v", m.name, err)
		}
		if rev == 0 || st.Header.Revision < rev {
			rev = st.Header.Revision
		}
	}
	var parts []string
	var first *clientv3.HashKVResponse
	agree := true
	for i, m := range members {
		h, err := clients[i].HashKV(ctx, s.endpoint(m), rev)
		if err != nil {
			return false, fmt.Sprintf("hashkv of %s at %d: %v", m.name, rev, err)
		}
		parts = append(parts, fmt.Sprintf("%s=%08x(compact %d)", m.name, h.Hash, h.CompactRevision))
		if first == nil {
			first = h
		} else if h.Hash != first.Hash || h.CompactRevision != first.CompactRevision {
			agree = false
		}
	}
	return agree, fmt.Sprintf("rev %d: %s", rev, strings.Join(parts, " "))
}

// zoneLossResult is what a zone loss measured.
type zoneLossResult struct {
	writes      time.Duration // zone loss -> first write accepted by the survivor's apiserver
	writesOK    bool          // writes resumed at all (etcd without quorum: no)
	notReady    time.Duration // zone loss -> every node of the lost zone NotReady
	rescheduled time.Duration // zone loss -> every replica Running in the surviving zone
	newDeploy   time.Duration // a Deployment created during the loss: creation -> Running
	rejoin      time.Duration // restart of the zone -> store agrees, its nodes Ready
	lost        int
	// From the loss to the end of the rejoin: API errors the checks
	// retried past (the first check runs once writes have resumed, so the
	// failover itself is not counted), stuck pods nudged, and restarts of
	// supervised processes (controller-manager, scheduler, kwok, ...).
	apiErrors, nudges, restarts int
}

// quiet fails t unless the zone loss r went by without an API error after
// the failover, a nudged pod, or a restarted control-plane process: what
// "losing a zone keeps the cluster working" promises beyond the timings.
func (r zoneLossResult) quiet(t *testing.T) {
	t.Helper()
	if r.apiErrors != 0 || r.nudges != 0 || r.restarts != 0 {
		t.Errorf("zone loss not transparent after the failover: %d API errors, %d stuck pods nudged, %d process restarts (see API ERROR, NUDGE and restarting lines)",
			r.apiErrors, r.nudges, r.restarts)
	}
}

// zoneLoss kills zone kill entirely while Deployment app (replicas pods
// over both zones) runs, and asserts, through the surviving zone: writes
// resume, the lost nodes go NotReady, their pods run again in the
// survivor, a new Deployment becomes Ready; then restores the zone and
// asserts it rejoins, the store members agree (HashKV), and no object that
// existed before or was created during the loss is lost.
//
// With expectWrites false (etcd without quorum) a freeze of writesWait is
// the expected outcome: it is measured, the Kubernetes steps are skipped,
// and the zone is restored.
func (s *site) zoneLoss(kill testutil.Zone, app string, replicas int, expectWrites bool, writesWait time.Duration) zoneLossResult {
	t := s.t
	t.Helper()
	var r zoneLossResult
	survivor := kill.Other()
	tag := fmt.Sprintf("loss-%v-%d", kill, time.Now().UnixNano()%100000)
	s.createConfigMaps(survivor, tag+"-before", 100)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	before, err := s.snapshot(ctx, s.clients[survivor])
	if err != nil {
		t.Fatalf("snapshot before: %v", err)
	}

	t.Logf("killing zone %v (store members, apiserver, controller-manager, scheduler, kwok)", kill)
	apiErrors0, nudges0, restarts0 := s.apiErrors.Load(), s.nudges.Load(), s.restarts()
	lossAt := time.Now()
	s.killZone(kill)
	cs := s.clients[survivor]

	// 1. Writes through the surviving zone's apiserver.
	for i := 0; ; i++ {
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cs.CoreV1().ConfigMaps(testNS).Create(wctx, configMap(fmt.Sprintf("%s-probe-%d", tag, i)), metav1.CreateOptions{})
		wcancel()
		if err == nil {
			r.writes, r.writesOK = time.Since(lossAt), true
			break
		}
		if time.Since(lossAt) > writesWait {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !r.writesOK {
		if expectWrites {
			t.Fatalf("no write accepted through zone %v within %v of losing zone %v", survivor, writesWait, kill)
		}
		t.Logf("OUTCOME: writes frozen: none accepted through zone %v in the %v after losing zone %v", survivor, writesWait, kill)
	} else {
		t.Logf("writes accepted through zone %v %v after the loss", survivor, r.writes.Round(10*time.Millisecond))
	}

	if r.writesOK {
		// 2. The lost zone's nodes turn NotReady.
		s.waitFor(2*time.Minute, "nodes of the lost zone NotReady", func(cs *kubernetes.Clientset) (bool, error) {
			nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: zoneLabel + "=" + kill.String()})
			return err == nil && len(nodes.Items) > 0 && countReady(nodes.Items, "") == 0, err
		}, survivor)
		r.notReady = time.Since(lossAt)
		// 3. Their pods are recreated in the surviving zone.
		s.waitFor(3*time.Minute, "every replica running in the surviving zone", func(cs *kubernetes.Clientset) (bool, error) {
			pl, err := s.placement(ctx, cs, app)
			return pl.runningIn[survivor.String()] == replicas, err
		}, survivor)
		r.rescheduled = time.Since(lossAt)
		// 4. A new Deployment becomes Ready, and more objects are written.
		r.newDeploy = s.deploy(survivor, tag+"-new", 10, 2*time.Minute)
		s.createConfigMaps(survivor, tag+"-during", 50)
		t.Logf("zone %v lost: writes after %v, nodes NotReady after %v, pods rescheduled after %v, new deployment ready in %v",
			kill, r.writes.Round(10*time.Millisecond), r.notReady.Round(10*time.Millisecond),
			r.rescheduled.Round(10*time.Millisecond), r.newDeploy.Round(10*time.Millisecond))
	}
	// What must survive the rejoin: everything that existed before the loss
	// and everything created during it. (A store without quorum cannot
	// list: nothing was created then.)
	during := before
	if r.writesOK {
		if during, err = s.snapshot(ctx, cs); err != nil {
			t.Fatalf("snapshot during the loss: %v", err)
		}
		if miss := before.missing(during); len(miss) > 0 {
			t.Errorf("%d objects lost at the zone loss:\n%s", len(miss), strings.Join(miss, "\n"))
		}
	}

	// 5. The zone returns and rejoins.
	t.Logf("restoring zone %v", kill)
	rejoinAt := time.Now()
	s.restoreZone(kill)
	s.waitStore(2 * time.Minute)
	s.waitAPIReady(kill, 2*time.Minute)
	s.waitFor(2*time.Minute, "nodes of the restored zone Ready", func(cs *kubernetes.Clientset) (bool, error) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: zoneLabel + "=" + kill.String()})
		return err == nil && len(nodes.Items) == s.opts.nodesPerZone && countReady(nodes.Items, "") == len(nodes.Items), err
	}, kill)
	r.rejoin = time.Since(rejoinAt)
	if !r.writesOK {
		// Writes come back with the quorum.
		s.waitFor(2*time.Minute, "writes after the restore", func(cs *kubernetes.Clientset) (bool, error) {
			_, err := cs.CoreV1().ConfigMaps(testNS).Create(ctx, configMap(tag+"-restored"), metav1.CreateOptions{})
			return err == nil, err
		}, survivor)
	}
	// The lost zone's evicted pods, terminating since the loss, are
	// finished by its kwok: the Deployment is back to exactly its replicas.
	s.waitFor(3*time.Minute, "deployment "+app+" back to its replicas", func(cs *kubernetes.Clientset) (bool, error) {
		pods, err := cs.CoreV1().Pods(testNS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return false, err
		}
		pl, err := s.placement(ctx, cs, app)
		return len(pods.Items) == replicas && pl.running == replicas, err
	}, kill)
	s.hashAgreement(time.Minute)
	for _, z := range zoneNames {
		after, err := s.snapshot(ctx, s.clients[z])
		if err != nil {
			t.Fatalf("snapshot after, through zone %v: %v", z, err)
		}
		miss := during.missing(after)
		r.lost += len(miss)
		if len(miss) > 0 {
			t.Errorf("%d objects lost after zone %v rejoined (seen through zone %v):\n%s", len(miss), kill, z, strings.Join(miss, "\n"))
		}
	}
	r.apiErrors = int(s.apiErrors.Load() - apiErrors0)
	r.nudges = int(s.nudges.Load() - nudges0)
	r.restarts = s.restarts() - restarts0
	t.Logf("zone %v rejoined in %v; %d objects compared, %d lost; across the loss: %d API errors, %d pods nudged, %d process restarts",
		kill, r.rejoin.Round(10*time.Millisecond), len(during), r.lost, r.apiErrors, r.nudges, r.restarts)
	return r
}

// apiLoad writes config maps through both zones' apiservers until stopped
// and records, per zone, the errors and the longest time without a
// successful write (and when it ended, relative to the start).
type apiLoad struct {
	s      *site
	start  time.Time
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	st [2]loadStats
}

// loadStats are one zone's results.
type loadStats struct {
	ok, errs  int
	maxGap    time.Duration
	gapEnded  time.Duration // since the start of the load
	lastError error
}

func (s *site) startLoad(prefix string) *apiLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &apiLoad{s: s, cancel: cancel, start: time.Now()}
	for _, z := range zoneNames {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			last := time.Now()
			for i := 0; ctx.Err() == nil; i++ {
				wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := s.clients[z].CoreV1().ConfigMaps(testNS).Create(wctx, configMap(fmt.Sprintf("%s-%v-%d", prefix, z, i)), metav1.CreateOptions{})
				wcancel()
				if ctx.Err() != nil {
					return
				}
				now := time.Now()
				l.mu.Lock()
				st := &l.st[z]
				if err == nil {
					st.ok++
					if gap := now.Sub(last); gap > st.maxGap {
						st.maxGap, st.gapEnded = gap, now.Sub(l.start)
					}
					last = now
				} else {
					st.errs++
					st.lastError = err
				}
				l.mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	return l
}

// since is the time since the load started.
func (l *apiLoad) since() time.Duration { return time.Since(l.start).Round(10 * time.Millisecond) }

// stop ends the load and returns its per-zone results.
func (l *apiLoad) stop() [2]loadStats {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.st
}
