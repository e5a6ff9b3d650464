package twozone

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/dyad-db/dyad/internal/bench/target"
)

// LoadResult is the pair under write load with every core busy.
type LoadResult struct {
	Duration time.Duration `json:"duration_ns"`
	Hogs     int           `json:"cpu_hogs"`
	Writes   int           `json:"writes"`
	Puts     [2]Latency    `json:"puts"`
	// RoleChanges counts changes of the pair's observed roles (sampled
	// every 100 ms on both nodes) away from the initial primary/replica.
	RoleChanges int `json:"role_changes"`
	// Counter increases over the run, both nodes summed.
	Failovers      int    `json:"failovers"`
	FalseFailovers int    `json:"false_failovers"`
	SoloEntered    int    `json:"solo_entered"`
	LoadAvg        string `json:"loadavg_end"`
}

// Loaded runs writers on both zones for cfg.LoadDuration while one CPU hog
// per core spins, and counts role changes and false failovers.
func Loaded(ctx context.Context, p *target.Pair, cfg Config) (*LoadResult, error) {
	leader, err := waitPair(ctx, p)
	if err != nil {
		return nil, err
	}
	var before [2]metrics
	for z := range 2 {
		if before[z], err = scrape(ctx, p.MetricsURL(z)); err != nil {
			return nil, err
		}
	}
	hogs, err := startHogs(runtime.NumCPU())
	defer func() { stopHogs(hogs) }()
	if err != nil {
		return nil, err
	}
	eps := p.Zones()
	tr, err := startTraffic(ctx, trafficSpec{Endpoints: [][]string{{eps[0]}, {eps[1]}},
		Writers: cfg.Writers, Prefix: cfg.Prefix + "load/", ValueSize: cfg.ValueSize})
	if err != nil {
		return nil, err
	}
	res := &LoadResult{Hogs: len(hogs)}
	want := [2]int{}
	want[leader], want[1-leader] = rolePrimary, roleReplica
	last := want
	start := time.Now()
	for time.Since(start) < cfg.LoadDuration && ctx.Err() == nil {
		cfg.progress(fmt.Sprintf("dyad-pair: %d CPU hogs, watching roles", len(hogs)), float64(time.Since(start))/float64(cfg.LoadDuration))
		now := [2]int{role(ctx, p.MetricsURL(0)), role(ctx, p.MetricsURL(1))}
		// A scrape that times out under the load (-1) is not a change.
		if now[0] >= 0 && now[1] >= 0 && now != last {
			res.RoleChanges++
			last = now
		}
		_ = sleep(ctx, 100*time.Millisecond)
	}
	tr.stop()
	res.Duration = time.Since(start)
	stopHogs(hogs)
	hogs = nil
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res.Writes = len(tr.ackedKeys())
	for z := range 2 {
		r := "replica"
		if z == leader {
			r = "primary"
		}
		res.Puts[z] = latencyOf(r, tr.writes[z])
		after, err := scrape(ctx, p.MetricsURL(z))
		if err != nil {
			return res, err
		}
		res.Failovers += int(after[mFailovers] - before[z][mFailovers])
		res.FalseFailovers += int(after[mFalseFailovers] - before[z][mFalseFailovers])
		res.SoloEntered += int(after[mSoloEntered] - before[z][mSoloEntered])
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		res.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return res, nil
}

// startHogs starts n busy shell loops (separate processes, so they compete
// with the servers as other tenants of the machine would).
func startHogs(n int) ([]*exec.Cmd, error) {
	var hogs []*exec.Cmd
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			return hogs, errors.Join(errors.New("starting a CPU hog"), err)
		}
		hogs = append(hogs, c)
	}
	return hogs, nil
}

func stopHogs(hogs []*exec.Cmd) {
	for _, c := range hogs {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
}
