// Package site holds the tests of dyad as a site installs it: started from
// kubeadm's own etcd static-pod manifest, from the shipped systemd unit's
// ExecStart line and from the shipped Kubernetes manifests, each against the
// files `dyad certs` writes, and checked over the client port the way
// kubeadm's preflight, kubelet probes and kube-apiserver use it.
//
// Every process listens on loopback only; addresses in the shipped files are
// rewritten to loopback ones before anything starts, and a test fails if any
// other address is left.
package site
