// Package history checks the lock semantics redislock promises by recording
// what several processes see while a nemesis injects faults, and checking
// the recorded histories afterwards (the method of Jepsen and of the
// linearizability checker porcupine).
//
// The files read as the specification:
//
//   - clock.go, event.go: how times are taken (one host-wide monotonic
//     clock) and what a worker process records.
//   - recorder.go: a worker process: goroutines that obtain, use and release
//     locks of every kind, and sets of keys, and record each operation.
//   - deploy.go: the Redis deployments (one node behind a fault proxy, a
//     quorum of masters, a primary with a replica and Sentinels, a Cluster)
//     and the resource the locks protect (a Redis of its own, never faulted).
//   - nemesis.go: the faults, each recorded with its interval.
//   - history.go: a recorded history assembled into holds and operations.
//   - check_*.go: one checker per property; limits.go: which documented
//     limit, if any, explains a violation.
//   - run.go: an episode (workers, nemesis, heal, calm, check); report.go the
//     table of a run.
//
// history_test.go runs a short run in the normal test suite and a long run
// behind -history.long; docs/history.md has the results and the commands.
package history
