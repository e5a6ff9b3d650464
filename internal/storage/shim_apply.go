package storage

// Temporary stand-ins for the backend's deferred commit (Apply, Commit),
// so that the journal's write path builds and runs before the backend's
// own implementation lands. Both commit at once: with them the data file
// is always at least as new as the journal. Dropped when the real ones
// merge.

// Apply runs fn and commits it (the real one defers the commit).
func (b *Backend) Apply(fn func(tx WriteTx) error) error { return b.Update(fn) }

// Commit commits what is pending (nothing, with this stand-in).
func (b *Backend) Commit() error { return b.Update(func(WriteTx) error { return nil }) }
