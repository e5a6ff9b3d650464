// Package shaper delays, drops and reorders the frames of a link in user
// space, for kernels built without sch_netem (minimal VM kernels such as
// Firecracker's; this project's own test machine has none). It needs only
// AF_PACKET sockets and network namespaces.
//
// A Hub owns two or more ports: interfaces inside one namespace, each the
// far end of a veth from a zone. A frame arriving on port i is held for
// port i's Fault (its Delay, or dropped for Down or Loss) and then written
// to every other port, as an Ethernet hub does; a zone's kernel drops the
// unicast frames meant for another zone's address. With two ports this is
// one link with a fault per direction; with three, every pair of members is
// one hop apart and pays the same delay.
//
// Users: test/testutil (the Zones fixture's fault injection, which moves
// its two ports between a kernel bridge and a Hub) and the benchmark's
// namespaces (internal/bench/netns), which keep a Hub running for a whole
// run to put a distance between the zones.
//
// Frames are read and written with a virtio-net header (PACKET_VNET_HDR), so
// GSO super-frames and frames whose checksum is still pending
// (CHECKSUM_PARTIAL), which veths carry, pass through unchanged instead of
// being truncated or delivered with a wrong checksum.
//
// Goroutines: a Hub runs one reader and one writer per port; Close stops
// them and returns after they have ended. Lock order: Hub.mu is a leaf.
// Needs root (CAP_NET_ADMIN, CAP_NET_RAW, CAP_SYS_ADMIN for setns).
package shaper
