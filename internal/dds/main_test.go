package dds

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Child-process modes (re-exec of the test binary, possibly inside
// `ip netns exec`). The child reads its job from the environment and
// writes one JSON line to stdout.
const (
	envHelper = "DYAD_DDS_HELPER" // "respond" or "ping"
	envJob    = "DYAD_DDS_JOB"    // JSON helperJob
)

type helperJob struct {
	Cfg     Config
	Opt     PerfOptions
	Sizes   []int
	Count   int
	TputDur time.Duration // >0: also run Throughput with TputSize
	TputSz  int
}

type helperResult struct {
	Err   string
	Stats []Stats
	Tput  *Stats
}

func TestMain(m *testing.M) {
	switch os.Getenv(envHelper) {
	case "":
		os.Exit(m.Run())
	case "respond":
		os.Exit(helperRespond())
	case "ping":
		os.Exit(helperPing())
	}
	fmt.Fprintln(os.Stderr, "unknown helper mode")
	os.Exit(2)
}

func helperJobFromEnv() (helperJob, error) {
	var j helperJob
	err := json.Unmarshal([]byte(os.Getenv(envJob)), &j)
	return j, err
}

func helperRespond() int {
	j, err := helperJobFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Also stop when the parent goes away (stdin is a pipe from it).
	go func() {
		var b [1]byte
		os.Stdin.Read(b[:])
		stop()
	}()
	p, err := NewParticipant(j.Cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer p.Close()
	fmt.Println("ready")
	if err := Respond(ctx, p, j.Opt); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func helperPing() int {
	j, err := helperJobFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res := helperResult{}
	func() {
		p, err := NewParticipant(j.Cfg)
		if err != nil {
			res.Err = err.Error()
			return
		}
		defer p.Close()
		for _, sz := range j.Sizes {
			st, err := PingPong(ctx, p, j.Opt, sz, j.Count)
			if err != nil {
				res.Err = fmt.Sprintf("size %d: %v", sz, err)
				return
			}
			res.Stats = append(res.Stats, st)
		}
		if j.TputDur > 0 {
			st, err := Throughput(ctx, p, j.Opt, j.TputSz, j.TputDur)
			if err != nil {
				res.Err = fmt.Sprintf("throughput: %v", err)
				return
			}
			res.Tput = &st
		}
	}()
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	if res.Err != "" {
		return 1
	}
	return 0
}

var domainSeq atomic.Uint32

// testDomain returns a domain ID unlikely to be used by another test
// process running at the same time (Cyclone's ports depend on the domain).
func testDomain(t testing.TB) uint32 {
	base := uint32(os.Getpid()) + uint32(rand.IntN(1000))
	return 100 + (base+domainSeq.Add(1)*7)%130
}
