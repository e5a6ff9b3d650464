//go:build !race

package ddsnet

// poisonReleased: only race builds overwrite released batches (rxbuf.go).
const poisonReleased = false
