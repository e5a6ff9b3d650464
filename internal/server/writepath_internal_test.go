package server

import (
	"testing"
)

// openIdle opens a single node in a fresh data dir without running it:
// enough for the checks a write makes on its caller's goroutine.
func openIdle(t *testing.T, quota int64) *Server {
	t.Helper()
	cfg := Defaults()
	cfg.DataDir = t.TempDir()
	cfg.QuotaBackendBytes = quota
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The quota check runs on every Put and Txn with a put, on the client's
// goroutine: it must neither open a read transaction of the data file nor
// allocate, but for the one call in noteSizeEvery that notes the size
// again (AllocsPerRun's warm-up call may be that one).
func TestQuotaCheckAllocatesNothing(t *testing.T) {
	s := openIdle(t, 1<<30)
	if s.dbSize.Load() <= 0 {
		t.Fatalf("noted size %d after opening: want the data file's size", s.dbSize.Load())
	}
	if allocs := testing.AllocsPerRun(200, func() {
		if err := s.checkSpace(300); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("checkSpace allocates %.1f objects per call, want 0", allocs)
	}
}
