package dds

/*
#cgo pkg-config: CycloneDDS
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unsafe"
)

// domains mirrors Cyclone's own process-wide table of domains: Cyclone allows
// one dds_create_domain per domain ID per process, so participants of the
// same ID share it (and must ask for the identical configuration). This is
// the package's only package-level mutable state; domainsMu is a leaf lock.
var (
	domainsMu sync.Mutex
	domains   = map[uint32]*domainRef{}
)

type domainRef struct {
	handle C.dds_entity_t
	xml    string
	refs   int
}

func acquireDomain(id uint32, xml string) error {
	domainsMu.Lock()
	defer domainsMu.Unlock()
	if d, ok := domains[id]; ok {
		if d.xml != xml {
			return fmt.Errorf("dds: domain %d already open in this process with a different configuration", id)
		}
		d.refs++
		return nil
	}
	cs := C.CString(xml)
	defer C.free(unsafe.Pointer(cs))
	h := C.dds_create_domain(C.dds_domainid_t(id), cs)
	if h < 0 {
		return ddsErr("dds_create_domain", h)
	}
	domains[id] = &domainRef{handle: h, xml: xml, refs: 1}
	return nil
}

func releaseDomain(id uint32) {
	domainsMu.Lock()
	defer domainsMu.Unlock()
	d, ok := domains[id]
	if !ok {
		return
	}
	if d.refs--; d.refs == 0 {
		C.dds_delete(d.handle)
		delete(domains, id)
	}
}

// Participant is one DDS domain participant. It owns its topics, writers and
// readers; Close deletes them all. Close MUST be called on shutdown
// (including SIGTERM): a participant that is not deleted is seen by the peer
// as present until its LeaseDuration expires.
type Participant struct {
	cfg    Config
	handle C.dds_entity_t

	mu       sync.Mutex // guards fields below; held only briefly (never across a blocking C call)
	closed   bool
	topics   map[string]C.dds_entity_t
	writers  map[*Writer]struct{}
	readers  map[*Reader]struct{}
	waitsets map[*WaitSet]struct{}
}

// NewParticipant creates (or joins, within this process) the domain
// described by cfg and creates a participant in it.
func NewParticipant(cfg Config) (*Participant, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := acquireDomain(cfg.Domain, cfg.XML()); err != nil {
		return nil, err
	}
	h := C.dds_create_participant(C.dds_domainid_t(cfg.Domain), nil, nil)
	if h < 0 {
		releaseDomain(cfg.Domain)
		return nil, ddsErr("dds_create_participant", h)
	}
	return &Participant{
		cfg:      cfg,
		handle:   h,
		topics:   map[string]C.dds_entity_t{},
		writers:  map[*Writer]struct{}{},
		readers:  map[*Reader]struct{}{},
		waitsets: map[*WaitSet]struct{}{},
	}, nil
}

// Config returns the participant's configuration (with defaults applied).
func (p *Participant) Config() Config { return p.cfg }

// Close stops every reader goroutine, deletes all entities of the
// participant and releases the domain. It is idempotent.
func (p *Participant) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	readers := make([]*Reader, 0, len(p.readers))
	for r := range p.readers {
		readers = append(readers, r)
	}
	writers := make([]*Writer, 0, len(p.writers))
	for w := range p.writers {
		writers = append(writers, w)
	}
	waitsets := make([]*WaitSet, 0, len(p.waitsets))
	for w := range p.waitsets {
		waitsets = append(waitsets, w)
	}
	p.mu.Unlock()
	// Waitsets before their readers: a Wait in progress returns (and
	// every later one gets ErrClosed) and the loans go back.
	for _, w := range waitsets {
		w.Close()
	}
	// Readers first: their goroutines must be stopped before the entities
	// they wait on are deleted.
	for _, r := range readers {
		r.Close()
	}
	for _, w := range writers {
		w.Close()
	}
	rc := C.dds_delete(p.handle)
	releaseDomain(p.cfg.Domain)
	return ddsErr("dds_delete(participant)", rc)
}

func (p *Participant) topic(name string, qos *C.dds_qos_t) (C.dds_entity_t, error) {
	// Caller holds p.mu.
	if t, ok := p.topics[name]; ok {
		return t, nil
	}
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	t := C.dds_create_topic(p.handle, &C.dyad_Envelope_desc, cs, qos, nil)
	if t < 0 {
		return 0, ddsErr("dds_create_topic", t)
	}
	p.topics[name] = t
	return t, nil
}

// QoS are the per-endpoint quality-of-service knobs. Both sides of a topic
// are RELIABLE unless BestEffort, always VOLATILE, ordered by reception
// (per-writer order is the RTPS reliable order) and, for writers,
// autodispose=false.
type QoS struct {
	// BestEffort makes the endpoint BEST_EFFORT: a lost sample is not
	// repaired, and samples after it are delivered at once. For periodic
	// announcements where only the newest counts: a RELIABLE reader holds
	// every later sample until a lost one is resent, which never happens
	// while its acknowledgements cannot reach the writer (a link that fails
	// one way). Both sides of a topic must agree: a RELIABLE reader does
	// not match a BEST_EFFORT writer.
	BestEffort bool
	// HistoryDepth 0 means KEEP_ALL (the default: nothing is ever replaced
	// before it is acknowledged/taken); n > 0 means KEEP_LAST n.
	HistoryDepth int
	// MaxBlockingTime bounds how long Write blocks when the writer history
	// is at the high-water mark (Config.WhcHigh). Default 1s.
	MaxBlockingTime time.Duration
	// MaxSamples bounds the reader history (KEEP_ALL readers then exert
	// back-pressure on the writer instead of growing). 0 = unlimited.
	MaxSamples int
}

const defaultMaxBlockingTime = time.Second

func (q QoS) c() *C.dds_qos_t {
	if q.MaxBlockingTime <= 0 {
		q.MaxBlockingTime = defaultMaxBlockingTime
	}
	var be C.int
	if q.BestEffort {
		be = 1
	}
	return C.dyad_qos(C.int32_t(q.HistoryDepth), C.int64_t(q.MaxBlockingTime), C.int32_t(q.MaxSamples), be)
}

// waitUntil polls cond every 5 ms until it is true or ctx ends.
func waitUntil(ctx context.Context, cond func() (bool, error)) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
