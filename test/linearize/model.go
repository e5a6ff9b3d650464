package linearize

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// OpKind is the kind of one recorded operation.
type OpKind uint8

// The operations the model knows. opInit is internal: it installs the initial
// state (see InitOperation).
const (
	OpGet OpKind = iota + 1
	OpPut
	OpDelete
	OpCAS
	// OpRange is a linearizable range over every key with the prefix Key.
	OpRange
	// OpPutLease is Put with the key attached to Lease.
	OpPutLease
	// OpRevoke revokes Lease: every key attached to it is deleted, all in
	// one revision (none: the revision stays).
	OpRevoke
	opInit
)

func (k OpKind) String() string {
	switch k {
	case OpGet:
		return "get"
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	case OpCAS:
		return "cas"
	case OpRange:
		return "range"
	case OpPutLease:
		return "put-lease"
	case OpRevoke:
		return "revoke"
	case opInit:
		return "init"
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// Input is what a client asked for.
type Input struct {
	Kind  OpKind
	Key   string
	Value string // Put, CAS: the value written
	// ModRev is CAS's expected mod_revision of Key; 0 means "Key is absent"
	// (etcd's Compare(ModRevision(key), "=", 0)).
	ModRev int64
	// Lease is OpPutLease's and OpRevoke's lease ID.
	Lease int64

	init *State // opInit only
}

// Output is what the client got back. For an operation whose outcome is
// unknown only Unknown is set.
type Output struct {
	// Unknown: the operation may or may not have taken effect (timeout,
	// broken connection, "request timed out", ...).
	Unknown bool
	// Rev is the response header revision.
	Rev int64
	// Found, KV: Get, and CAS when the compare failed (the Else branch reads
	// the key). KV is meaningful only when Found.
	Found bool
	KV    KV
	// Deleted is Delete's count of deleted keys (0 or 1).
	Deleted int64
	// Succeeded is CAS's Txn.Succeeded: the compare held and the put ran.
	Succeeded bool
	// KVs are OpRange's keys, in key order (Keys names them).
	KVs  []KV
	Keys []string
}

// KV is one key's value and metadata as etcd reports them.
type KV struct {
	Value     string
	CreateRev int64
	ModRev    int64
	Version   int64
	Lease     int64 // 0: none
}

// State is the model's state: the store revision and the keys. A State is
// immutable once built; steps return new States.
type State struct {
	Rev  int64
	kvs  map[string]KV
	hash uint64 // XOR of hashKV over the keys, and hashRev(Rev)
}

// hashSeed separates revision hashes from key hashes.
const hashSeed = 0x6479616479616479

// NewState builds a State at revision rev holding kvs (copied).
func NewState(rev int64, kvs map[string]KV) *State {
	s := &State{Rev: rev, kvs: make(map[string]KV, len(kvs))}
	s.hash = hashRev(rev)
	for k, v := range kvs {
		s.kvs[k] = v
		s.hash ^= hashKV(k, v)
	}
	return s
}

// EmptyState is a fresh etcd store: no keys, revision 1.
func EmptyState() *State { return NewState(1, nil) }

// Get returns key's KV and whether it exists.
func (s *State) Get(key string) (KV, bool) {
	kv, ok := s.kvs[key]
	return kv, ok
}

// Len is the number of keys.
func (s *State) Len() int { return len(s.kvs) }

func (s *State) String() string {
	keys := make([]string, 0, len(s.kvs))
	for k := range s.kvs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "rev %d {", s.Rev)
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		kv := s.kvs[k]
		fmt.Fprintf(&b, "%s=%q@%d", k, kv.Value, kv.ModRev)
	}
	b.WriteString("}")
	return b.String()
}

func (s *State) equal(o *State) bool {
	if s == o {
		return true
	}
	if s.Rev != o.Rev || s.hash != o.hash || len(s.kvs) != len(o.kvs) {
		return false
	}
	for k, v := range s.kvs {
		if ov, ok := o.kvs[k]; !ok || ov != v {
			return false
		}
	}
	return true
}

// put returns the state after a revision-bumping put of key=value attached
// to lease (0: none; a put detaches the key from an earlier lease).
func (s *State) put(key, value string, lease int64) *State {
	rev := s.Rev + 1
	old, existed := s.kvs[key]
	kv := KV{Value: value, CreateRev: rev, ModRev: rev, Version: 1, Lease: lease}
	if existed {
		kv.CreateRev = old.CreateRev
		kv.Version = old.Version + 1
	}
	n := &State{Rev: rev, kvs: make(map[string]KV, len(s.kvs)+1)}
	for k, v := range s.kvs {
		n.kvs[k] = v
	}
	n.kvs[key] = kv
	n.hash = s.hash ^ hashRev(s.Rev) ^ hashRev(rev) ^ hashKV(key, kv)
	if existed {
		n.hash ^= hashKV(key, old)
	}
	return n
}

// del returns the state after deleting an existing key.
func (s *State) del(key string) *State {
	old := s.kvs[key]
	rev := s.Rev + 1
	n := &State{Rev: rev, kvs: make(map[string]KV, len(s.kvs))}
	for k, v := range s.kvs {
		if k != key {
			n.kvs[k] = v
		}
	}
	n.hash = s.hash ^ hashRev(s.Rev) ^ hashRev(rev) ^ hashKV(key, old)
	return n
}

// revoke returns the state after revoking lease: its keys are deleted in
// one revision; with no keys nothing changes.
func (s *State) revoke(lease int64) *State {
	n := &State{Rev: s.Rev, kvs: make(map[string]KV, len(s.kvs)), hash: s.hash}
	for k, v := range s.kvs {
		if v.Lease == lease {
			n.hash ^= hashKV(k, v)
			continue
		}
		n.kvs[k] = v
	}
	if len(n.kvs) < len(s.kvs) {
		n.Rev = s.Rev + 1
		n.hash ^= hashRev(s.Rev) ^ hashRev(n.Rev)
	}
	return n
}

// matchRange reports whether a range over prefix at s returned out.
func (s *State) matchRange(prefix string, out Output) bool {
	var keys []string
	for k := range s.kvs {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	if len(keys) != len(out.Keys) || len(out.Keys) != len(out.KVs) {
		return false
	}
	sort.Strings(keys)
	for i, k := range keys {
		if out.Keys[i] != k || out.KVs[i] != s.kvs[k] {
			return false
		}
	}
	return true
}

// hashRev and hashKV are deterministic (FNV-1a and splitmix64 finalizer);
// they only need to spread states over porcupine's cache buckets.
func hashRev(rev int64) uint64 { return mix64(uint64(rev) ^ hashSeed) }

func hashKV(key string, kv KV) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * 1099511628211
	}
	h = (h ^ 0xff) * 1099511628211
	for i := 0; i < len(kv.Value); i++ {
		h = (h ^ uint64(kv.Value[i])) * 1099511628211
	}
	h = mix64(h ^ uint64(kv.CreateRev))
	h = mix64(h ^ uint64(kv.ModRev))
	h = mix64(h ^ uint64(kv.Lease))
	return mix64(h ^ uint64(kv.Version))
}

func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// matchRead reports whether a read of key at s returned out.
func (s *State) matchRead(key string, out Output) bool {
	kv, ok := s.kvs[key]
	if ok != out.Found {
		return false
	}
	return !ok || kv == out.KV
}

// step is the sequential specification. It never mutates s.
func step(s *State, in Input, out Output) (bool, *State) {
	switch in.Kind {
	case opInit:
		return true, in.init
	case OpGet:
		if out.Unknown {
			return true, s
		}
		return out.Rev == s.Rev && s.matchRead(in.Key, out), s
	case OpPut, OpPutLease:
		n := s.put(in.Key, in.Value, in.Lease)
		return out.Unknown || out.Rev == n.Rev, n
	case OpRange:
		if out.Unknown {
			return true, s
		}
		return out.Rev == s.Rev && s.matchRange(in.Key, out), s
	case OpRevoke:
		n := s.revoke(in.Lease)
		return out.Unknown || out.Rev == n.Rev, n
	case OpDelete:
		if _, ok := s.kvs[in.Key]; !ok {
			// Deleting nothing changes nothing and does not bump the revision.
			return out.Unknown || (out.Deleted == 0 && out.Rev == s.Rev), s
		}
		n := s.del(in.Key)
		return out.Unknown || (out.Deleted == 1 && out.Rev == n.Rev), n
	case OpCAS:
		var cur int64
		if kv, ok := s.kvs[in.Key]; ok {
			cur = kv.ModRev
		}
		if cur == in.ModRev {
			n := s.put(in.Key, in.Value, 0)
			return out.Unknown || (out.Succeeded && out.Rev == n.Rev), n
		}
		if out.Unknown {
			return true, s
		}
		return !out.Succeeded && out.Rev == s.Rev && s.matchRead(in.Key, out), s
	}
	return false, s
}

// Model returns the porcupine model of an etcd key space. Its initial state
// is EmptyState(); a history that starts elsewhere begins with
// InitOperation (Recorder.Operations adds it).
//
// There is no Partition function on purpose: header revisions are global,
// so keys are not independent.
func Model() porcupine.Model {
	return porcupine.Model{
		Init: func() interface{} { return EmptyState() },
		Step: func(state, input, output interface{}) (bool, interface{}) {
			ok, n := step(state.(*State), input.(Input), output.(Output))
			return ok, n
		},
		Equal: func(a, b interface{}) bool { return a.(*State).equal(b.(*State)) },
		Hash:  func(state interface{}) uint64 { return state.(*State).hash },
		DescribeOperation: func(input, output interface{}) string {
			return Describe(input.(Input), output.(Output))
		},
		DescribeState: func(state interface{}) string { return state.(*State).String() },
	}
}

// InitOperation is the pseudo-operation that installs s as the state every
// later operation starts from. Its interval precedes every timestamp a
// Recorder hands out (those are >= 0), so it is always linearized first.
func InitOperation(s *State) porcupine.Operation {
	return porcupine.Operation{
		ClientId: 0,
		Input:    Input{Kind: opInit, init: s},
		Call:     math.MinInt64 + 1,
		Output:   Output{Rev: s.Rev},
		Return:   math.MinInt64 + 2,
	}
}

// Describe renders one operation for messages and the visualization.
func Describe(in Input, out Output) string {
	var call string
	switch in.Kind {
	case OpGet:
		call = fmt.Sprintf("get(%s)", in.Key)
	case OpPut:
		call = fmt.Sprintf("put(%s, %q)", in.Key, in.Value)
	case OpDelete:
		call = fmt.Sprintf("delete(%s)", in.Key)
	case OpCAS:
		call = fmt.Sprintf("cas(%s, modrev==%d, %q)", in.Key, in.ModRev, in.Value)
	case OpRange:
		call = fmt.Sprintf("range(%s*)", in.Key)
	case OpPutLease:
		call = fmt.Sprintf("put(%s, %q, lease %x)", in.Key, in.Value, in.Lease)
	case OpRevoke:
		call = fmt.Sprintf("revoke(%x)", in.Lease)
	case opInit:
		return "init " + in.init.String()
	default:
		call = in.Kind.String()
	}
	if out.Unknown {
		return call + " -> unknown"
	}
	read := func() string {
		if !out.Found {
			return "absent"
		}
		return fmt.Sprintf("%q mod=%d create=%d ver=%d", out.KV.Value, out.KV.ModRev, out.KV.CreateRev, out.KV.Version)
	}
	switch in.Kind {
	case OpGet:
		return fmt.Sprintf("%s -> %s, rev %d", call, read(), out.Rev)
	case OpRange:
		parts := make([]string, len(out.Keys))
		for i, k := range out.Keys {
			if i < len(out.KVs) {
				parts[i] = fmt.Sprintf("%s=%q@%d", k, out.KVs[i].Value, out.KVs[i].ModRev)
			}
		}
		return fmt.Sprintf("%s -> [%s], rev %d", call, strings.Join(parts, " "), out.Rev)
	case OpDelete:
		return fmt.Sprintf("%s -> deleted %d, rev %d", call, out.Deleted, out.Rev)
	case OpCAS:
		if out.Succeeded {
			return fmt.Sprintf("%s -> ok, rev %d", call, out.Rev)
		}
		return fmt.Sprintf("%s -> failed, %s, rev %d", call, read(), out.Rev)
	}
	return fmt.Sprintf("%s -> rev %d", call, out.Rev)
}
