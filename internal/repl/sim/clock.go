package sim

// Clock is one node's monotonic clock: it runs at 1 + PPM/10⁶ times the
// virtual rate, from Base at virtual time Origin. A reboot starts it again
// near zero (Reset); a process restart without a reboot keeps it.
//
// Invariant: Local never goes backwards between two Resets, and is >= 1
// (the core takes 0 as "never").
type Clock struct {
	PPM    int64 // drift, parts per million (bounded by the world's MaxDriftPPM)
	Base   int64 // the local reading at Origin
	Origin int64 // virtual time of the last Reset
	// Resets counts Resets (the reading may start again lower after one).
	Resets uint64
}

// Local is the clock's reading at virtual time v (>= Origin).
func (c *Clock) Local(v int64) int64 {
	d := v - c.Origin
	return c.Base + d + d/1_000_000*c.PPM + d%1_000_000*c.PPM/1_000_000
}

// Virtual is how much virtual time passes while this clock advances by
// local ns (for scheduling a timer of the node).
func (c *Clock) Virtual(local int64) int64 {
	v := local * 1_000_000 / (1_000_000 + c.PPM)
	if v < 1 {
		v = 1
	}
	return v
}

// Reset restarts the clock at base (>= 1) at virtual time v.
func (c *Clock) Reset(v, base int64) {
	c.Origin, c.Base = v, max(base, 1)
	c.Resets++
}

// SetRate changes the drift to ppm from virtual time v on, without a jump:
// the reading at v stays as it was.
func (c *Clock) SetRate(v, ppm int64) {
	c.Base, c.Origin, c.PPM = c.Local(v), v, ppm
}
