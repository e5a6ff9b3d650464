package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestFenceTimeoutFlag: --fence-timeout (or DYAD_FENCE_TIMEOUT) reaches the
// pair's replication config, defaults to 5 × --peer-lease, and must be
// greater than 0.
func TestFenceTimeoutFlag(t *testing.T) {
	pair := []string{"--name", "a", "--initial-cluster", "a=http://127.0.0.1:2380,b=http://127.0.0.2:2380",
		"--peer-lease", "400ms", "--fence-command", "true"}
	tests := []struct {
		name    string
		args    []string
		env     []string
		want    time.Duration
		wantErr string
	}{
		{name: "default", want: 5 * 400 * time.Millisecond},
		{name: "flag", args: []string{"--fence-timeout", "45s"}, want: 45 * time.Second},
		{name: "environment", env: []string{"DYAD_FENCE_TIMEOUT=1m"}, want: time.Minute},
		{name: "flag wins over environment", args: []string{"--fence-timeout", "20s"}, env: []string{"DYAD_FENCE_TIMEOUT=1m"}, want: 20 * time.Second},
		{name: "zero", args: []string{"--fence-timeout", "0s"}, wantErr: "--fence-timeout"},
		{name: "negative", args: []string{"--fence-timeout=-5s"}, wantErr: "--fence-timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fl, f := parsedServe(t, append(append([]string{}, pair...), tc.args...)...)
			if _, err := applyEnv(fl, tc.env); err != nil {
				t.Fatal(err)
			}
			p, err := f.cluster.plan(f.name)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.repl.Fence == nil {
				t.Fatal("no fence in the plan")
			}
			if p.repl.FenceTimeout != tc.want {
				t.Fatalf("fence timeout %v, want %v", p.repl.FenceTimeout, tc.want)
			}
		})
	}
}

// TestRunFenceKillsItsChildren: when the fence timeout ends a fence command,
// the processes it started die with it, and the run fails.
func TestRunFenceKillsItsChildren(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The background sleep stands for a curl or ipmitool still waiting on
	// a BMC; its output does not go to the fence's pipe, so only the kill
	// of the process group can end it.
	script := "sleep 300 >/dev/null 2>&1 & echo $! >" + pidFile + "; wait"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runFence(ctx, script) }()
	var pid int
	for pid == 0 {
		b, err := os.ReadFile(pidFile)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
				t.Fatal(err)
			}
		}
		if pid == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	cancel()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("runFence = %v, want a failure naming the cancelled context", err)
	}
	// The kill is sent before runFence returns; the child may take a
	// moment to be reaped by whoever inherited it.
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the fence command's child %d still runs after the fence was cut off", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name's closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
