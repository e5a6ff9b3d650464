// Package scale is `dyad bench --profile scale`: a target holding many
// pod-shaped objects (500,000 of 2 KiB by default, --scale-objects to run
// smaller) and the figures that change with size, measured on dyad, the
// dyad pair and etcd side by side:
//
//   - time to serve after a restart: every process of the target stopped
//     with SIGTERM and started again, from the first start until a
//     linearizable read and a write both succeed (and, for reference,
//     until the client port accepts a connection);
//   - single-get latency: linearizable Gets of random objects, one client;
//   - put rate and watch lag under many watchers (1,000 by default, as many
//     on each of the objects' 100 namespaces), in two phases under the same
//     watchers. In both, the lag of each event is measured from its put's
//     send (what a client sees between its write and the watchers' event:
//     it includes the write's own latency, as etcd's `benchmark
//     watch-latency` measures it), and, for the fan-out alone, from the
//     put's acknowledgement to its delivery on a watcher (0 if delivered
//     first). Each timed put's value carries its phase's mark and its
//     sequence number, so a watcher finds its send time even when the
//     event arrives before the acknowledgement. Closed-loop: the writers
//     put as fast as the target acknowledges (the put rate under the
//     watchers); a faster target thus has its lag measured under more
//     events per second, decoded by the bench's own watchers on the same
//     cores. Paced: puts issued open-loop at a fixed total rate
//     (--scale-watch-rate, 1,000/s), each at its due time whatever became
//     of the ones before, so every target's lag is measured at the same
//     load;
//   - put latency alone and during a LIST storm: listers read the whole
//     prefix in pages (limit 500, later pages at the first page's
//     revision, as the apiserver paginates) while writers update objects.
//
// Writers update existing objects, so the object count holds through the
// run. Transient errors ("no leader", unavailable) are retried, as an
// apiserver retries them, and counted. Every goroutine is owned by the phase that starts it and has ended
// when that phase returns.
package scale
