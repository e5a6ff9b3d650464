package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dyad-db/dyad/test/testutil"
)

const (
	zoneLabel = "topology.kubernetes.io/zone"
	testNS    = "e2e"
)

func nodeName(z testutil.Zone, i int) string { return fmt.Sprintf("kwok-%v-%d", z, i) }

// createNodes registers the kwok nodes of both zones and waits until they
// are Ready, then creates the test namespace and waits for its default
// service account (pods need it).
func (s *site) createNodes() {
	t := s.t
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := s.clients[testutil.ZoneA]
	for _, z := range zoneNames {
		for i := 0; i < s.opts.nodesPerZone; i++ {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
				Name: nodeName(z, i),
				Labels: map[string]string{
					zoneLabel:                z.String(),
					"kubernetes.io/hostname": nodeName(z, i),
					"kubernetes.io/os":       "linux",
					"type":                   "kwok",
				},
				// kwok's own convention for the nodes it fakes.
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			}}
			if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create node %s: %v", n.Name, err)
			}
		}
	}
	s.waitFor(2*time.Minute, "every node Ready", func(cs *kubernetes.Clientset) (bool, error) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(nodes.Items) == 2*s.opts.nodesPerZone && countReady(nodes.Items, "") == len(nodes.Items), nil
	}, testutil.ZoneA)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	s.waitFor(time.Minute, "the default service account", func(cs *kubernetes.Clientset) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(testNS).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	}, testutil.ZoneA)
}

// nodeReady reports whether n's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// countReady counts the Ready nodes of zone (every zone when zone is "").
func countReady(nodes []corev1.Node, zone string) int {
	n := 0
	for i := range nodes {
		if (zone == "" || nodes[i].Labels[zoneLabel] == zone) && nodeReady(&nodes[i]) {
			n++
		}
	}
	return n
}

// waitFor polls cond through zone via's client every 250 ms until it holds
// and returns how long that took; errors from the API count as "not yet"
// (the last one is reported on timeout), and each is logged and counted
// (site.apiErrors) so that a scenario can require that there were none.
func (s *site) waitFor(within time.Duration, what string, cond func(*kubernetes.Clientset) (bool, error), via testutil.Zone) time.Duration {
	s.t.Helper()
	start := time.Now()
	var last error
	for time.Since(start) < within {
		ok, err := cond(s.clients[via])
		if ok {
			return time.Since(start)
		}
		if err != nil {
			last = err
			s.apiErrors.Add(1)
			s.t.Logf("API ERROR (%s, through zone %v): %v", what, via, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	s.t.Fatalf("%s: not within %v (last error: %v)", what, within, last)
	return 0
}

// deployment is a Deployment of fake pods spread over the zones (softly:
// ScheduleAnyway, so that a lost zone's pods may all go to the other).
func deployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxUnavailable: ptr.To(intstr.FromString("25%")),
					MaxSurge:       ptr.To(intstr.FromString("25%")),
				},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/fake:1"}},
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew:           1,
						TopologyKey:       zoneLabel,
						WhenUnsatisfiable: corev1.ScheduleAnyway,
						LabelSelector:     &metav1.LabelSelector{MatchLabels: labels},
					}},
					AutomountServiceAccountToken:  ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To(int64(0)),
				},
			},
		},
	}
}

// podPlacement counts the live (not terminating) pods of app that are
// Running and Ready, per zone of their node.
type podPlacement struct {
	live, running int
	runningIn     map[string]int // zone -> Running and Ready pods
}

func (s *site) placement(ctx context.Context, cs *kubernetes.Clientset, app string) (podPlacement, error) {
	pl := podPlacement{runningIn: map[string]int{}}
	pods, err := cs.CoreV1().Pods(testNS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		return pl, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		pl.live++
		s.nudgeIfStuck(ctx, cs, p)
		if p.Status.Phase != corev1.PodRunning || !podReady(p) {
			continue
		}
		pl.running++
		zone := "?"
		if p.Spec.NodeName != "" {
			// Node names carry the zone: kwok-<zone>-<i>.
			zone = strings.SplitN(p.Spec.NodeName, "-", 3)[1]
		}
		pl.runningIn[zone]++
	}
	return pl, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// objectKey names one object of an objectSet.
type objectKey struct{ kind, namespace, name string }

// objectSet maps objects to their UIDs.
type objectSet map[objectKey]string

// stableKinds are the kinds whose objects this test creates or that the
// control plane creates once (none of them is deleted by a zone loss).
// Pods, Leases, Events and EndpointSlices change on their own by design.
func (s *site) snapshot(ctx context.Context, cs *kubernetes.Clientset) (objectSet, error) {
	set := objectSet{}
	add := func(kind string, items []metav1.Object) {
		for _, o := range items {
			set[objectKey{kind, o.GetNamespace(), o.GetName()}] = string(o.GetUID())
		}
	}
	ns, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	add("Namespace", metaOf(ns.Items))
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	add("Node", metaOf(nodes.Items))
	cms, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	add("ConfigMap", metaOf(cms.Items))
	sas, err := cs.CoreV1().ServiceAccounts("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	add("ServiceAccount", metaOf(sas.Items))
	svcs, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	add("Service", metaOf(svcs.Items))
	deps, err := cs.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	add("Deployment", metaOf(deps.Items))
	rss, err := cs.AppsV1().ReplicaSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	add("ReplicaSet", metaOf(rss.Items))
	crs, err := cs.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	add("ClusterRole", metaOf(crs.Items))
	return set, nil
}

// metaOf returns pointers to items' ObjectMeta (through the Object
// interface every API type implements).
func metaOf[T any, PT interface {
	*T
	metav1.Object
}](items []T) []metav1.Object {
	out := make([]metav1.Object, len(items))
	for i := range items {
		out[i] = PT(&items[i])
	}
	return out
}

// missing lists the objects of want that got lost or replaced (another UID)
// in got.
func (want objectSet) missing(got objectSet) []string {
	var out []string
	for k, uid := range want {
		if g, ok := got[k]; !ok {
			out = append(out, fmt.Sprintf("%s %s/%s lost", k.kind, k.namespace, k.name))
		} else if g != uid {
			out = append(out, fmt.Sprintf("%s %s/%s replaced (uid %s -> %s)", k.kind, k.namespace, k.name, uid, g))
		}
	}
	sort.Strings(out)
	return out
}

// stuckAfter is how long a pod bound to a node may stay Pending before
// nudgeIfStuck deletes it.
const stuckAfter = 30 * time.Second

// nudgeIfStuck deletes p if it has been bound to a node and Pending for
// stuckAfter. kwok plays a pod's stage once: when its status patch fails
// (a store refusing a write for a moment, e.g. "no leader" on an
// overloaded machine), the pod stays Pending forever where a kubelet would
// retry. Its ReplicaSet then recreates it. Every nudge is logged and
// counted (site.nudges) so that a run that needed them says so.
func (s *site) nudgeIfStuck(ctx context.Context, cs *kubernetes.Clientset, p *corev1.Pod) {
	if p.Status.Phase != corev1.PodPending || p.Spec.NodeName == "" {
		return
	}
	for _, c := range p.Status.Conditions {
		if c.Type != corev1.PodScheduled || c.Status != corev1.ConditionTrue || time.Since(c.LastTransitionTime.Time) < stuckAfter {
			continue
		}
		if err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err == nil {
			s.nudges.Add(1)
			s.t.Logf("NUDGE: pod %s bound to %s Pending since %v: deleted, its ReplicaSet recreates it (kwok does not retry a failed stage)",
				p.Name, p.Spec.NodeName, c.LastTransitionTime.Format(time.RFC3339))
		}
	}
}
