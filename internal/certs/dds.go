package certs

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"time"
)

// AnyDomain in a domain field means every DDS domain that DDS Security
// can name: Cyclone's governance and permissions parsers refuse ids above
// 230 (plain DDS allows 232).
const AnyDomain = -1

// domainsXML is the <domains> element for domain (a single id or all).
func domainsXML(domain int) string {
	if domain == AnyDomain {
		return "<domains><id_range><min>0</min><max>230</max></id_range></domains>"
	}
	return fmt.Sprintf("<domains><id>%d</id></domains>", domain)
}

func escText(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// Governance returns the DDS Security domain governance document (OMG DDS
// Security 1.1 §9.4.1.2) dyad uses: no unauthenticated participants, join
// access control, discovery and liveliness encrypted, and for every topic
// read and write access control with encrypted metadata and data. RTPS
// message protection stays off: submessage and payload encryption already
// cover every byte of topic data, and protecting whole messages too would
// encrypt them twice.
func Governance(domain int) []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>
<dds>
  <domain_access_rules>
    <domain_rule>
      ` + domainsXML(domain) + `
      <allow_unauthenticated_participants>false</allow_unauthenticated_participants>
      <enable_join_access_control>true</enable_join_access_control>
      <discovery_protection_kind>ENCRYPT</discovery_protection_kind>
      <liveliness_protection_kind>ENCRYPT</liveliness_protection_kind>
      <rtps_protection_kind>NONE</rtps_protection_kind>
      <topic_access_rules>
        <topic_rule>
          <topic_expression>*</topic_expression>
          <enable_discovery_protection>true</enable_discovery_protection>
          <enable_liveliness_protection>true</enable_liveliness_protection>
          <enable_read_access_control>true</enable_read_access_control>
          <enable_write_access_control>true</enable_write_access_control>
          <metadata_protection_kind>ENCRYPT</metadata_protection_kind>
          <data_protection_kind>ENCRYPT</data_protection_kind>
        </topic_rule>
      </topic_access_rules>
    </domain_rule>
  </domain_access_rules>
</dds>
`)
	return b.Bytes()
}

// Grant gives one participant identity (by certificate subject) the right
// to publish and subscribe the topics matching Topics (fnmatch patterns) in
// Domain, from NotBefore to NotAfter. Everything else is denied. Without
// Partitions only the default partition is granted (dyad uses no
// partitions); Partitions lists partition patterns instead.
type Grant struct {
	Name       string
	Subject    string // RFC 2253 form, e.g. "CN=a,O=dyad"
	Domain     int
	Topics     []string
	Partitions []string
	NotBefore  time.Time
	NotAfter   time.Time
}

// permTime is the xs:dateTime form Cyclone parses (UTC, no zone suffix).
func permTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05") }

// Permissions returns the DDS Security permissions document (OMG DDS
// Security 1.1 §9.4.1.3) holding grants; the default of each grant is DENY.
func Permissions(grants []Grant) []byte {
	var b bytes.Buffer
	b.WriteString("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<dds>\n  <permissions>\n")
	for _, g := range grants {
		var topics bytes.Buffer
		topics.WriteString("<topics>")
		for _, t := range g.Topics {
			fmt.Fprintf(&topics, "<topic>%s</topic>", escText(t))
		}
		topics.WriteString("</topics>")
		if len(g.Partitions) > 0 {
			topics.WriteString("<partitions>")
			for _, p := range g.Partitions {
				fmt.Fprintf(&topics, "<partition>%s</partition>", escText(p))
			}
			topics.WriteString("</partitions>")
		}
		fmt.Fprintf(&b, `    <grant name="%s">
      <subject_name>%s</subject_name>
      <validity><not_before>%s</not_before><not_after>%s</not_after></validity>
      <allow_rule>
        %s
        <publish>%s</publish>
        <subscribe>%s</subscribe>
      </allow_rule>
      <default>DENY</default>
    </grant>
`, escText(g.Name), escText(g.Subject), permTime(g.NotBefore), permTime(g.NotAfter), domainsXML(g.Domain), topics.String(), topics.String())
	}
	b.WriteString("  </permissions>\n</dds>\n")
	return b.Bytes()
}
