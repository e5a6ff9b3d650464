package netns

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

const (
	prefix     = "dyadb-"
	netnsDir   = "/run/netns"
	ReplIface  = "repl" // replication veth inside each zone
	ClientIfce = "cli"  // client veth inside each zone
)

// Pair is two zones joined by a veth, each reachable from the root
// namespace over its own client veth.
type Pair struct {
	id string // <pid>-<random>
	n  int    // third octet of every subnet
	ns [2]string
}

// New creates the two namespaces and their links. On error nothing is left.
func New() (*Pair, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("the ip command (iproute2) is not installed")
	}
	Sweep()
	used, err := usedOctets()
	if err != nil {
		return nil, err
	}
	var n int
	for tries := 0; ; tries++ {
		n = 1 + rand.IntN(250)
		if !used[n] {
			break
		}
		if tries > 1000 {
			return nil, errors.New("no free 10.216-218.N.0/24 subnet")
		}
	}
	p := &Pair{id: fmt.Sprintf("%d-%06x", os.Getpid(), rand.IntN(1<<24)), n: n}
	p.ns = [2]string{prefix + p.id + "-a", prefix + p.id + "-b"}
	if err := p.build(); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (p *Pair) build() error {
	hostIf := [2]string{"db" + p.id[len(p.id)-6:] + "a", "db" + p.id[len(p.id)-6:] + "b"}
	cmds := [][]string{
		{"netns", "add", p.ns[0]},
		{"netns", "add", p.ns[1]},
		{"link", "add", ReplIface, "netns", p.ns[0], "type", "veth", "peer", "name", ReplIface, "netns", p.ns[1]},
	}
	for z := range 2 {
		cmds = append(cmds,
			[]string{"-n", p.ns[z], "link", "set", "lo", "up"},
			[]string{"-n", p.ns[z], "addr", "add", p.ReplIP(z) + "/24", "dev", ReplIface},
			[]string{"-n", p.ns[z], "link", "set", ReplIface, "up"},
			[]string{"link", "add", hostIf[z], "type", "veth", "peer", "name", ClientIfce, "netns", p.ns[z]},
			[]string{"addr", "add", p.HostIP(z) + "/24", "dev", hostIf[z]},
			[]string{"link", "set", hostIf[z], "up"},
			[]string{"-n", p.ns[z], "addr", "add", p.ClientIP(z) + "/24", "dev", ClientIfce},
			[]string{"-n", p.ns[z], "link", "set", ClientIfce, "up"},
		)
	}
	for _, c := range cmds {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(c, " "), err, out)
		}
	}
	return nil
}

// Namespace is zone z's namespace name (z is 0 or 1).
func (p *Pair) Namespace(z int) string { return p.ns[z] }

// ReplIP is zone z's address on the replication link.
func (p *Pair) ReplIP(z int) string { return fmt.Sprintf("10.216.%d.%d", p.n, z+1) }

// ClientIP is zone z's address on its client link, reachable from the root
// namespace.
func (p *Pair) ClientIP(z int) string { return fmt.Sprintf("10.%d.%d.2", 217+z, p.n) }

// HostIP is the root namespace's end of zone z's client link.
func (p *Pair) HostIP(z int) string { return fmt.Sprintf("10.%d.%d.1", 217+z, p.n) }

// Command returns the argv that runs bin inside zone z (`ip netns exec`
// execs bin, so the started pid is bin's own).
func (p *Pair) Command(z int, bin string, args ...string) (string, []string) {
	return "ip", append([]string{"netns", "exec", p.ns[z], bin}, args...)
}

// Close deletes both namespaces, and with them every veth. Processes still
// running inside keep the namespace alive, so callers stop them first.
func (p *Pair) Close() error {
	var errs []error
	for _, ns := range p.ns {
		if err := deleteNetns(ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func deleteNetns(ns string) error {
	if _, err := os.Stat(filepath.Join(netnsDir, ns)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if out, err := exec.Command("ip", "netns", "delete", ns).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns delete %s: %v: %s", ns, err, out)
	}
	return nil
}

// Sweep deletes namespaces this package created for a process that no
// longer exists, and returns their names.
func Sweep() []string {
	ents, err := os.ReadDir(netnsDir)
	if err != nil {
		return nil
	}
	var gone []string
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		pidStr, _, _ := strings.Cut(strings.TrimPrefix(name, prefix), "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		if deleteNetns(name) == nil {
			gone = append(gone, name)
		}
	}
	return gone
}

// usedOctets lists N for which a 10.216-218.N.0/24 address exists in the
// root namespace (another pair's client links).
func usedOctets() (map[int]bool, error) {
	out, err := exec.Command("ip", "-o", "-4", "addr", "show").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ip addr show: %v: %s", err, out)
	}
	used := map[int]bool{}
	for _, f := range strings.Fields(string(out)) {
		for _, pfx := range []string{"10.216.", "10.217.", "10.218."} {
			if rest, ok := strings.CutPrefix(f, pfx); ok {
				if o, _, ok := strings.Cut(rest, "."); ok {
					if n, err := strconv.Atoi(o); err == nil {
						used[n] = true
					}
				}
			}
		}
	}
	return used, nil
}
