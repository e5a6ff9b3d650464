package lease

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/dyad-db/dyad/internal/storage"
)

var (
	// ErrNotFound: no such lease.
	ErrNotFound = errors.New("lease: requested lease not found")
	// ErrExists: a lease with that ID exists already.
	ErrExists = errors.New("lease: lease already exists")
	// ErrTTLTooLarge: the TTL is above MaxTTL.
	ErrTTLTooLarge = errors.New("lease: too large lease TTL")
)

// MaxTTL is etcd's largest lease TTL, in seconds.
const MaxTTL = 9000000000

// Lease is a snapshot of one lease.
type Lease struct {
	ID         int64
	TTL        int64 // granted TTL, seconds
	Remaining  time.Duration
	Keys       [][]byte
	expiry     time.Time
	keys       map[string]struct{}
	revokeSent bool
}

// Lessor holds every lease. Safe for concurrent use.
type Lessor struct {
	minTTL int64
	now    func() time.Time

	mu     sync.Mutex
	leases map[int64]*Lease
}

// New makes an empty lessor. minTTL (seconds) is the shortest TTL granted;
// shorter requests are raised to it, as etcd does.
func New(minTTL int64, now func() time.Time) *Lessor {
	if now == nil {
		now = time.Now
	}
	return &Lessor{minTTL: minTTL, now: now, leases: make(map[int64]*Lease)}
}

// Load reads every persisted lease and gives each its full TTL from now,
// replacing what the lessor held (keys are attached afterwards).
func (l *Lessor) Load(tx storage.ReadTx) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leases = make(map[int64]*Lease)
	now := l.now()
	return tx.Scan(storage.BucketLease, nil, nil, func(k, v []byte) (bool, error) {
		id, ttl, err := DecodeRecord(v)
		if err != nil {
			return false, fmt.Errorf("%w: lease %x: %v", storage.ErrCorrupt, k, err)
		}
		l.leases[id] = &Lease{ID: id, TTL: ttl, expiry: now.Add(time.Duration(ttl) * time.Second), keys: map[string]struct{}{}}
		return true, nil
	})
}

// CheckGrant validates a grant before it is proposed.
func (l *Lessor) CheckGrant(id, ttl int64) error {
	if ttl > MaxTTL {
		return ErrTTLTooLarge
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.leases[id]; ok {
		return ErrExists
	}
	return nil
}

// Exists tells whether id is a current lease.
func (l *Lessor) Exists(id int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.leases[id]
	return ok
}

// Grant applies a grant and persists it in tx. It returns the TTL in force.
func (l *Lessor) Grant(tx storage.WriteTx, id, ttl int64) (int64, error) {
	if ttl > MaxTTL {
		return 0, ErrTTLTooLarge
	}
	if ttl < l.minTTL {
		ttl = l.minTTL
	}
	l.mu.Lock()
	if _, ok := l.leases[id]; ok {
		l.mu.Unlock()
		return 0, ErrExists
	}
	l.leases[id] = &Lease{ID: id, TTL: ttl, expiry: l.now().Add(time.Duration(ttl) * time.Second), keys: map[string]struct{}{}}
	l.mu.Unlock()
	return ttl, tx.Put(storage.BucketLease, idKey(id), EncodeRecord(id, ttl))
}

// Revoke forgets the lease (removing it from tx) and returns the keys that
// were attached to it, sorted. The caller deletes them in the same revision.
func (l *Lessor) Revoke(tx storage.WriteTx, id int64) ([][]byte, error) {
	l.mu.Lock()
	le, ok := l.leases[id]
	if !ok {
		l.mu.Unlock()
		return nil, ErrNotFound
	}
	delete(l.leases, id)
	keys := sortedKeys(le.keys)
	l.mu.Unlock()
	return keys, tx.Delete(storage.BucketLease, idKey(id))
}

// Renew restarts a lease's clock and returns its TTL.
func (l *Lessor) Renew(id int64) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	le, ok := l.leases[id]
	if !ok || le.revokeSent {
		return 0, ErrNotFound
	}
	now := l.now()
	if !now.Before(le.expiry) {
		// Expired and about to be revoked: too late to renew.
		return 0, ErrNotFound
	}
	le.expiry = now.Add(time.Duration(le.TTL) * time.Second)
	return le.TTL, nil
}

// ResetDeadlines gives every lease its full TTL from now (after a change of
// primary, as etcd does after a leader change).
func (l *Lessor) ResetDeadlines() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for _, le := range l.leases {
		le.expiry = now.Add(time.Duration(le.TTL) * time.Second)
		le.revokeSent = false
	}
}

// Get returns a snapshot of one lease.
func (l *Lessor) Get(id int64, withKeys bool) (Lease, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	le, ok := l.leases[id]
	if !ok {
		return Lease{}, ErrNotFound
	}
	out := Lease{ID: le.ID, TTL: le.TTL, Remaining: le.expiry.Sub(l.now())}
	if withKeys {
		out.Keys = sortedKeys(le.keys)
	}
	return out, nil
}

// IDs lists every lease ID, sorted.
func (l *Lessor) IDs() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]int64, 0, len(l.leases))
	for id := range l.leases {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// Expired returns up to max leases past their deadline that have not been
// handed out by an earlier call, and marks them as handed out. If the
// revocation then fails, Unmark puts a lease back.
func (l *Lessor) Expired(max int) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var ids []int64
	for id, le := range l.leases {
		if len(ids) >= max {
			break
		}
		if !le.revokeSent && !now.Before(le.expiry) {
			le.revokeSent = true
			ids = append(ids, id)
		}
	}
	return ids
}

// Unmark lets Expired hand out id again.
func (l *Lessor) Unmark(id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if le, ok := l.leases[id]; ok {
		le.revokeSent = false
	}
}

// Attach records that key is held by lease id (mvcc.LeaseTracker).
func (l *Lessor) Attach(id int64, key []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if le, ok := l.leases[id]; ok {
		le.keys[string(key)] = struct{}{}
	}
}

// Detach records that key is no longer held by lease id.
func (l *Lessor) Detach(id int64, key []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if le, ok := l.leases[id]; ok {
		delete(le.keys, string(key))
	}
}

// Count is the number of leases.
func (l *Lessor) Count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.leases)
}

func sortedKeys(m map[string]struct{}) [][]byte {
	keys := make([][]byte, 0, len(m))
	for k := range m {
		keys = append(keys, []byte(k))
	}
	sort.Slice(keys, func(i, j int) bool { return string(keys[i]) < string(keys[j]) })
	return keys
}

func idKey(id int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(id))
	return b
}

// EncodeRecord encodes a lease as etcd's leasepb.Lease {ID=1, TTL=2}.
func EncodeRecord(id, ttl int64) []byte {
	var b []byte
	if id != 0 {
		b = protowire.AppendTag(b, 1, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(id))
	}
	if ttl != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(ttl))
	}
	return b
}

// DecodeRecord decodes etcd's leasepb.Lease, ignoring fields it does not
// know (RemainingTTL of a checkpointing etcd).
func DecodeRecord(b []byte) (id, ttl int64, err error) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, 0, protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return 0, 0, protowire.ParseError(m)
			}
			b = b[m:]
			switch num {
			case 1:
				id = int64(v)
			case 2:
				ttl = int64(v)
			}
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return 0, 0, protowire.ParseError(m)
		}
		b = b[m:]
	}
	return id, ttl, nil
}

// IDGen hands out lease IDs the way etcd does: the member ID in the top
// bits, a millisecond clock and a counter below, never negative.
type IDGen struct {
	mu     sync.Mutex
	prefix uint64
	suffix uint64
}

// NewIDGen seeds a generator for one member.
func NewIDGen(member uint64, now time.Time) *IDGen {
	return &IDGen{prefix: member << 48, suffix: uint64(now.UnixMilli()) << 8}
}

// Next returns a fresh positive ID.
func (g *IDGen) Next() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.suffix++
	id := (g.prefix | (g.suffix & (1<<48 - 1))) & (1<<63 - 1)
	if id == 0 {
		g.suffix++
		id = (g.prefix | (g.suffix & (1<<48 - 1))) & (1<<63 - 1)
	}
	return int64(id)
}
