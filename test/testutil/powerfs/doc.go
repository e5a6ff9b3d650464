// Package powerfs is a test-only FUSE file system that simulates power loss.
//
// It passes every operation through to a backing directory (go-fuse's
// loopback node) and keeps, since the last fsync, an undo record of what is
// not yet durable:
//   - per file (keyed by the backing inode): the size it had at its last
//     fsync and the original contents of every 4 KiB page written or cut
//     off since then;
//   - per directory operation (create, mkdir, unlink, rmdir, rename, in
//     order): how to undo it. An operation becomes durable once every
//     directory it changed has been fsynced after it (the POSIX rule a
//     crash-safe program must follow; ext4 and xfs are often kinder).
//     Unlinked and replaced files are parked in a hidden graveyard beside
//     the backing root, so an undo can bring them back.
//
// A power cut (Cut, or a Trigger armed with Arm: at, or
// just after, the N-th write, optionally counting only writes made while
// unsynced changes exist, or just after the N-th fsync) makes every later
// operation fail with EIO at once, as a dead disk would; the test then
// kills the processes using the mount and calls Crash, which unmounts and
// rolls the backing directory back to its durable state: all unsynced
// changes undone (Clean), or for file data a random torn subset of 512-byte
// sectors kept (Torn), as a disk that loses power mid-write leaves it.
// The backing directory is then what a rebooted machine would find; mount
// it again with Mount.
//
// Mounting needs root and /dev/fuse (Available reports it); no fusermount
// is used (direct mount).
package powerfs
