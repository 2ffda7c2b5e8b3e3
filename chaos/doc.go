// Package chaos holds the fault-injection tests of gravelerd and etcdkv on
// a three-member etcd cluster whose members are separate OS processes. It
// runs only with the chaos build tag; the short forms are what .ci/run
// runs (about 4 minutes on two cores):
//
//	go test -race -tags chaos ./chaos -run '^(TestChaos|TestLinModels|TestLinearizableKV|TestLinearizableBranch|TestAbandonedAttemptLandsLate|TestStoppedMemberCost|TestFeedMemberFaults)$' -v -chaos.duration=75s -lin.duration=30s -timeout 15m
//
//	go test -tags chaos ./chaos -run '^TestChaos$' -v -chaos.duration=30m -timeout=40m               # long form
//	go test -tags chaos ./chaos -run '^TestLinearizable' -v -lin.duration=5m -lin.ops=30000 -timeout=30m  # long linearizability runs
//	go test -tags chaos ./chaos -run '^TestStoppedMemberCost$' -v                                       # one stopped member's cost
//	go test -tags chaos ./chaos -run '^TestClusterFaults$' -v -chaos.duration=30s                       # the etcd layer alone
//	go test -tags chaos ./chaos -run '^TestAbandonedAttemptLandsLate$' -v                              # a late Set attempt
//
// The cluster: the tests build etcd's own main (./etcdproc, etcdmain.Main)
// once per run with the go command, and start three members on loopback
// with fixed, reserved ports and a data directory each (so a killed
// member restarts as itself), --unsafe-no-fsync (a SIGKILL loses nothing:
// the page cache survives the process), a 50 ms heartbeat and a 500 ms
// election timeout, and a log file each, whose tail a failed test prints.
// Faults: SIGSTOP of the leader or a follower (its connections stay open
// and silent, as a hung host's would) and SIGCONT, SIGKILL of the leader
// or a follower and a restart on its data, and, where gravelerd runs, a
// gravelerd restart. One fault at a time, so a quorum always remains,
// except in TestFeedMemberFaults, which freezes two members on purpose so
// that the member holding the feed's watch loses its leader.
// Every member is killed when its test ends, pass or fail (and, on Linux,
// when the test process dies: Pdeathsig).
//
// TestChaos runs two in-process gravelerd instances on the cluster,
// clients that stage unique keys, commit, create and delete branches and
// repositories, and two cleaner replicas in daemon mode (leader election,
// orphan sweep without grace) reclaiming as they go, while the faults
// above cycle every -chaos.fault-interval. A client that sees an error
// backs off briefly, as a real one would. Afterwards, with every member
// back, a checker asserts that nothing acknowledged was lost:
//
//   - every acknowledged staged write is visible on its branch with its last
//     acknowledged value (or a later attempted one), and is in the branch's
//     committed data after a final commit;
//   - every successful commit is in its branch's history;
//   - a branch head only ever points at a commit that a commit call on that
//     branch produced (heads move only by successful compare-and-swap);
//   - deleted repositories and branches are invisible;
//   - no repository or staging partition is left in etcd that no live
//     repository or branch references (after the cleaner has run);
//   - a consumer of the change feed that follows WatchRefs through the
//     whole run, moving between replicas with its token, received events
//     that replay to the final refs, chain per branch, and hold every
//     acknowledged mutation at the revision its response reported
//     (CHAOS-FEED line);
//   - a full consistency check (package fsck, Full) after the cleaner
//     finds no error: every ref reaches existing commits with sound
//     parents, generations and ids, every metarange and range they name
//     reads back and verifies, and all three etcd members hash the key
//     space alike at one revision (CHAOS-FSCK line; warnings, such as a
//     create abandoned by a restarted gravelerd, are logged).
//
// TestFeedMemberFaults kills and stops the etcd member holding gravelerd's
// feed watch, restarts gravelerd, and makes the watch's member lose its
// leader; the feed must match an independent raw etcd watch exactly.
//
// It prints the counts of operations, acknowledged operations, verified
// facts and injected faults, and the failed calls by operation and code.
// Flags: -chaos.duration, -chaos.writers, -chaos.seed,
// -chaos.fault-interval, -chaos.cleaners, -chaos.cleaner-interval.
//
// TestLinearizableKV and TestLinearizableBranch check linearizability
// with porcupine (github.com/anishathalye/porcupine). Clients record each
// call with its call and return times while the etcd faults above (and,
// for the branch, gravelerd restarts) cycle every -lin.fault-interval;
// each history is checked key by key against a sequential model. A write
// whose outcome is unknown (an ambiguous or timed-out call) is open-ended:
// it may take effect at any time after its call, or never. A failed read
// says nothing and is left out. Values are unique per write, so a value
// names the write that stored it.
//
//   - TestLinearizableKV: Get, Set, SetIf and DeleteIf of etcdkv.Store on a
//     few shared keys, through two stores; a SetIf or DeleteIf uses the
//     predicate of the client's latest Get (often stale). The model is the
//     kv.Store contract, including its relaxation that an ambiguous
//     DeleteIf whose version another deletion ended reports success.
//   - TestLinearizableBranch: staged puts (alone and as one-entry
//     batches, whose fence is read apart from the write), gets, deletes,
//     deletes by prefix and resets (of the key or of it as a prefix) of a
//     few keys of one branch, and commits, over gRPC through two
//     gravelerd replicas. The model is the branch's visible value and
//     head value per key: a commit (placed where it seals) keeps what is
//     visible, and fails with NO_CHANGES only if nothing differs from the
//     head; a reset shows the head again.
//
// A violation is reported at once with the time the history became
// illegal (the shortest illegal prefix, by bisection) and the operations
// around it, then reduced to the operations that take part in it; both are
// also written as porcupine's HTML visualizations, whose paths the test
// prints. Each test prints a LIN-KV or LIN-BRANCH line: operations,
// open-ended writes, dropped reads, faults, result. TestLinModels checks
// the models and the reduction on hand-made histories. Flags:
// -lin.duration, -lin.ops (operations recorded at most, paced over the
// duration), -lin.clients, -lin.keys, -lin.fault-interval,
// -lin.check-timeout; -chaos.seed seeds the workload and faults.
//
// TestStoppedMemberCost measures what one stopped member costs the
// service: four clients stage writes and read them back through two
// gravelerd replicas while, on a fresh cluster each time, the leader is
// frozen with SIGSTOP, a follower is frozen, and the leader is killed,
// each for -stopped.duration (default 10s). A call that fails or takes
// over a second is bad; overlapping bad calls form a window. It prints
// "STOPPED_MEMBER fault=... worst_window_ms=... failed=... slow=...
// total=..." per fault and fails when the worst window exceeds
// -stopped.max-window (default 5s).
//
// TestClusterFaults puts unique keys straight into the cluster while the
// etcd faults cycle, then reads every acknowledged one back.
//
// TestAbandonedAttemptLandsLate sends Sets through an etcdkv.Store whose
// endpoints include a member frozen with SIGSTOP; those whose first
// attempt went there succeed by a second attempt elsewhere, and are then
// overwritten. After the member resumes, every key must still read the
// newer value: the abandoned first attempt must not apply late.
//
// Concurrency: the tests run one after another (none calls t.Parallel);
// each has its own cluster, data directories and loopback ports.
//
// Errors: there is no API to return any. A test fails on what its checker
// finds (a lost acknowledged write, a history that is not linearizable, a
// feed that does not replay, an fsck error, a stopped member's window over
// -stopped.max-window) and when its cluster does not start; a member whose
// reserved port was taken meanwhile makes it start the cluster again, a
// few times.
//
// The package has no non-test code; without the tag it compiles to this
// comment. ./etcdproc, the etcd main the tests build, builds with or
// without it, so that `go vet ./...` and `go build ./...` check it too.
package chaos
