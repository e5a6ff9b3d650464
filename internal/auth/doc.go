// Package auth owns dyad's user and role records, kept as etcd keeps them
// (buckets "authUsers" and "authRoles", authpb encodings, the auth revision
// in bucket "auth"), so that etcdctl's user and role commands behave as
// against an etcd whose authentication is disabled, and snapshots carry the
// records across a migration in either direction.
//
// dyad does not enforce user/role permissions: enabling authentication is
// refused (client identity is TLS client certificates). Changes are log
// entries; Apply runs on the server's single writer inside the batch's
// storage transaction. Password hashing happens before proposal (Hash), so
// an entry is deterministic on every replica.
//
// Store.mu guards the in-memory maps; it is a leaf lock.
package auth
