package testutil

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestProcCPU: the CPU time read from /proc/<pid>/stat for this process
// matches what getrusage reports just before and just after it, after
// spending enough CPU that a unit error would show. Not to the tick: the
// kernel splits the precise run time into the user and system ticks that
// /proc shows by sampling, so a tenth either way is allowed.
func TestProcCPU(t *testing.T) {
	self := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := self()
	x := uint64(1)
	for self()-start < 300*time.Millisecond {
		for i := 0; i < 1_000_000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	before := self()
	got, err := procCPU(os.Getpid())
	after := self()
	if err != nil {
		t.Fatal(err)
	}
	if got < before*9/10 || got > after*11/10 {
		t.Fatalf("CPU time %v from /proc, want getrusage's %v..%v within a tenth (x=%d)", got, before, after, x)
	}
	if _, err := procCPU(-1); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}
