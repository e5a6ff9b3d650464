// Package twozone holds the benchmarks that need two zones or a fault, the
// study's metrics beyond request latency and throughput:
//
//   - Failover (M4): kill -9 the primary of a dyad pair under load, again
//     and again; from the client timeline, the write outage (kill → first
//     acknowledged write on the survivor), acknowledged writes lost (read
//     back from the survivor, and from the killed node once it is back),
//     new writes on the survivor, resync time (restart → the pair
//     synchronous again) and time solo (dyad's metrics).
//   - Replication (M1, M3): writes acknowledged through one zone's node
//     until a watch on the other zone's node delivers them; the
//     distribution of that replica lag against the study's 0.5 s bound;
//     linearizable reads on the primary and on the replica under the same
//     write load; HashKV of both nodes at one revision afterwards.
//   - Loaded (M4): the pair under write load with CPU hogs on every core;
//     role changes and dyad_false_failovers_total, which must stay 0.
//   - Contrast (M4): the same zone loss applied to etcd and kine
//     (target.Faulty); a write freeze is the result, not a failure.
//
// What it owns: the client traffic recorder (every request with its start,
// end and outcome), reading dyad's Prometheus metrics, and the report
// sections (Markdown tables, SVG plots) of those benchmarks.
//
// Every goroutine started here is owned by a traffic (stopped by its stop
// method) or by the function that started it, and ends before it returns.
package twozone
