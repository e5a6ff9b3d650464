// Package crash holds multi-process tests that kill a real dyad process
// (SIGKILL) while clients write, restart it on the same data dir and check
// that every acknowledged write survived.
package crash
