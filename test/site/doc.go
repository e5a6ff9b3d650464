// Package site holds the tests of dyad as a site installs it: started from
// kubeadm's own etcd static-pod manifest, from the shipped systemd unit's
// ExecStart line and from the shipped Kubernetes manifests, each against the
// files `dyad certs` writes, and checked over the client port the way
// kubeadm's preflight, kubelet probes and kube-apiserver use it. The shipped
// snapshot schedules (systemd timer, CronJobs) run their own command lines
// against a single node and a pair, and k3s' --datastore-endpoint wiring is
// driven with a kine-shaped client (k3s itself cannot be built here; see
// k3s_test.go).
//
// Every process listens on loopback only; addresses in the shipped files are
// rewritten to loopback ones before anything starts, and a test fails if any
// other address is left.
package site
