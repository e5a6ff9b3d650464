package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// fenceWaitDelay is how long runFence waits for the fence command's output
// pipes to close after killing it.
const fenceWaitDelay = 2 * time.Second

// runFence runs cmdline through /bin/sh and fails if it fails or if ctx
// ends first (--fence-timeout). The command runs in its own process group,
// and the whole group is killed when ctx ends: a fence script's children
// (curl, ipmitool) would otherwise outlive the shell, keep its output pipe
// open and so hold the fence result back past the timeout.
func runFence(ctx context.Context, cmdline string) error {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", cmdline)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = fenceWaitDelay
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		}
		return fmt.Errorf("fence command: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
