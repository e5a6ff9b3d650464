package sim

// Disk is one node's fake disk: an append-only log of E and a metadata
// record M. Appends are volatile until a sync covers them; a crash loses
// them. Meta and Applied are written durably at once (the driver writes
// the hard state before sending anything, and applies in one atomic
// commit).
//
// Invariant: Synced() <= Len(); entries [0, Synced()) survive a crash.
type Disk[E any, M any] struct {
	log    []E
	synced int
	// Meta is the durable metadata record.
	Meta M
	// Applied is the durable applied position (1-based; 0: nothing).
	Applied uint64
	// Lost counts entries lost in crashes (a figure).
	Lost int
}

// Append adds entries after the last one; they are volatile until synced.
func (d *Disk[E, M]) Append(es ...E) { d.log = append(d.log, es...) }

// Len is the number of entries written (synced or not).
func (d *Disk[E, M]) Len() int { return len(d.log) }

// Synced is the number of entries that survive a crash.
func (d *Disk[E, M]) Synced() int { return d.synced }

// SyncTo makes the first n entries durable (a sync that started when n
// were written; entries appended since are not covered).
func (d *Disk[E, M]) SyncTo(n int) {
	if n > len(d.log) {
		n = len(d.log)
	}
	if n > d.synced {
		d.synced = n
	}
}

// Log is every entry written, oldest first (the caller must not change it).
func (d *Disk[E, M]) Log() []E { return d.log }

// At returns entry i (1-based).
func (d *Disk[E, M]) At(i uint64) (E, bool) {
	var zero E
	if i == 0 || i > uint64(len(d.log)) {
		return zero, false
	}
	return d.log[i-1], true
}

// Crash drops everything not synced.
func (d *Disk[E, M]) Crash() {
	d.Lost += len(d.log) - d.synced
	d.log = d.log[:d.synced:d.synced]
}

// Replace installs a snapshot: log (copied) becomes the durable log.
func (d *Disk[E, M]) Replace(log []E, meta M, applied uint64) {
	d.log = append([]E(nil), log...)
	d.synced = len(d.log)
	d.Meta, d.Applied = meta, applied
}

// TruncateAfter drops every entry after the first n, durably at once (the
// driver drops an unacknowledged suffix in one atomic commit).
func (d *Disk[E, M]) TruncateAfter(n int) {
	if n < len(d.log) {
		d.log = d.log[:n:n]
	}
	d.synced = min(d.synced, len(d.log))
	d.Applied = min(d.Applied, uint64(len(d.log)))
}
