package linearize

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/test/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

// TestSingleNodeHistory records 8 concurrent clients (on 2 connections) for
// about 3 s against one real server (DYAD_TEST_TARGET, default dyad) and
// checks the history. Other writes before the history are folded into the
// initial state with ReadState.
func TestSingleNodeHistory(t *testing.T) {
	srv := testutil.Start(t, testutil.TargetFromEnv(""))
	clients := []*clientv3.Client{srv.Client(t), srv.Client(t)}
	keys := DefaultKeys(4)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Something before the history, so that it does not start at revision 1.
	if _, err := clients[0].Put(ctx, keys[0], "before"); err != nil {
		t.Fatal(err)
	}
	if _, err := clients[0].Put(ctx, "/unrelated", "x"); err != nil {
		t.Fatal(err)
	}
	init, err := ReadState(ctx, clients[0], keys...)
	if err != nil {
		t.Fatal(err)
	}
	if init.Rev != 3 || init.Len() != 1 {
		t.Fatalf("initial state %s; want revision 3 and one key", init)
	}

	rec := NewRecorder(init)
	Workload{Clients: clients, Concurrency: 8, Keys: keys, Seed: 1}.Run(ctx, rec, 0, 3*time.Second)
	st := rec.Stats()
	t.Logf("recorded: %v", st)
	if st.Pending != 0 || st.Unknown != 0 || st.Failed != 0 {
		t.Fatalf("a healthy single node gave errors or left operations pending: %v", st)
	}
	if st.OK < 200 {
		t.Fatalf("only %d operations succeeded in 3 s; the history proves little", st.OK)
	}
	ops := rec.Operations()
	kinds := map[OpKind]int{}
	casOK, casFailed := 0, 0
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		kinds[in.Kind]++
		if in.Kind == OpCAS && !out.Unknown {
			if out.Succeeded {
				casOK++
			} else {
				casFailed++
			}
		}
	}
	if kinds[OpGet] == 0 || kinds[OpPut] == 0 || kinds[OpDelete] == 0 || casOK == 0 || casFailed == 0 {
		t.Fatalf("workload mix incomplete: %v, cas ok %d, cas failed %d", kinds, casOK, casFailed)
	}
	if !Check(t, ops, 2*time.Minute) {
		return
	}

	// The same real history with one acknowledged write removed, or one
	// read moved one revision back, must be rejected: the check is not
	// vacuous.
	mid := len(ops) / 2
	for i := mid; i < len(ops); i++ {
		if in := ops[i].Input.(Input); in.Kind == OpPut {
			lost := append(append([]porcupine.Operation{}, ops[:i]...), ops[i+1:]...)
			if porcupine.CheckOperationsTimeout(Model(), lost, time.Minute) != porcupine.Illegal {
				t.Errorf("history without the acknowledged %s passed", Describe(in, ops[i].Output.(Output)))
			}
			break
		}
	}
	// A read moved back one revision is stale only if the write that made
	// its revision had returned before the read was called.
	writeReturned := map[int64]int64{} // revision -> return time of the write that made it
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if !out.Unknown && (in.Kind == OpPut || (in.Kind == OpCAS && out.Succeeded) || (in.Kind == OpDelete && out.Deleted == 1)) {
			writeReturned[out.Rev] = op.Return
		}
	}
	mutated := false
	for i := mid; i < len(ops) && !mutated; i++ {
		in, out := ops[i].Input.(Input), ops[i].Output.(Output)
		if ret, ok := writeReturned[out.Rev]; !ok || in.Kind != OpGet || out.Unknown || ret >= ops[i].Call {
			continue
		}
		stale := append([]porcupine.Operation{}, ops...)
		out.Rev--
		stale[i].Output = out
		if porcupine.CheckOperationsTimeout(Model(), stale, time.Minute) != porcupine.Illegal {
			t.Errorf("history with the stale %s passed", Describe(in, out))
		}
		mutated = true
	}
	if !mutated {
		t.Error("no read found to make stale")
	}
}
