package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPrintDDSConfig: serve --print-dds-config writes the pair's Cyclone
// XML, which names the interface and the peer given on the command line,
// and exits without creating the data dir.
func TestPrintDDSConfig(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	cmd := serveCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--print-dds-config", "--name", "b", "--data-dir", dataDir,
		"--initial-cluster", "a=http://192.0.2.10:2380,b=http://198.51.100.10:2380",
		"--dds-interface", "zone-b0", "--dds-domain", "7"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		XMLName xml.Name `xml:"CycloneDDS"`
		Domain  struct {
			Interfaces []struct {
				Name string `xml:"name,attr"`
			} `xml:"General>Interfaces>NetworkInterface"`
			Multicast string `xml:"General>AllowMulticast"`
			Peers     []struct {
				Address string `xml:"address,attr"`
			} `xml:"Discovery>Peers>Peer"`
		}
	}
	if err := xml.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("output is not XML: %v\n%s", err, out.String())
	}
	if len(doc.Domain.Interfaces) != 1 || doc.Domain.Interfaces[0].Name != "zone-b0" {
		t.Errorf("interfaces %+v, want zone-b0 alone", doc.Domain.Interfaces)
	}
	// Node b's peer is a's host.
	if len(doc.Domain.Peers) != 1 || doc.Domain.Peers[0].Address != "192.0.2.10" {
		t.Errorf("peers %+v, want 192.0.2.10 alone", doc.Domain.Peers)
	}
	if doc.Domain.Multicast != "false" {
		t.Errorf("AllowMulticast %q, want false with a unicast peer", doc.Domain.Multicast)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("data dir %s: %v, want it never created", dataDir, err)
	}
}

// TestPrintDDSConfigSingleNode: a single node has no DDS configuration to
// print, and says so.
func TestPrintDDSConfigSingleNode(t *testing.T) {
	cmd := serveCmd()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"--print-dds-config", "--data-dir", filepath.Join(t.TempDir(), "data")})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--initial-cluster") {
		t.Fatalf("err = %v, want one naming --initial-cluster", err)
	}
}

func TestRmemShortfall(t *testing.T) {
	for _, tc := range []struct {
		name          string
		rmemMax, want int64
		warn          bool
	}{
		{"unknown", -1, 4 << 20, false},
		{"kernel default", 212992, 4 << 20, true},
		{"just below", 4<<20 - 1, 4 << 20, true},
		{"equal", 4 << 20, 4 << 20, false},
		{"above", 8 << 20, 4 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rmemShortfall(tc.rmemMax, tc.want)
			if (got != "") != tc.warn {
				t.Fatalf("rmemShortfall(%d, %d) = %q, want a warning: %v", tc.rmemMax, tc.want, got, tc.warn)
			}
			if tc.warn && !strings.Contains(got, fmt.Sprintf("net.core.rmem_max=%d", tc.want)) {
				t.Fatalf("warning %q does not say which value to set", got)
			}
		})
	}
}
