// Package hygiene holds checks over the source tree itself, run as tests:
// rules that keep the suite honest and that no compiler enforces.
//
// TestNoFixedDatesInTests: a test must pass on any date. A fixed calendar
// date (time.Date) in a test file sits next to code that reads the wall
// clock sooner or later (certificate lifetimes, signing times, expiry
// windows, log ages), and the test then fails on every day after it was
// written. Tests take their times from one `now` taken at their start, or
// from an injected clock. A time.Date that never meets a clock (a codec's
// round trip) carries a `fixed date:` comment on its line saying why.
package hygiene
