package dds

import (
	"encoding/xml"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Defaults applied by Config.withDefaults.
const (
	DefaultLeaseDuration           = 2 * time.Second
	DefaultMaxAutoParticipantIndex = 32
	// DefaultWhcHigh is the writer history-cache high-water mark. The brief
	// requires >= 2 x --max-request-bytes (2 x 1.5 MiB); 4 MiB leaves room
	// for the envelope and for heartbeats queued behind a large entry.
	DefaultWhcHigh = 4 << 20
)

// Config selects the DDS domain and how the participant discovers its peer.
// The zero value (plus a Domain) is "multicast discovery on Cyclone's default
// interface".
type Config struct {
	// Domain is the DDS domain ID (0..232). Both replicas must agree.
	Domain uint32
	// Interface is the NIC name to bind (e.g. "eth1", "lo"). Empty lets
	// Cyclone choose.
	Interface string
	// Peers are unicast addresses ("10.0.0.2" or "host:port") of the other
	// replica(s). When non-empty, multicast is disabled entirely
	// (AllowMulticast=false) and discovery is unicast to these peers, with
	// ParticipantIndex=auto so several participants can share a host.
	Peers []string
	// MaxAutoParticipantIndex bounds ParticipantIndex=auto (and the number of
	// ports probed per peer). Default 32; only used with Peers.
	MaxAutoParticipantIndex int
	// LeaseDuration is the participant lease: how long a peer that vanished
	// without deleting its participant is still considered present. Default
	// 2s. (Not used for failure detection; see package doc.)
	LeaseDuration time.Duration
	// WhcHigh is the writer history-cache high-water mark in bytes: a
	// reliable writer blocks (up to MaxBlockingTime, then ErrTimeout) once
	// this many bytes are unacknowledged. Default DefaultWhcHigh. Cyclone
	// only has this as a domain-wide setting (Internal/Watermarks). Cyclone
	// starts every writer at WhcHighInit (30 kB) and only grows it when
	// WhcAdaptive is on, so both WhcHigh and WhcHighInit are set to this
	// value and WhcAdaptive is off: the mark is exactly WhcHigh.
	WhcHigh int64
	// SocketReceiveBuffer is the socket receive buffer (bytes) Cyclone
	// asks the kernel for on each of its sockets; Linux caps the request
	// at net.core.rmem_max and doubles what it grants for its own
	// bookkeeping, and Cyclone takes whatever it got (never an error).
	// Default WhcHigh: a writer sends up to WhcHigh bytes before it
	// stops for acknowledgements, and with Cyclone's own request (1 MiB)
	// a burst of that size overflowed the peer's buffer; every datagram
	// dropped there is repaired only after a NACK round, which cut
	// RELIABLE KEEP_ALL throughput at 4 KiB samples tenfold (the `dyad
	// perf` section of docs/BENCHMARKS.md). Negative: Cyclone's default.
	SocketReceiveBuffer int64
	// WriteBatch makes every writer of the domain batch (Cyclone's
	// Internal/WriteBatch): Writer.Queue then only serialises a sample,
	// and samples queued back to back share datagrams up to
	// MaxMessageSize, sent by Writer.Flush (or the next Write). Write
	// and WriteStamped flush in the same C call, so a caller that never
	// queues sees no difference. Cyclone's own ddsperf publishes this
	// way (dds_write_set_batch). Off by default.
	WriteBatch bool
	// MaxMessageSize and FragmentSize (bytes) override Cyclone's RTPS
	// message/fragment sizes (defaults 14720 / 1344). Zero keeps defaults.
	MaxMessageSize int
	FragmentSize   int
	// SecurityXML, if set, is inserted verbatim inside <Domain> and must be a
	// complete <Security>...</Security> element (DDS Security plugins).
	SecurityXML string
	// ExtraXML is expert Cyclone configuration inserted verbatim inside
	// <Domain> after everything else. Cyclone merges repeated elements, later
	// ones winning for single-valued settings.
	ExtraXML string
}

func (c Config) withDefaults() Config {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.MaxAutoParticipantIndex == 0 {
		c.MaxAutoParticipantIndex = DefaultMaxAutoParticipantIndex
	}
	if c.WhcHigh == 0 {
		c.WhcHigh = DefaultWhcHigh
	}
	if c.SocketReceiveBuffer == 0 {
		c.SocketReceiveBuffer = c.WhcHigh
	}
	return c
}

// Validate reports configuration errors that Cyclone would otherwise report
// only as an opaque failure of dds_create_domain.
func (c Config) Validate() error {
	if c.Domain > 232 {
		return fmt.Errorf("dds: domain %d out of range 0..232", c.Domain)
	}
	if c.LeaseDuration < 0 || (c.LeaseDuration > 0 && c.LeaseDuration < 10*time.Millisecond) {
		return fmt.Errorf("dds: lease duration %v too small", c.LeaseDuration)
	}
	if c.WhcHigh < 0 {
		return errors.New("dds: negative WhcHigh")
	}
	if c.SocketReceiveBuffer > math.MaxInt32 {
		return fmt.Errorf("dds: SocketReceiveBuffer %d above 2 GiB", c.SocketReceiveBuffer)
	}
	if c.MaxAutoParticipantIndex < 0 || c.MaxAutoParticipantIndex > 120 {
		return fmt.Errorf("dds: MaxAutoParticipantIndex %d out of range 0..120", c.MaxAutoParticipantIndex)
	}
	for _, p := range c.Peers {
		if strings.TrimSpace(p) == "" {
			return errors.New("dds: empty peer address")
		}
	}
	return nil
}

// XML returns the Cyclone configuration document for c (after defaults).
// It is passed to dds_create_domain as a string.
func (c Config) XML() string {
	c = c.withDefaults()
	var b strings.Builder
	b.WriteString(`<CycloneDDS><Domain id="any">`)
	b.WriteString(`<General>`)
	if c.Interface != "" {
		fmt.Fprintf(&b, `<Interfaces><NetworkInterface name="%s"/></Interfaces>`, esc(c.Interface))
	}
	if len(c.Peers) > 0 {
		b.WriteString(`<AllowMulticast>false</AllowMulticast>`)
	}
	if c.MaxMessageSize > 0 {
		fmt.Fprintf(&b, `<MaxMessageSize>%dB</MaxMessageSize>`, c.MaxMessageSize)
	}
	if c.FragmentSize > 0 {
		fmt.Fprintf(&b, `<FragmentSize>%dB</FragmentSize>`, c.FragmentSize)
	}
	b.WriteString(`</General>`)
	b.WriteString(`<Discovery>`)
	if len(c.Peers) > 0 {
		b.WriteString(`<ParticipantIndex>auto</ParticipantIndex>`)
		fmt.Fprintf(&b, `<MaxAutoParticipantIndex>%d</MaxAutoParticipantIndex>`, c.MaxAutoParticipantIndex)
		b.WriteString(`<Peers>`)
		for _, p := range c.Peers {
			fmt.Fprintf(&b, `<Peer address="%s"/>`, esc(strings.TrimSpace(p)))
		}
		b.WriteString(`</Peers>`)
	}
	fmt.Fprintf(&b, `<LeaseDuration>%s</LeaseDuration>`, duration(c.LeaseDuration))
	b.WriteString(`</Discovery>`)
	b.WriteString(`<Internal>`)
	if c.SocketReceiveBuffer > 0 {
		// max alone: request this much, accept what the kernel grants.
		fmt.Fprintf(&b, `<SocketReceiveBufferSize max="%dB"/>`, c.SocketReceiveBuffer)
	}
	if c.WriteBatch {
		b.WriteString(`<WriteBatch>true</WriteBatch>`)
	}
	fmt.Fprintf(&b, `<Watermarks><WhcHigh>%dB</WhcHigh><WhcHighInit>%dB</WhcHighInit><WhcAdaptive>false</WhcAdaptive></Watermarks></Internal>`, c.WhcHigh, c.WhcHigh)
	b.WriteString(c.SecurityXML)
	b.WriteString(c.ExtraXML)
	b.WriteString(`</Domain></CycloneDDS>`)
	return b.String()
}

// duration formats d in Cyclone's duration syntax (integer + unit).
func duration(d time.Duration) string {
	switch {
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	case d%time.Millisecond == 0:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	case d%time.Microsecond == 0:
		return fmt.Sprintf("%dus", d/time.Microsecond)
	default:
		return fmt.Sprintf("%dns", int64(d))
	}
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return strings.ReplaceAll(b.String(), `"`, "&#34;")
}
