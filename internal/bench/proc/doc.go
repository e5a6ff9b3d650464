// Package proc supervises the server processes the benchmark starts: dyad,
// etcd, kine and PostgreSQL.
//
// What it owns:
//   - Proc: one child process whose stdout and stderr go to a log file. Its
//     only goroutine waits for the child and is owned by the Proc: it ends
//     when the child exits, and Stop/Kill make the child exit.
//   - FreePorts: loopback ports for the servers.
//
// Invariants: every child gets SIGKILL from the kernel when the bench dies
// (Pdeathsig) and runs in its own process group, so a terminal's Ctrl-C
// reaches the bench, which then stops its children in order; Stop always
// returns with the child reaped.
package proc
