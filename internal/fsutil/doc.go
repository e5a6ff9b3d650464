// Package fsutil holds the few file-system steps that make a new name
// durable. A file's fsync makes its contents durable, but not its name: the
// directory entry is durable only once the directory itself is fsynced,
// and a new directory's entry only once its parent is. Without these steps
// a power loss can take away a freshly created data file, or a renamed
// conflict record, together with everything already acknowledged in it.
package fsutil
