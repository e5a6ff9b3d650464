package e2e

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/dyad-db/dyad/test/testutil"
)

// serveFlags are the long flags `dyad serve --help` lists.
func serveFlags(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command(testutil.BuildDyad(t), "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("dyad serve --help: %v\n%s", err, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) < 10 {
		t.Fatalf("found only %d flags in dyad serve --help:\n%s", len(flags), out)
	}
	return flags
}

// flagNames returns the --names of args ("--x=y" and "--x y" forms).
func flagNames(args []string) []string {
	var out []string
	for _, a := range args {
		if strings.HasPrefix(a, "--") {
			name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			out = append(out, name)
		}
	}
	return out
}

// The static-pod manifests (one per zone) are valid Pods with host
// networking whose dyad command lines use only flags dyad serve has.
func TestDeployStaticPod(t *testing.T) {
	for _, zone := range []string{"a", "b"} {
		t.Run(zone, func(t *testing.T) { checkStaticPod(t, "deploy/kubernetes/dyad-zone-"+zone+".yaml") })
	}
}

func checkStaticPod(t *testing.T, path string) {
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(testutil.ReadRepoFile(t, path), &pod); err != nil {
		t.Fatalf("%s is not a Pod: %v", path, err)
	}
	if !pod.Spec.HostNetwork || pod.Namespace != "kube-system" || pod.Spec.PriorityClassName != "system-node-critical" {
		t.Fatalf("static pod: hostNetwork=%v namespace=%q priorityClassName=%q, want true, kube-system, system-node-critical",
			pod.Spec.HostNetwork, pod.Namespace, pod.Spec.PriorityClassName)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("static pod has %d containers, want 1", len(pod.Spec.Containers))
	}
	cmd := pod.Spec.Containers[0].Command
	if len(cmd) < 2 || filepath.Base(cmd[0]) != "dyad" || cmd[1] != "serve" {
		t.Fatalf("static pod command %q is not dyad serve", cmd)
	}
	known := serveFlags(t)
	for _, f := range flagNames(cmd[2:]) {
		if !known[f] {
			t.Errorf("static pod: dyad serve has no flag --%s", f)
		}
	}
	mounts := map[string]bool{}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		mounts[m.MountPath] = true
	}
	for _, a := range cmd[2:] {
		name, val, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if strings.HasSuffix(name, "-file") || name == "data-dir" {
			if !mounts[filepath.Dir(val)] && !mounts[val] {
				t.Errorf("static pod: --%s=%s is not under a volume mount", name, val)
			}
		}
	}
}

// The systemd unit's ExecStart uses only flags dyad serve has, and every
// variable it expands is set in the example environment file.
func TestDeploySystemdUnit(t *testing.T) {
	unit := string(testutil.ReadRepoFile(t, "deploy/systemd/dyad.service"))
	env := string(testutil.ReadRepoFile(t, "deploy/systemd/dyad.env"))
	start := strings.Index(unit, "ExecStart=")
	if start < 0 {
		t.Fatal("dyad.service has no ExecStart")
	}
	var cmdline []string
	for _, line := range strings.Split(unit[start+len("ExecStart="):], "\n") {
		line = strings.TrimSpace(line)
		cont := strings.HasSuffix(line, "\\")
		cmdline = append(cmdline, strings.Fields(strings.TrimSuffix(line, "\\"))...)
		if !cont {
			break
		}
	}
	if len(cmdline) < 2 || cmdline[0] != "/usr/local/bin/dyad" || cmdline[1] != "serve" {
		t.Fatalf("ExecStart %q is not /usr/local/bin/dyad serve", cmdline)
	}
	known := serveFlags(t)
	for _, f := range flagNames(cmdline[2:]) {
		if !known[f] {
			t.Errorf("dyad.service: dyad serve has no flag --%s", f)
		}
	}
	set := map[string]bool{}
	for _, line := range strings.Split(env, "\n") {
		if k, _, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			set[strings.TrimSpace(k)] = true
		}
	}
	for _, m := range regexp.MustCompile(`\$\{(\w+)\}`).FindAllStringSubmatch(strings.Join(cmdline, " "), -1) {
		if !set[m[1]] {
			t.Errorf("dyad.service expands ${%s}, which dyad.env does not set", m[1])
		}
	}
}
