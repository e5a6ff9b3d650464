package linearize

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// envKeepLogs names a directory to keep failure visualizations in (shared
// with test/testutil, where "1" means "log even on success").
const envKeepLogs = "DYAD_KEEP_LOGS"

// Check verifies that ops (normally Recorder.Operations()) is linearizable
// under Model, giving the checker at most timeout (0: no limit). Both an
// Illegal result and a timeout (porcupine's Unknown) fail t: a check that
// cannot finish proves nothing, so the history must be made smaller or
// less concurrent instead. On failure the HTML visualization is written to
// a file whose path is in the failure message, with a textual explanation of
// where the longest linearization got stuck. Check reports whether the
// history passed.
func Check(t testing.TB, ops []porcupine.Operation, timeout time.Duration) bool {
	t.Helper()
	model := Model()
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	took := time.Since(start)
	if res == porcupine.Ok {
		t.Logf("linearize: %d operations (%s) are linearizable; checked in %v", len(ops), summarize(ops), took.Round(time.Millisecond))
		return true
	}
	viz := "(not written)"
	if p, err := writeVisualization(t, model, info); err != nil {
		viz = fmt.Sprintf("(writing it failed: %v)", err)
	} else {
		viz = p
	}
	switch res {
	case porcupine.Illegal:
		t.Errorf("linearize: history of %d operations (%s) is NOT linearizable\n%s\nvisualization: %s",
			len(ops), summarize(ops), explain(ops, info), viz)
	default:
		t.Errorf("linearize: the check of %d operations (%s) did not finish within %v; an unfinished check is a failure: "+
			"record fewer operations, fewer clients or fewer unknown outcomes\nvisualization (partial): %s",
			len(ops), summarize(ops), timeout, viz)
	}
	return false
}

// summarize counts operations by kind and outcome.
func summarize(ops []porcupine.Operation) string {
	counts := map[string]int{}
	for _, op := range ops {
		in := op.Input.(Input)
		if in.Kind == opInit {
			continue
		}
		k := in.Kind.String()
		if op.Output.(Output).Unknown {
			k += "?"
		}
		counts[k]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, counts[k])
	}
	return strings.Join(parts, ", ") + "; ? = outcome unknown"
}

// explain replays the longest partial linearization porcupine found and
// lists the operations that could have come next, none of which the model
// accepts in that state.
func explain(ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	parts := info.PartialLinearizations()
	if len(parts) == 0 || len(parts[0]) == 0 {
		return "(no partial linearization available)"
	}
	longest := parts[0][0]
	for _, l := range parts[0][1:] {
		if len(l) > len(longest) {
			longest = l
		}
	}
	state := EmptyState()
	done := make(map[int]bool, len(longest))
	for _, id := range longest {
		_, state = step(state, ops[id].Input.(Input), ops[id].Output.(Output))
		done[id] = true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "longest linearization found covers %d of %d operations; it ends with:\n", len(longest), len(ops))
	from := len(longest) - 5
	if from < 0 {
		from = 0
	}
	for _, id := range longest[from:] {
		fmt.Fprintf(&b, "    %s\n", describeOp(ops[id]))
	}
	fmt.Fprintf(&b, "  state then: %s\n", state)
	// Candidates: not yet linearized and called before the earliest return
	// among the not-linearized operations (real-time order forbids others).
	minRet := int64(1<<63 - 1)
	for i, op := range ops {
		if !done[i] && op.Return < minRet {
			minRet = op.Return
		}
	}
	var cands []int
	for i, op := range ops {
		if !done[i] && op.Call <= minRet {
			cands = append(cands, i)
		}
	}
	sort.Slice(cands, func(a, b int) bool { return ops[cands[a]].Call < ops[cands[b]].Call })
	fmt.Fprintf(&b, "  none of the %d operations that could come next is legal in that state:\n", len(cands))
	for n, id := range cands {
		if n == 10 {
			fmt.Fprintf(&b, "    ... %d more\n", len(cands)-n)
			break
		}
		fmt.Fprintf(&b, "    %s\n", describeOp(ops[id]))
	}
	return strings.TrimRight(b.String(), "\n")
}

func describeOp(op porcupine.Operation) string {
	in := op.Input.(Input)
	if in.Kind == opInit {
		return Describe(in, op.Output.(Output))
	}
	ret := fmt.Sprintf("%.6fs", float64(op.Return)/1e9)
	if op.Output.(Output).Unknown {
		ret = "end"
	}
	return fmt.Sprintf("[client %d, %.6fs..%s] %s", op.ClientId, float64(op.Call)/1e9, ret, Describe(in, op.Output.(Output)))
}

// writeVisualization writes porcupine's HTML into $DYAD_KEEP_LOGS when that
// names a directory, else into a new directory under $TMPDIR. Neither is
// removed when the test ends: the file is for a human to open afterwards.
func writeVisualization(t testing.TB, model porcupine.Model, info porcupine.LinearizationInfo) (string, error) {
	dir := os.Getenv(envKeepLogs)
	if st, err := os.Stat(dir); dir == "" || err != nil || !st.IsDir() {
		d, err := os.MkdirTemp("", "dyad-linearize-")
		if err != nil {
			return "", err
		}
		dir = d
	}
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '_'
	}, t.Name()) + "-" + time.Now().Format("20060102-150405.000") + ".html"
	p := filepath.Join(dir, name)
	return p, porcupine.VisualizePath(model, info, p)
}
