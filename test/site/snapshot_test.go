package site

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/yaml"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dyad-db/dyad/internal/testenv"
	"github.com/dyad-db/dyad/test/testutil"
)

// The shipped schedules' files, relative to the repository.
const (
	snapshotService = "deploy/systemd/dyad-snapshot.service"
	snapshotTimer   = "deploy/systemd/dyad-snapshot.timer"
	snapshotCronJob = "deploy/kubernetes/dyad-snapshot-cronjob.yaml"
)

// snapshotStamp is the time format of `dyad snapshot save --dir` file names.
const snapshotStamp = "20060102T150405.000000000Z"

// scheduledSave is one shipped scheduled snapshot command, made runnable
// here: argv with paths and ports rewritten, its backup directory, and the
// retention it sets.
type scheduledSave struct {
	argv      []string
	dir       string
	retain    int
	retainAge time.Duration
}

// parseSaveArgs reads the retention and the directory from a `dyad
// snapshot save` command line (flags as --name value or --name=value).
func parseSaveArgs(t *testing.T, what string, argv []string) (dir string, retain int, age time.Duration) {
	t.Helper()
	if len(argv) < 3 || argv[1] != "snapshot" || argv[2] != "save" {
		t.Fatalf("%s: command %v is not dyad snapshot save", what, argv)
	}
	vals := map[string]string{}
	for i := 3; i < len(argv); i++ {
		name, val, ok := strings.Cut(strings.TrimPrefix(argv[i], "--"), "=")
		if !ok && i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "--") {
			val = argv[i+1]
			i++
		}
		vals[name] = val
	}
	var err error
	if retain, err = strconv.Atoi(vals["retain"]); err != nil || retain < 3 {
		t.Fatalf("%s: --retain=%q; want a count of at least 3", what, vals["retain"])
	}
	if age, err = time.ParseDuration(vals["retain-age"]); err != nil || age <= 0 {
		t.Fatalf("%s: --retain-age=%q; want a duration", what, vals["retain-age"])
	}
	if vals["dir"] == "" || vals["cacert"] == "" || vals["cert"] == "" || vals["key"] == "" {
		t.Fatalf("%s: want --dir, --cacert, --cert and --key (the client port requires TLS client certificates): %v", what, argv)
	}
	return vals["dir"], retain, age
}

// run runs the save once and returns the name of the snapshot it reports
// and the names it reports removed.
func (s *scheduledSave) run(t *testing.T) (saved string, removed []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startupWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.argv[0], s.argv[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", s.argv, err, out.String(), errb.String())
	}
	savedRE := regexp.MustCompile(`(?m)^saved (\S+) from `)
	removedRE := regexp.MustCompile(`(?m)^removed (\S+) \(retention\)$`)
	m := savedRE.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("%v printed no saved line:\n%s", s.argv, out.String())
	}
	for _, r := range removedRE.FindAllStringSubmatch(out.String(), -1) {
		removed = append(removed, filepath.Base(r[1]))
	}
	slices.Sort(removed)
	return filepath.Base(m[1]), removed
}

// snapshotRevision is etcdutl snapshot status's revision of a file; etcdutl
// fails on anything that is not a valid etcd snapshot.
func snapshotRevision(t *testing.T, path string) int64 {
	t.Helper()
	etcdutl := testutil.RequireBinary(t, "etcdutl")
	out, err := exec.Command(etcdutl, "snapshot", "status", path, "-w", "json").Output()
	if err != nil {
		t.Fatalf("etcdutl snapshot status %s: %v", path, err)
	}
	var st struct{ Revision int64 }
	if err := json.Unmarshal(bytes.TrimSpace(out), &st); err != nil {
		t.Fatalf("etcdutl snapshot status %s: %q: %v", path, out, err)
	}
	return st.Revision
}

// checkScheduledRuns runs save three times against the node cli reaches,
// with a write before each run, in a backup directory pre-filled (by name,
// from one now) with retain-1 older snapshots within the age limit and two
// beyond it. It checks that each run's file is a valid snapshot holding
// the write before it, and that retention removes exactly the expected
// oldest files: the two too old on the first run (the count is then just
// met), then the oldest remaining one on each later run. Other files in
// the directory stay.
func checkScheduledRuns(t *testing.T, s *scheduledSave, cli *clientv3.Client) {
	t.Helper()
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	name := func(age time.Duration) string { return "dyad-" + now.Add(-age).UTC().Format(snapshotStamp) + ".db" }
	step := s.retainAge / time.Duration(2*s.retain) // every pre-filled young file within half the age limit
	var young []string                              // newest first
	for i := 1; i < s.retain; i++ {
		young = append(young, name(time.Duration(i)*step))
	}
	old := []string{name(s.retainAge + 24*time.Hour), name(2 * s.retainAge)}
	foreign := "README"
	for _, n := range append(append(slices.Clone(young), old...), foreign) {
		if err := os.WriteFile(filepath.Join(s.dir, n), []byte("not a snapshot"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(old)
	wantRemoved := [][]string{old, {young[len(young)-1]}, {young[len(young)-2]}}

	ctx, cancel := context.WithTimeout(context.Background(), startupWait)
	defer cancel()
	var ours []string
	lastRev := int64(0)
	for run, want := range wantRemoved {
		put, err := cli.Put(ctx, fmt.Sprintf("scheduled/%d", run), "v")
		if err != nil {
			t.Fatal(err)
		}
		// A linearizable read on the node to be saved: it has applied the
		// write before its snapshot is taken.
		if _, err := cli.Get(ctx, "scheduled/"); err != nil {
			t.Fatal(err)
		}
		saved, removed := s.run(t)
		if !slices.Equal(removed, want) {
			t.Fatalf("run %d removed %v, want exactly %v", run+1, removed, want)
		}
		rev := snapshotRevision(t, filepath.Join(s.dir, saved))
		if rev < put.Header.Revision || rev <= lastRev {
			t.Fatalf("run %d: snapshot %s at revision %d; the write before it was at %d, the previous snapshot at %d",
				run+1, saved, rev, put.Header.Revision, lastRev)
		}
		lastRev = rev
		ours = append(ours, saved)
		// Everything not removed so far is still there, and nothing else.
		var wantLeft []string
		wantLeft = append(wantLeft, ours...)
		wantLeft = append(wantLeft, young[:len(young)-run]...)
		wantLeft = append(wantLeft, foreign)
		slices.Sort(wantLeft)
		var got []string
		es, err := os.ReadDir(s.dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			got = append(got, e.Name())
		}
		slices.Sort(got)
		if !slices.Equal(got, wantLeft) {
			t.Fatalf("after run %d the directory holds\n%v\nwant\n%v", run+1, got, wantLeft)
		}
		if n := len(got) - 1; n != s.retain { // all but the foreign file
			t.Fatalf("after run %d: %d snapshots kept, want --retain %d", run+1, n, s.retain)
		}
	}
}

// tlsEtcdClient is a clientv3 client of one TLS endpoint.
func tlsEtcdClient(t *testing.T, pki, ep string) *clientv3.Client {
	t.Helper()
	_, cfg := tlsClient(t, filepath.Join(pki, "ca.crt"), filepath.Join(pki, "apiserver-etcd-client.crt"), filepath.Join(pki, "apiserver-etcd-client.key"))
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, TLS: cfg, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSnapshotTimerUnits checks the shipped timer and service with
// systemd-analyze verify (the binary path pointed at a real dyad, which
// verify requires to exist).
func TestSnapshotTimerUnits(t *testing.T) {
	bin := testutil.BuildDyad(t)
	analyze := testenv.NeedCommand(t, "systemd-analyze", "systemd")
	dir := t.TempDir()
	var paths []string
	for _, f := range []string{snapshotService, snapshotTimer} {
		text := strings.ReplaceAll(string(testutil.ReadRepoFile(t, f)), "/usr/local/bin/dyad", bin)
		p := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	out, err := exec.Command(analyze, append([]string{"verify"}, paths...)...).CombinedOutput()
	// verify also warns without failing (an unknown setting is ignored):
	// any word about the units fails the test.
	if err != nil || strings.Contains(string(out), "dyad-snapshot") {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	u := parseUnit(t, string(testutil.ReadRepoFile(t, snapshotService)))
	if got := u.settings["Type"]; !slices.Equal(got, []string{"oneshot"}) {
		t.Errorf("Type=%v, want oneshot (a timer's job that ends)", got)
	}
	if !slices.Equal(u.settings["StateDirectory"], []string{"dyad-backup"}) {
		t.Errorf("StateDirectory=%v, want dyad-backup (the --dir, writable under DynamicUser and ProtectSystem)", u.settings["StateDirectory"])
	}
}

// TestSnapshotTimerSingleNode runs the shipped timer's service (its
// ExecStart, with the credentials systemd would hand it) against a running
// single node with client TLS, three times.
func TestSnapshotTimerSingleNode(t *testing.T) {
	bin := testutil.BuildDyad(t)
	pki := dyadCerts(t, bin, "--node", "a=127.0.0.1", "--client", "apiserver-etcd-client")
	ports := freePorts(t, 2)
	client := "https://127.0.0.1:" + ports[0]
	nodePKI := filepath.Join(pki, "a")
	p := start(t, "single", []string{bin, "serve", "--name", "a", "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client, "--listen-metrics-urls", "http://127.0.0.1:" + ports[1],
		"--cert-file", filepath.Join(nodePKI, "server.crt"), "--key-file", filepath.Join(nodePKI, "server.key"),
		"--trusted-ca-file", filepath.Join(nodePKI, "ca.crt"), "--client-cert-auth"}, os.Environ())
	hc, _ := tlsClient(t, filepath.Join(pki, "ca.crt"), filepath.Join(pki, "apiserver-etcd-client.crt"), filepath.Join(pki, "apiserver-etcd-client.key"))
	checkHealth(t, p.get(t, hc, client+"/health"))

	s := serviceSave(t, bin, nodePKI, ports[0])
	checkScheduledRuns(t, s, tlsEtcdClient(t, pki, "127.0.0.1:"+ports[0]))
}

// serviceSave is the shipped service's ExecStart for a node whose client
// port is port and whose `dyad certs` directory is nodePKI: the
// credentials copied as LoadCredential does, %d expanded, the state
// directory in a temporary one.
func serviceSave(t *testing.T, bin, nodePKI, port string) *scheduledSave {
	t.Helper()
	u := parseUnit(t, string(testutil.ReadRepoFile(t, snapshotService)))
	creds := filepath.Join(t.TempDir(), "credentials")
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, src := range u.credentials {
		if !strings.HasPrefix(src, "/etc/dyad/pki/") {
			t.Fatalf("LoadCredential %s from %s, outside /etc/dyad/pki (what dyad.service reads)", name, src)
		}
		b, err := os.ReadFile(filepath.Join(nodePKI, strings.TrimPrefix(src, "/etc/dyad/pki/")))
		if err != nil {
			t.Fatalf("LoadCredential %s: `dyad certs` wrote no such file: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(creds, name), b, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	state := filepath.Join(t.TempDir(), "dyad-backup")
	var argv []string
	for _, w := range u.execStart {
		w = strings.ReplaceAll(w, "%d", creds)
		if strings.Contains(w, "%") || strings.Contains(w, "$") {
			t.Fatalf("ExecStart word %q uses a specifier or variable this test does not expand", w)
		}
		w = strings.Replace(w, "/usr/local/bin/dyad", bin, 1)
		w = strings.Replace(w, "/var/lib/dyad-backup", state, 1)
		w = strings.Replace(w, "127.0.0.1:2379", "127.0.0.1:"+port, 1)
		argv = append(argv, w)
	}
	onlyLoopback(t, "snapshot service", argv)
	dir, retain, age := parseSaveArgs(t, snapshotService, argv)
	if dir != state {
		t.Fatalf("the service saves into %s, not its StateDirectory", dir)
	}
	return &scheduledSave{argv: argv, dir: dir, retain: retain, retainAge: age}
}

// cronJobs parses the shipped CronJob file strictly into the Kubernetes
// API's own types, one per zone.
func cronJobs(t *testing.T) map[string]*batchv1.CronJob {
	t.Helper()
	out := map[string]*batchv1.CronJob{}
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(testutil.ReadRepoFile(t, snapshotCronJob)), -1) {
		var cj batchv1.CronJob
		if err := yaml.UnmarshalStrict([]byte(doc), &cj); err != nil {
			t.Fatalf("%s document %d: %v", snapshotCronJob, i, err)
		}
		if cj.APIVersion != "batch/v1" || cj.Kind != "CronJob" {
			t.Fatalf("%s document %d: %s %s, want batch/v1 CronJob", snapshotCronJob, i, cj.APIVersion, cj.Kind)
		}
		zone := cj.Spec.JobTemplate.Spec.Template.Spec.NodeSelector["dyad.io/zone"]
		if out[zone] != nil || zone == "" {
			t.Fatalf("%s: CronJob %s selects zone %q (none, or twice)", snapshotCronJob, cj.Name, zone)
		}
		out[zone] = &cj
	}
	return out
}

// TestSnapshotCronJobOnPair lints the CronJob example and runs each zone's
// job command (its host paths on the test's directories, its port on the
// zone's node) against a running secure pair, three times per zone: on the
// primary and on the replica.
func TestSnapshotCronJobOnPair(t *testing.T) {
	jobs := cronJobs(t)
	if len(jobs) != 2 || jobs["a"] == nil || jobs["b"] == nil {
		t.Fatalf("%s: want one CronJob per zone a and b, have %d", snapshotCronJob, len(jobs))
	}
	fieldRE := regexp.MustCompile(`^(\*|[0-9,*/-]+)$`)
	for zone, cj := range jobs {
		fields := strings.Fields(cj.Spec.Schedule)
		if len(fields) != 5 || slices.ContainsFunc(fields, func(f string) bool { return !fieldRE.MatchString(f) }) {
			t.Errorf("zone %s: schedule %q is not a five-field cron line", zone, cj.Spec.Schedule)
		}
		if cj.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
			t.Errorf("zone %s: concurrencyPolicy %q, want Forbid (two saves at once race on retention)", zone, cj.Spec.ConcurrencyPolicy)
		}
		pod := cj.Spec.JobTemplate.Spec.Template.Spec
		if !pod.HostNetwork {
			t.Errorf("zone %s: the job must run on the host network to reach the node's 127.0.0.1:2379", zone)
		}
	}

	bin, nodes, pki, _ := startStaticPodPair(t)
	for _, zone := range zones() {
		n := nodes[zone]
		c := jobs[zone].Spec.JobTemplate.Spec.Template.Spec.Containers[0]
		backup := filepath.Join(t.TempDir(), "backup-"+zone)
		paths := map[string]string{}
		for _, m := range c.VolumeMounts {
			switch m.Name {
			case "pki":
				paths[m.MountPath] = n.pkiDir
			case "backup":
				paths[m.MountPath] = backup
			default:
				t.Fatalf("zone %s: unknown volume %s", zone, m.Name)
			}
		}
		argv := []string{bin}
		for _, a := range c.Command[1:] {
			for from, to := range paths {
				a = strings.ReplaceAll(a, "="+from, "="+to)
			}
			argv = append(argv, n.rewrite.Replace(a))
		}
		onlyLoopback(t, "zone "+zone+" CronJob", argv)
		dir, retain, age := parseSaveArgs(t, snapshotCronJob, argv)
		if dir != backup {
			t.Fatalf("zone %s: the job saves into %s, which is on no backup volume", zone, dir)
		}
		t.Run("zone-"+zone, func(t *testing.T) {
			checkScheduledRuns(t, &scheduledSave{argv: argv, dir: dir, retain: retain, retainAge: age},
				tlsEtcdClient(t, pki, "127.0.0.1:"+n.client))
		})
	}
}
