package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/dyad-db/dyad/internal/ddsnet"
	"github.com/dyad-db/dyad/internal/perf"
	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
)

// The whole replication path: two dyad nodes, one per namespace, each the
// real internal/server over internal/ddsnet, exactly as `dyad serve` runs
// a pair except that fsync is off (--unsafe-no-fsync, data on the
// temporary directory), so that the row shows the software and the
// network, not the disk. The responder is the replica; the pinger is the
// primary and times Puts made in-process (no gRPC): each is proposed,
// applied and logged on the primary, published, applied and persisted by
// the replica, acknowledged and answered, the round trip every
// synchronous write pays. Its throughput phase runs perfPairClients
// concurrent writers (group commit) and counts acknowledged Puts.
const (
	perfPairCluster = 0xd1ad
	perfPairClients = 16
	perfPairLease   = time.Second // dyad serve's default --peer-lease
)

// perfPairNode runs one node of the pair until ctx ends; started is called
// with the node once it runs.
func perfPairNode(ctx context.Context, j perfJob, member uint64, primary bool, started func(*server.Server) error) error {
	dir, err := os.MkdirTemp("", "dyadperf-pair-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	dcfg := j.config()
	dcfg.WriteBatch = true // as dyad serve configures a pair (ddsConfig)
	tr, err := ddsnet.New(ddsnet.Config{DDS: dcfg, Cluster: perfPairCluster, Node: member, WaitSet: j.WaitSet})
	if err != nil {
		return err
	}
	cfg := server.Defaults()
	cfg.Name = fmt.Sprintf("perf%d", member)
	cfg.DataDir = dir
	cfg.UnsafeNoFsync = true
	cfg.ClusterID, cfg.MemberID = perfPairCluster, member
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.Repl = &server.ReplConfig{
		Transport:  tr,
		Lease:      perfPairLease,
		AckTimeout: 2 * perfPairLease,
		Bootstrap:  primary,
		Preferred:  primary,
		Retention:  repl.Retention{MaxBytes: 64 << 20, KeepLast: 10000},
	}
	srv, err := server.New(cfg)
	if err != nil {
		tr.Close()
		return err
	}
	defer srv.Close()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	go func() { runErr <- srv.Run(rctx) }()
	select {
	case <-srv.Ready():
	case err := <-runErr:
		return err
	}
	err = started(srv)
	stop()
	if rerr := <-runErr; err == nil {
		err = rerr
	}
	return err
}

// perfPairRespond runs the replica until ctx ends.
func perfPairRespond(ctx context.Context, j perfJob, ready func()) error {
	return perfPairNode(ctx, j, 1, false, func(*server.Server) error {
		ready()
		<-ctx.Done()
		return nil
	})
}

// perfPairPing runs the primary: once the replica follows, it times
// j.Count sequential Puts per size and, with j.TputDur, the Puts per
// second of perfPairClients concurrent writers.
func perfPairPing(ctx context.Context, j perfJob, emit func(perf.Row) error) error {
	return perfPairNode(ctx, j, 2, true, func(srv *server.Server) error {
		put := func(ctx context.Context, key string, v []byte) error {
			_, err := srv.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: v})
			return err
		}
		// Synchronous: the replica follows and has acknowledged a write.
		deadline := time.Now().Add(60 * time.Second)
		for srv.Role() != repl.RolePrimary || put(ctx, "perf/warm", nil) != nil {
			if time.Now().After(deadline) {
				return fmt.Errorf("perf: the pair never formed (role %s)", srv.Role())
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
		lag := srv.Config().Metrics.LagSeconds
		for _, sz := range j.Sizes {
			v := make([]byte, sz)
			d := make([]time.Duration, 0, j.Count)
			sum0, n0 := histSum(lag)
			for i := range j.Count {
				t := time.Now()
				if err := put(ctx, fmt.Sprintf("perf/%d", i%64), v); err != nil {
					return fmt.Errorf("perf: put at size %d: %w", sz, err)
				}
				d = append(d, time.Since(t))
			}
			if srv.Role() != repl.RolePrimary {
				return fmt.Errorf("perf: the primary became %s during the run (a Put acknowledged alone is no round trip)", srv.Role())
			}
			row := perf.Row{Size: sz, RTT: perf.Summarise(d)}
			if sum, n := histSum(lag); n > n0 {
				row.AckMean = time.Duration((sum - sum0) / float64(n-n0) * 1e9)
			}
			if j.TputDur > 0 {
				tp, err := perfPairThroughput(ctx, put, v, j.TputDur)
				if err != nil {
					return fmt.Errorf("perf: pair throughput at size %d: %w", sz, err)
				}
				row.Tput = tp
			}
			if err := emit(row); err != nil {
				return err
			}
		}
		return nil
	})
}

// perfPairThroughput runs perfPairClients writers for dur and returns the
// acknowledged Puts per second.
func perfPairThroughput(ctx context.Context, put func(context.Context, string, []byte) error, v []byte, dur time.Duration) (perf.Tput, error) {
	tctx, cancel := context.WithTimeout(ctx, dur)
	defer cancel()
	var done atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, perfPairClients)
	start := time.Now()
	for c := range perfPairClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; tctx.Err() == nil; i++ {
				// The write in flight when the phase ends may be cut
				// off; it is not counted.
				err := put(tctx, fmt.Sprintf("perf/c%d/%d", c, i%64), v)
				if err != nil {
					if tctx.Err() == nil {
						errc <- err
						cancel()
					}
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	select {
	case err := <-errc:
		return perf.Tput{}, err
	default:
	}
	if err := ctx.Err(); err != nil {
		return perf.Tput{}, err
	}
	n := done.Load()
	if n == 0 {
		return perf.Tput{}, errors.New("no write acknowledged")
	}
	rate := float64(n) / el
	return perf.Tput{Count: int(n), Rate: rate, MBps: rate * float64(len(v)) / 1e6}, nil
}

// histSum is h's sum and count of observations so far.
func histSum(h prometheus.Histogram) (float64, uint64) {
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		return 0, 0
	}
	return m.GetHistogram().GetSampleSum(), m.GetHistogram().GetSampleCount()
}
