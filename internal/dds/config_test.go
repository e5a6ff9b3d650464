package dds

import (
	"strings"
	"testing"
	"time"
)

func TestConfigXML(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		want    []string
		notWant []string
	}{
		{
			name:    "defaults",
			cfg:     Config{Domain: 7},
			want:    []string{`<LeaseDuration>2s</LeaseDuration>`, `<SocketReceiveBufferSize max="4194304B"/>`, `<WhcHigh>4194304B</WhcHigh>`, `<WhcHighInit>4194304B</WhcHighInit>`, `<WhcAdaptive>false</WhcAdaptive>`},
			notWant: []string{`AllowMulticast`, `<Peers>`, `ParticipantIndex`, `NetworkInterface`},
		},
		{
			name: "unicast peers",
			cfg:  Config{Interface: "veth0", Peers: []string{"10.99.0.2", " 10.99.0.3:7410 "}},
			want: []string{
				`<Interfaces><NetworkInterface name="veth0"/></Interfaces>`,
				`<AllowMulticast>false</AllowMulticast>`,
				`<ParticipantIndex>auto</ParticipantIndex>`,
				`<MaxAutoParticipantIndex>32</MaxAutoParticipantIndex>`,
				`<Peers><Peer address="10.99.0.2"/><Peer address="10.99.0.3:7410"/></Peers>`,
			},
		},
		{
			name: "lease and watermark",
			cfg:  Config{LeaseDuration: 1500 * time.Millisecond, WhcHigh: 3 << 20, MaxAutoParticipantIndex: 50, Peers: []string{"a"}},
			want: []string{`<LeaseDuration>1500ms</LeaseDuration>`, `<WhcHigh>3145728B</WhcHigh>`, `<MaxAutoParticipantIndex>50</MaxAutoParticipantIndex>`,
				`<SocketReceiveBufferSize max="3145728B"/>`},
		},
		{
			name: "socket receive buffer set",
			cfg:  Config{SocketReceiveBuffer: 8 << 20},
			want: []string{`<Internal><SocketReceiveBufferSize max="8388608B"/><Watermarks>`},
		},
		{
			name:    "write batching off by default",
			cfg:     Config{},
			notWant: []string{`WriteBatch`},
		},
		{
			name: "write batching",
			cfg:  Config{WriteBatch: true},
			want: []string{`<WriteBatch>true</WriteBatch>`},
		},
		{
			name:    "socket receive buffer left to Cyclone",
			cfg:     Config{SocketReceiveBuffer: -1},
			want:    []string{`<Internal><Watermarks>`},
			notWant: []string{`SocketReceiveBufferSize`},
		},
		{
			name: "sub-ms lease",
			cfg:  Config{LeaseDuration: 10*time.Millisecond + 500*time.Microsecond},
			want: []string{`<LeaseDuration>10500us</LeaseDuration>`},
		},
		{
			name: "message sizes",
			cfg:  Config{MaxMessageSize: 65500, FragmentSize: 8000},
			want: []string{`<MaxMessageSize>65500B</MaxMessageSize>`, `<FragmentSize>8000B</FragmentSize>`},
		},
		{
			name: "escaping",
			cfg:  Config{Interface: `a"<b>&`, Peers: []string{`x"y`}},
			want: []string{`name="a&#34;&lt;b&gt;&amp;"`, `address="x&#34;y"`},
		},
		{
			name: "security and extra are inside Domain, extra last",
			cfg:  Config{SecurityXML: `<Security>S</Security>`, ExtraXML: `<Tracing><Verbosity>warning</Verbosity></Tracing>`},
			want: []string{`</Internal><Security>S</Security><Tracing><Verbosity>warning</Verbosity></Tracing></Domain></CycloneDDS>`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			x := tc.cfg.XML()
			if !strings.HasPrefix(x, `<CycloneDDS><Domain id="any">`) || !strings.HasSuffix(x, `</Domain></CycloneDDS>`) {
				t.Fatalf("bad envelope: %s", x)
			}
			for _, w := range tc.want {
				if !strings.Contains(x, w) {
					t.Errorf("missing %q in\n%s", w, x)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(x, w) {
					t.Errorf("unexpected %q in\n%s", w, x)
				}
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{
		{Domain: 233},
		{LeaseDuration: time.Millisecond},
		{WhcHigh: -1},
		{SocketReceiveBuffer: 1 << 31},
		{MaxAutoParticipantIndex: 500},
		{Peers: []string{" "}},
	}
	for i, c := range bad {
		if c.Validate() == nil {
			t.Errorf("%d: %+v validated", i, c)
		}
	}
	if err := (Config{Domain: 232, Peers: []string{"127.0.0.1"}}).Validate(); err != nil {
		t.Error(err)
	}
}

// TestConfigAcceptedByCyclone checks that Cyclone parses what we generate
// (unknown elements or bad units make dds_create_domain fail).
func TestConfigAcceptedByCyclone(t *testing.T) {
	for i, c := range []Config{
		{Interface: "lo", Peers: []string{"127.0.0.1"}, LeaseDuration: 1500 * time.Millisecond, MaxMessageSize: 65500, FragmentSize: 8000},
		{Interface: "lo", Peers: []string{"127.0.0.1"}, LeaseDuration: 10500 * time.Microsecond, WhcHigh: 3 << 20},
		// Far above any usual net.core.rmem_max: Cyclone must take what
		// the kernel grants rather than fail.
		{Interface: "lo", Peers: []string{"127.0.0.1"}, SocketReceiveBuffer: 1 << 30, WriteBatch: true},
	} {
		c.Domain = testDomain(t)
		p, err := NewParticipant(c)
		if err != nil {
			t.Fatalf("%d: %v\n%s", i, err, c.XML())
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NewParticipant(Config{Domain: testDomain(t), ExtraXML: `<NoSuchElement>1</NoSuchElement>`}); err == nil {
		t.Fatal("bogus XML accepted")
	}
}
