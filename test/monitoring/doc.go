// Package monitoring checks what dyad ships for Prometheus and Grafana
// (deploy/monitoring): the PrometheusRule is valid for promtool, its
// alerts fire on the series their unit tests feed them, and every metric
// the rules and the dashboard query is one a running pair exports.
//
// promtool comes from Debian's prometheus package. Without it the promtool
// tests are skipped, or failed when DYAD_REQUIRE_PEERS=1. The series check
// runs a real pair in network namespaces (root).
package monitoring
