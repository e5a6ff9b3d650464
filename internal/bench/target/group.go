package target

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/dyad-db/dyad/internal/bench/proc"
)

// logTail is how much of a server's log an error message quotes.
const logTail = 4 << 10

// group is the set of processes one target runs, stopped in reverse start
// order (kine before its PostgreSQL, the replica side after the primary does
// not matter for a benchmark).
type group struct {
	dir   string // the target's work directory
	procs []*proc.Proc
	logs  []string
}

func newGroup(workDir, name string) (*group, error) {
	dir := filepath.Join(workDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &group{dir: dir}, nil
}

// start launches a process whose log is <dir>/<logName>.log.
func (g *group) start(logName string, s proc.Spec) (*proc.Proc, error) {
	s.Log = filepath.Join(g.dir, logName+".log")
	p, err := proc.Start(s)
	if err != nil {
		return nil, err
	}
	g.procs = append(g.procs, p)
	g.logs = append(g.logs, s.Log)
	return p, nil
}

// restart starts old's spec again in old's place (old must have exited).
func (g *group) restart(old *proc.Proc) (*proc.Proc, error) {
	i := slices.Index(g.procs, old)
	if i < 0 {
		return nil, errors.New("restart: process not in this group")
	}
	p, err := proc.Start(old.Spec())
	if err != nil {
		return nil, err
	}
	g.procs[i] = p
	return p, nil
}

// failed reports the first process that has exited, with its log's tail.
func (g *group) failed() error {
	for i, p := range g.procs {
		select {
		case <-p.Exited():
			return fmt.Errorf("%s exited (%v); log tail:\n%s", g.logs[i], p.Err(), p.LogTail(logTail))
		default:
		}
	}
	return nil
}

// stop stops every process, last started first.
func (g *group) stop() error {
	var errs []error
	for i := len(g.procs) - 1; i >= 0; i-- {
		if err := g.procs[i].Stop(stopGrace); err != nil {
			errs = append(errs, err)
		}
	}
	g.procs, g.logs = nil, nil
	return errors.Join(errs...)
}

// restartAll stops every process (SIGTERM, as an operator's restart does)
// and starts each again on its data, in the original order. It returns
// when the last one has been started, with the time the first one was,
// and does not wait for them to serve.
func (g *group) restartAll() (time.Time, error) {
	var errs []error
	for i := len(g.procs) - 1; i >= 0; i-- {
		if err := g.procs[i].Stop(stopGrace); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return time.Time{}, err
	}
	var first time.Time
	for i, old := range g.procs {
		if i == 0 {
			first = time.Now()
		}
		p, err := proc.Start(old.Spec())
		if err != nil {
			return first, err
		}
		g.procs[i] = p
	}
	return first, nil
}
