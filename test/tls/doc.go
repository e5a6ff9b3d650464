// Package tls tests client TLS and mTLS with etcd's server flags
// (--cert-file, --key-file, --trusted-ca-file, --client-cert-auth) and
// etcd's client settings, through clientv3 (the client kube-apiserver builds
// from --etcd-cafile/--etcd-certfile/--etcd-keyfile) and etcdctl (--cacert,
// --cert, --key). The same table runs against real etcd 3.6 so that dyad's
// behaviour is checked against the reference, not against itself. Material
// comes from `dyad certs`.
package tls
