// Package report turns a benchmark's results into its results directory:
// results.json (everything, histograms included), summary.md (tables per
// target, and each dyad figure as a ratio against etcd-3 and kine-pg of the
// same run) and index.html (the same tables plus plots: latency CDFs and
// throughput versus clients, drawn with gonum/plot as SVG and embedded).
//
// What it owns: the Report type, the machine description (Machine) and the
// three renderings. It does no measuring.
//
// Extension point: Report.Sections holds extra sections (the replication
// lag, failover and DDS transport benchmarks) that render themselves into
// both the Markdown and the HTML after the request tables.
package report
