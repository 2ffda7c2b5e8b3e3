// Package chaos holds the fault-injection test of gravelerd on a
// three-member etcd cluster. It runs only with the chaos build tag:
//
//	go test -race -tags chaos ./chaos -run '^TestChaos$' -v -chaos.duration=2m -timeout 5m   # short form (.ci/run, about 2.5 min)
//	go test -tags chaos ./chaos -run '^TestChaos$' -v -chaos.duration=30m -timeout=40m        # long form
//
// The test starts three embedded etcd members on loopback (fixed, reserved
// peer and client ports, so a member restarts on its own data directory
// and addresses), two in-process gravelerd instances sharing the cluster,
// clients that stage unique keys, commit, create and delete branches and
// repositories, and two cleaner replicas in daemon mode (leader election,
// orphan sweep without grace) reclaiming as they go. Meanwhile it stops
// and restarts etcd members (the leader included) and restarts a
// gravelerd. A client that sees an error backs off briefly, as a real one
// would. Afterwards, with every member back, a checker asserts that
// nothing acknowledged was lost:
//
//   - every acknowledged staged write is visible on its branch with its last
//     acknowledged value (or a later attempted one), and is in the branch's
//     committed data after a final commit;
//   - every successful commit is in its branch's history;
//   - a branch head only ever points at a commit that a commit call on that
//     branch produced (heads move only by successful compare-and-swap);
//   - deleted repositories and branches are invisible;
//   - no repository or staging partition is left in etcd that no live
//     repository or branch references (after the cleaner has run).
//
// It prints the counts of operations, acknowledged operations, verified
// facts and injected faults, and the failed calls by operation and code.
// Flags: -chaos.duration, -chaos.writers, -chaos.seed,
// -chaos.fault-interval, -chaos.cleaners, -chaos.cleaner-interval. The package has no non-test code; without the
// tag it compiles to this comment.
package chaos
