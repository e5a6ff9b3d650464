package differential

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/golang/protobuf/proto" //nolint:staticcheck // the etcd API types are gogo-generated v1 messages
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/status"

	"github.com/dyad-db/dyad/test/testutil"
)

// Environment variables choosing the two servers compared.
const (
	EnvReference = "DYAD_DIFF_REFERENCE"
	EnvTarget    = "DYAD_DIFF_TARGET"
	// EnvDump names a directory that receives, per scenario, the rendered
	// transcript of both servers (for reviewing what a scenario exercises).
	EnvDump = "DYAD_DIFF_DUMP"
)

func init() {
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, os.Stderr))
}

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

func referenceName() string {
	if v := strings.TrimSpace(os.Getenv(EnvReference)); v != "" {
		return v
	}
	return "etcd-3.5"
}

func targetName() string { return testutil.TargetFromEnv(EnvTarget) }

// side is one of the two servers of a scenario, with raw gRPC clients.
type side struct {
	label string
	srv   *testutil.Server
	kv    pb.KVClient
	lease pb.LeaseClient
	watch pb.WatchClient
	maint pb.MaintenanceClient

	// leaseIDs maps a scenario's name for a server-assigned lease to the ID
	// this server assigned; alias maps that ID to the alias it is shown as.
	leaseIDs map[string]int64
	alias    map[int64]int64

	// versionSkew is set when one server fills fields the other leaves
	// empty: HashKVResponse's hash_revision, filled by etcd 3.6 and by dyad,
	// left empty by 3.5.35 (whose API has the field since 3.5.13). Such
	// fields are cleared on both sides; test/etcdctl checks dyad's value.
	versionSkew bool
}

// fillsHashRevision reports whether the server fills HashKVResponse's
// hash_revision: dyad does, and etcd from 3.6 on.
func (s *side) fillsHashRevision(ctx context.Context, t *testing.T) bool {
	t.Helper()
	if s.srv.Kind() == testutil.KindDyad {
		return true
	}
	st, err := s.maint.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		t.Fatalf("%s: status: %v", s.label, err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(st.Version, "%d.%d", &major, &minor); err != nil {
		t.Fatalf("%s: version %q: %v", s.label, st.Version, err)
	}
	return major > 3 || major == 3 && minor >= 6
}

// aliasBase is the first alias given to server-assigned lease IDs. It is
// far from any ID the scenarios choose themselves.
const aliasBase = 0x7a7a_0000_0000

func newSide(t *testing.T, target string) *side {
	t.Helper()
	srv := testutil.Start(t, target)
	conn, err := grpc.NewClient(srv.HostPort(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatalf("dial %s: %v", srv.HostPort(), err)
	}
	t.Cleanup(func() { conn.Close() })
	return &side{
		label:    target,
		srv:      srv,
		kv:       pb.NewKVClient(conn),
		lease:    pb.NewLeaseClient(conn),
		watch:    pb.NewWatchClient(conn),
		maint:    pb.NewMaintenanceClient(conn),
		leaseIDs: map[string]int64{},
		alias:    map[int64]int64{},
	}
}

// learnLease records a server-assigned lease ID under a scenario name.
func (s *side) learnLease(name string, id int64) {
	s.leaseIDs[name] = id
	if _, ok := s.alias[id]; !ok {
		s.alias[id] = aliasBase + int64(len(s.alias)) + 1
	}
}

// leaseID resolves a lease reference: a scenario name of a server-assigned
// lease, or a literal ID.
func (s *side) leaseID(ref leaseRef) int64 {
	if ref.name != "" {
		return s.leaseIDs[ref.name]
	}
	return ref.id
}

type leaseRef struct {
	id   int64
	name string
}

func fixedLease(id int64) leaseRef    { return leaseRef{id: id} }
func namedLease(name string) leaseRef { return leaseRef{name: name} }
func (r leaseRef) String() string {
	if r.name != "" {
		return "lease<" + r.name + ">"
	}
	return fmt.Sprintf("lease %#x", r.id)
}

// step is one request (or short exchange) sent to both servers. do returns
// the normalised rendering of what the server answered.
type step struct {
	name string
	do   func(ctx context.Context, s *side) string
}

type scenario struct {
	name  string
	steps []step
}

// runScenarios runs each scenario as a parallel subtest on its own pair of
// fresh servers.
func runScenarios(t *testing.T, scs []scenario) {
	t.Helper()
	t.Parallel()
	for _, sc := range scs {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			runScenario(t, sc)
		})
	}
}

func runScenario(t *testing.T, sc scenario) {
	ref := newSide(t, referenceName())
	tgt := newSide(t, targetName())
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	if ref.fillsHashRevision(ctx, t) != tgt.fillsHashRevision(ctx, t) {
		ref.versionSkew, tgt.versionSkew = true, true
	}
	var dump strings.Builder
	defer func() {
		if dir := os.Getenv(EnvDump); dir != "" {
			name := strings.ReplaceAll(t.Name(), "/", "_") + ".txt"
			if err := os.WriteFile(filepath.Join(dir, name), []byte(dump.String()), 0o644); err != nil {
				t.Logf("dump: %v", err)
			}
		}
	}()
	bad := 0
	for i, st := range sc.steps {
		a := st.do(ctx, ref)
		b := st.do(ctx, tgt)
		fmt.Fprintf(&dump, "=== step %d %q\n--- %s\n%s", i, st.name, ref.label, a)
		if a != b {
			fmt.Fprintf(&dump, "--- %s DIFFERS:\n%s", tgt.label, lineDiff(a, b))
		}
		if a == b {
			continue
		}
		bad++
		t.Errorf("step %d %q: %s and %s differ (-%s +%s):\n%s",
			i, st.name, ref.label, tgt.label, ref.label, tgt.label, lineDiff(a, b))
	}
	if bad > 1 {
		t.Logf("%d of %d steps differ (later ones may only follow from the first)", bad, len(sc.steps))
	}
}

// render normalises a response (or error) into the text that is compared.
func render(s *side, m proto.Message, err error) string {
	if err != nil {
		return renderErr(err)
	}
	if m == nil || reflect.ValueOf(m).IsNil() {
		return "<nil response>\n"
	}
	normalise(s, reflect.ValueOf(m))
	return proto.MarshalTextString(m)
}

func renderErr(err error) string {
	st, ok := status.FromError(err)
	if !ok {
		return "non-gRPC error: " + err.Error() + "\n"
	}
	return fmt.Sprintf("error code=%s desc=%q\n", st.Code(), st.Message())
}

var (
	headerType = reflect.TypeOf(pb.ResponseHeader{})
	kvType     = reflect.TypeOf(mvccpb.KeyValue{})
)

// normalise clears what legitimately differs between two clusters: the
// identity fields of response headers, and server-assigned lease IDs (in
// KeyValue.lease and in the ID field of lease responses).
func normalise(s *side, v reflect.Value) {
	switch v.Kind() {
	case reflect.Ptr, reflect.Interface:
		if !v.IsNil() {
			normalise(s, v.Elem())
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		for i := 0; i < v.Len(); i++ {
			normalise(s, v.Index(i))
		}
	case reflect.Struct:
		if v.Type() == headerType {
			// Values differ between clusters; whether they are set does
			// not (etcd fills them only in top-level headers).
			h := v.Addr().Interface().(*pb.ResponseHeader)
			h.ClusterId, h.MemberId, h.RaftTerm = isSet(h.ClusterId), isSet(h.MemberId), isSet(h.RaftTerm)
			return
		}
		for i := 0; i < v.NumField(); i++ {
			f := v.Field(i)
			name := v.Type().Field(i).Name
			if !f.CanSet() || strings.HasPrefix(name, "XXX_") {
				continue
			}
			if f.Kind() == reflect.Int64 && (name == "ID" || (name == "Lease" && v.Type() == kvType)) {
				if a, ok := s.alias[f.Int()]; ok {
					f.SetInt(a)
				}
				continue
			}
			normalise(s, f)
		}
	}
}

func isSet(v uint64) uint64 {
	if v != 0 {
		return 1
	}
	return 0
}

// approxTTL maps a remaining TTL read from a live lease to the granted TTL
// when it lies within 3 s below it: how far a countdown has run depends on
// wall-clock time, not on the implementation.
func approxTTL(granted, got int64) int64 {
	if got > 0 && got <= granted && got >= granted-3 {
		return granted
	}
	return got
}

// lineDiff renders a line diff of a and b (LCS based; the texts are small):
// changed lines with 3 lines of context, at most diffMaxLines lines.
func lineDiff(a, b string) string {
	x := strings.Split(strings.TrimRight(a, "\n"), "\n")
	y := strings.Split(strings.TrimRight(b, "\n"), "\n")
	n, m := len(x), len(y)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type line struct {
		op   byte
		text string
	}
	var lines []line
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && x[i] == y[j]:
			lines = append(lines, line{' ', x[i]})
			i++
			j++
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			lines = append(lines, line{'-', x[i]})
			i++
		default:
			lines = append(lines, line{'+', y[j]})
			j++
		}
	}
	const context, diffMaxLines = 3, 80
	keep := make([]bool, len(lines))
	for k, l := range lines {
		if l.op != ' ' {
			for c := max(0, k-context); c <= min(len(lines)-1, k+context); c++ {
				keep[c] = true
			}
		}
	}
	var out strings.Builder
	written, skipped := 0, false
	for k, l := range lines {
		if !keep[k] {
			skipped = true
			continue
		}
		if skipped {
			out.WriteString("  ...\n")
			skipped = false
		}
		if written == diffMaxLines {
			out.WriteString("  ... (diff truncated; set " + EnvDump + " for full transcripts)\n")
			break
		}
		out.WriteString("  " + string(l.op) + l.text + "\n")
		written++
	}
	return out.String()
}

// ---- request helpers -------------------------------------------------------

func prefixEnd(p string) []byte {
	end := []byte(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

func label(name string, m fmt.Stringer) string {
	if name != "" {
		return name
	}
	return m.String()
}

func rangeStep(name string, r *pb.RangeRequest) step {
	return step{label(name, r), func(ctx context.Context, s *side) string {
		resp, err := s.kv.Range(ctx, r)
		return render(s, resp, err)
	}}
}

func putStep(name string, r *pb.PutRequest) step {
	return step{label(name, r), func(ctx context.Context, s *side) string {
		resp, err := s.kv.Put(ctx, r)
		return render(s, resp, err)
	}}
}

// putLeaseStep puts with a lease resolved per server (named leases).
func putLeaseStep(key, val string, ref leaseRef) step {
	return step{fmt.Sprintf("put %q=%q with %v", key, val, ref), func(ctx context.Context, s *side) string {
		resp, err := s.kv.Put(ctx, &pb.PutRequest{Key: []byte(key), Value: []byte(val), Lease: s.leaseID(ref)})
		return render(s, resp, err)
	}}
}

func delStep(name string, r *pb.DeleteRangeRequest) step {
	return step{label(name, r), func(ctx context.Context, s *side) string {
		resp, err := s.kv.DeleteRange(ctx, r)
		return render(s, resp, err)
	}}
}

func txnStep(name string, r *pb.TxnRequest) step {
	return step{label(name, r), func(ctx context.Context, s *side) string {
		resp, err := s.kv.Txn(ctx, r)
		return render(s, resp, err)
	}}
}

func compactStep(rev int64, physical bool) step {
	r := &pb.CompactionRequest{Revision: rev, Physical: physical}
	return step{label("", r), func(ctx context.Context, s *side) string {
		resp, err := s.kv.Compact(ctx, r)
		return render(s, resp, err)
	}}
}

func hashKVStep(rev int64) step {
	r := &pb.HashKVRequest{Revision: rev}
	return step{fmt.Sprintf("HashKV revision=%d", rev), func(ctx context.Context, s *side) string {
		resp, err := s.maint.HashKV(ctx, r)
		if err == nil && s.versionSkew {
			resp.HashRevision = 0
		}
		return render(s, resp, err)
	}}
}

// seed puts the given key/value pairs in order, one revision each.
func seed(kvs ...string) []step {
	var out []step
	for i := 0; i+1 < len(kvs); i += 2 {
		out = append(out, putStep("", &pb.PutRequest{Key: []byte(kvs[i]), Value: []byte(kvs[i+1])}))
	}
	return out
}

func all() *pb.RangeRequest { return &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}} }

func getKey(k string) step { return rangeStep("", &pb.RangeRequest{Key: []byte(k)}) }

func getAll() step { return rangeStep("range all keys", all()) }

func steps(groups ...[]step) []step {
	var out []step
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// ---- lease helpers ---------------------------------------------------------

func grantStep(id, ttl int64) step {
	r := &pb.LeaseGrantRequest{ID: id, TTL: ttl}
	return step{label("", r), func(ctx context.Context, s *side) string {
		resp, err := s.lease.LeaseGrant(ctx, r)
		return render(s, resp, err)
	}}
}

// grantNamedStep grants a lease with a server-assigned ID, remembered as name.
func grantNamedStep(name string, ttl int64) step {
	return step{fmt.Sprintf("LeaseGrant (server-assigned ID, %q) TTL=%d", name, ttl), func(ctx context.Context, s *side) string {
		resp, err := s.lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: ttl})
		if err == nil {
			if resp.ID == 0 {
				return "server assigned lease ID 0\n"
			}
			s.learnLease(name, resp.ID)
		}
		return render(s, resp, err)
	}}
}

func revokeStep(ref leaseRef) step {
	return step{"LeaseRevoke " + ref.String(), func(ctx context.Context, s *side) string {
		resp, err := s.lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: s.leaseID(ref)})
		return render(s, resp, err)
	}}
}

// timeToLiveStep asks for a lease's TTL; granted is the TTL it was granted
// with (for approxTTL), 0 when not applicable.
func timeToLiveStep(ref leaseRef, keys bool, granted int64) step {
	return step{fmt.Sprintf("LeaseTimeToLive %v keys=%v", ref, keys), func(ctx context.Context, s *side) string {
		resp, err := s.lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: s.leaseID(ref), Keys: keys})
		if err == nil {
			resp.TTL = approxTTL(granted, resp.TTL)
			sort.Slice(resp.Keys, func(i, j int) bool { return string(resp.Keys[i]) < string(resp.Keys[j]) })
		}
		return render(s, resp, err)
	}}
}

func leasesStep() step {
	return step{"LeaseLeases", func(ctx context.Context, s *side) string {
		resp, err := s.lease.LeaseLeases(ctx, &pb.LeaseLeasesRequest{})
		if err == nil {
			normalise(s, reflect.ValueOf(resp))
			sort.Slice(resp.Leases, func(i, j int) bool { return resp.Leases[i].ID < resp.Leases[j].ID })
		}
		return render(s, resp, err)
	}}
}

// keepAliveStep sends one keep-alive on a fresh stream and renders the one
// response.
func keepAliveStep(ref leaseRef, granted int64) step {
	return step{"LeaseKeepAlive once " + ref.String(), func(ctx context.Context, s *side) string {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		stream, err := s.lease.LeaseKeepAlive(ctx)
		if err != nil {
			return renderErr(err)
		}
		if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: s.leaseID(ref)}); err != nil {
			return renderErr(err)
		}
		resp, err := stream.Recv()
		if err == nil {
			resp.TTL = approxTTL(granted, resp.TTL)
		}
		return render(s, resp, err)
	}}
}

// ---- watch helpers ---------------------------------------------------------

// watchSession is one watch stream used by a watch step. Everything the
// server sends is rendered into out, in order.
type watchSession struct {
	ctx    context.Context
	s      *side
	stream pb.Watch_WatchClient
	ch     chan recvd
	out    strings.Builder
}

type recvd struct {
	resp *pb.WatchResponse
	err  error
}

// watchStep opens a watch stream, runs script on it, then waits a short
// quiet period and records anything else the server sent.
func watchStep(name string, script func(w *watchSession)) step {
	return step{name, func(ctx context.Context, s *side) string {
		ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		stream, err := s.watch.Watch(ctx)
		if err != nil {
			return renderErr(err)
		}
		w := &watchSession{ctx: ctx, s: s, stream: stream, ch: make(chan recvd, 64)}
		go func() {
			for {
				resp, err := stream.Recv()
				select {
				case w.ch <- recvd{resp, err}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
		script(w)
		w.collect("after script (quiet period)", 200*time.Millisecond, func([]*pb.WatchResponse) bool { return false })
		return w.out.String()
	}}
}

func (w *watchSession) send(req *pb.WatchRequest) {
	fmt.Fprintf(&w.out, "> send %s\n", req.String())
	if err := w.stream.Send(req); err != nil {
		w.out.WriteString("send: " + renderErr(err))
	}
}

func (w *watchSession) create(c *pb.WatchCreateRequest) {
	w.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: c}})
}

// collect reads responses until done(responses read by this call) holds or
// the timeout passes, rendering each one.
func (w *watchSession) collect(what string, timeout time.Duration, done func([]*pb.WatchResponse) bool) {
	fmt.Fprintf(&w.out, "> wait: %s\n", what)
	var got []*pb.WatchResponse
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for !done(got) {
		select {
		case r := <-w.ch:
			if r.err != nil {
				w.out.WriteString("recv: " + renderErr(r.err))
				w.ch = nil // the stream is over
				return
			}
			got = append(got, r.resp)
			fmt.Fprintf(&w.out, "< response %d:\n%s", len(got), render(w.s, r.resp, nil))
		case <-timer.C:
			if !strings.HasSuffix(what, "(quiet period)") && !strings.HasSuffix(what, "(expecting nothing)") {
				fmt.Fprintf(&w.out, "! timed out after %v\n", timeout)
			}
			return
		}
	}
}

func (w *watchSession) expect(what string, done func([]*pb.WatchResponse) bool) {
	w.collect(what, 3*time.Second, done)
}

// expectNothing waits briefly for responses that should not come.
func (w *watchSession) expectNothing(what string) {
	w.collect(what+" (expecting nothing)", 300*time.Millisecond, func([]*pb.WatchResponse) bool { return false })
}

// note records the result of a unary call made while the watch runs.
func (w *watchSession) note(what, text string) {
	fmt.Fprintf(&w.out, "> %s\n%s", what, text)
}

func untilEvents(n int) func([]*pb.WatchResponse) bool {
	return func(rs []*pb.WatchResponse) bool {
		c := 0
		for _, r := range rs {
			c += len(r.Events)
		}
		return c >= n
	}
}

func untilResponses(n int) func([]*pb.WatchResponse) bool {
	return func(rs []*pb.WatchResponse) bool { return len(rs) >= n }
}

func untilCanceled(rs []*pb.WatchResponse) bool {
	for _, r := range rs {
		if r.Canceled {
			return true
		}
	}
	return false
}
