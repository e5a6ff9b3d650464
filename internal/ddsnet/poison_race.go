//go:build race

package ddsnet

// poisonReleased: race builds overwrite released batches (rxbuf.go).
const poisonReleased = true
