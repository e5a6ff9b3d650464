// Package api owns dyad's etcd v3 gRPC surface: one file per service (KV,
// Watch, Lease, Maintenance, Cluster, Auth) plus request validation, the
// mapping of errors to etcd's gRPC codes and messages, and response headers.
//
// It holds no state of its own beyond per-stream bookkeeping; everything is
// delegated to the node (package server) below it. Every goroutine a stream
// handler starts is stopped before the handler returns.
package api
