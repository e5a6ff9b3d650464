package netns

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dyad-db/dyad/internal/shaper"
)

const (
	prefix     = "dyadb-"
	netnsDir   = "/run/netns"
	ReplIface  = "repl" // replication veth inside each zone
	ClientIfce = "cli"  // client veth inside each zone
)

// Pair is two or three zones joined on one replication subnet, each
// reachable from the root namespace over its own client veth.
type Pair struct {
	id    string // <pid>-<random>
	n     int    // third octet of every subnet
	ns    []string
	mid   string        // the hub's namespace; "" when two zones share a veth
	delay time.Duration // one way, between any two zones
	hub   *shaper.Hub   // running while the Pair is open, when mid != ""
}

// Options shape a Pair.
type Options struct {
	// Zones is 2 (the default) or 3 (etcd's three members).
	Zones int
	// Delay is added to every frame between two zones, each way. With
	// Delay or Hub set, the zones' replication veths meet in a third
	// namespace where an internal/shaper Hub in this process carries the
	// frames; otherwise two zones are joined by one veth.
	Delay time.Duration
	// Hub routes the zones through the shaper even without a delay (what
	// the shaper itself costs is then measurable).
	Hub bool
}

// New creates two zones joined by a veth. On error nothing is left.
func New() (*Pair, error) { return NewWith(Options{}) }

// NewWith creates the zones opts asks for and their links. On error
// nothing is left.
func NewWith(opts Options) (*Pair, error) {
	zones := opts.Zones
	if zones == 0 {
		zones = 2
	}
	if zones < 2 || zones > 3 {
		return nil, fmt.Errorf("netns: %d zones (2 or 3 supported)", zones)
	}
	if zones > 2 || opts.Delay > 0 {
		opts.Hub = true
	}
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
			return nil, errors.New("no free 10.216-219.N.0/24 subnet")
		}
	}
	p := &Pair{id: fmt.Sprintf("%d-%06x", os.Getpid(), rand.IntN(1<<24)), n: n, delay: opts.Delay}
	for z := range zones {
		p.ns = append(p.ns, prefix+p.id+"-"+string(rune('a'+z)))
	}
	if opts.Hub {
		p.mid = prefix + p.id + "-m"
	}
	if err := p.build(); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func (p *Pair) build() error {
	var cmds [][]string
	for _, ns := range p.ns {
		cmds = append(cmds, []string{"netns", "add", ns})
	}
	if p.mid == "" {
		cmds = append(cmds, []string{"link", "add", ReplIface, "netns", p.ns[0], "type", "veth", "peer", "name", ReplIface, "netns", p.ns[1]})
	} else {
		cmds = append(cmds, []string{"netns", "add", p.mid}, []string{"-n", p.mid, "link", "set", "lo", "up"})
		for z := range p.ns {
			cmds = append(cmds,
				[]string{"link", "add", ReplIface, "netns", p.ns[z], "type", "veth", "peer", "name", hubPort(z), "netns", p.mid},
				[]string{"-n", p.mid, "link", "set", hubPort(z), "up"})
		}
	}
	for z := range p.ns {
		hostIf := "db" + p.id[len(p.id)-6:] + string(rune('a'+z))
		cmds = append(cmds,
			[]string{"-n", p.ns[z], "link", "set", "lo", "up"},
			[]string{"-n", p.ns[z], "addr", "add", p.ReplIP(z) + "/24", "dev", ReplIface},
			[]string{"-n", p.ns[z], "link", "set", ReplIface, "up"},
			[]string{"link", "add", hostIf, "type", "veth", "peer", "name", ClientIfce, "netns", p.ns[z]},
			[]string{"addr", "add", p.HostIP(z) + "/24", "dev", hostIf},
			[]string{"link", "set", hostIf, "up"},
			[]string{"-n", p.ns[z], "addr", "add", p.ClientIP(z) + "/24", "dev", ClientIfce},
			[]string{"-n", p.ns[z], "link", "set", ClientIfce, "up"},
		)
	}
	for _, c := range cmds {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(c, " "), err, out)
		}
	}
	if p.mid == "" {
		return nil
	}
	ports := make([]string, len(p.ns))
	faults := make([]shaper.Fault, len(p.ns))
	for z := range ports {
		ports[z] = hubPort(z)
		faults[z] = shaper.Fault{Delay: p.delay}
	}
	hub, err := shaper.Open(p.mid, ports)
	if err != nil {
		return fmt.Errorf("netns: the shaper: %w", err)
	}
	hub.Set(faults, true)
	p.hub = hub
	return nil
}

// hubPort is the name of zone z's port in the hub's namespace.
func hubPort(z int) string { return fmt.Sprintf("port-%c", 'a'+z) }

// Zones is the number of zones.
func (p *Pair) Zones() int { return len(p.ns) }

// Delay is the one-way delay between two zones (0: none added).
func (p *Pair) Delay() time.Duration { return p.delay }

// Shaped reports whether the zones' traffic crosses the userspace shaper.
func (p *Pair) Shaped() bool { return p.hub != nil }

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

// Close stops the shaper and deletes the namespaces, and with them every
// veth. Processes still running inside keep the namespace alive, so callers
// stop them first.
func (p *Pair) Close() error {
	if p.hub != nil {
		p.hub.Close()
		p.hub = nil
	}
	var errs []error
	for _, ns := range append(slices.Clone(p.ns), p.mid) {
		if ns == "" {
			continue
		}
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

// usedOctets lists N for which a 10.216-219.N.0/24 address exists in the
// root namespace (another pair's client links).
func usedOctets() (map[int]bool, error) {
	out, err := exec.Command("ip", "-o", "-4", "addr", "show").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ip addr show: %v: %s", err, out)
	}
	used := map[int]bool{}
	for _, f := range strings.Fields(string(out)) {
		for _, pfx := range []string{"10.216.", "10.217.", "10.218.", "10.219."} {
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
