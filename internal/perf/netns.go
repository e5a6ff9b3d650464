package perf

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Pair is two network namespaces joined by a veth pair. NsA/IfA/AddrA is
// the responder's side, NsB/IfB/AddrB the pinger's.
type Pair struct {
	NsA, NsB     string
	IfA, IfB     string
	AddrA, AddrB string
}

// NewPair creates the namespaces and the veth pair. Names carry prefix and
// the process id, so concurrent runs never collide and Close only removes
// what this run created. On error, whatever was created is removed.
func NewPair(prefix string) (*Pair, error) {
	id := os.Getpid() % 100000
	sub := os.Getpid()%200 + 20
	p := &Pair{
		NsA: fmt.Sprintf("%s-%d-a", prefix, id), NsB: fmt.Sprintf("%s-%d-b", prefix, id),
		// Interface names are limited to 15 bytes.
		IfA: fmt.Sprintf("dyp%da", id), IfB: fmt.Sprintf("dyp%db", id),
		AddrA: fmt.Sprintf("10.98.%d.1", sub), AddrB: fmt.Sprintf("10.98.%d.2", sub),
	}
	steps := [][]string{
		{"ip", "netns", "add", p.NsA},
		{"ip", "netns", "add", p.NsB},
		{"ip", "link", "add", p.IfA, "netns", p.NsA, "type", "veth", "peer", "name", p.IfB, "netns", p.NsB},
		{"ip", "-n", p.NsA, "addr", "add", p.AddrA + "/24", "dev", p.IfA},
		{"ip", "-n", p.NsB, "addr", "add", p.AddrB + "/24", "dev", p.IfB},
		{"ip", "-n", p.NsA, "link", "set", "lo", "up"},
		{"ip", "-n", p.NsB, "link", "set", "lo", "up"},
		{"ip", "-n", p.NsA, "link", "set", p.IfA, "up"},
		{"ip", "-n", p.NsB, "link", "set", p.IfB, "up"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			p.Close()
			return nil, fmt.Errorf("%s: %v: %s", strings.Join(s, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return p, nil
}

// Close removes both namespaces (which removes the veth ends inside them);
// the link delete covers a failure between "link add" and the move. Errors
// are ignored: the objects may never have been created.
func (p *Pair) Close() {
	exec.Command("ip", "netns", "del", p.NsA).Run()
	exec.Command("ip", "netns", "del", p.NsB).Run()
	exec.Command("ip", "link", "del", p.IfA).Run()
}
