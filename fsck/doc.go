// Package fsck checks the consistency of a Graveler installation: the refs
// and staged entries in etcd, the committed objects in the blob store, and
// the health of the etcd cluster itself. Checker.Run makes one pass and
// returns a Report: what was examined, and one Finding per problem, each
// with a kind, a severity, the resource and what to do
// (docs/operations.md, "Checking consistency (fsck)").
//
// # One revision
//
// Every read of Graveler's keys is made at one etcd revision R, fixed by
// the first read, with the etcd client directly (clientv3.WithRev): the
// report describes the store as it was at R, however long the pass takes
// and whatever gravelerd writes meanwhile, so a branch moved during the
// pass is never taken for a dangling one. A revision compacted before
// the pass ends makes it fail (ErrIncomplete); run it again.
//
// The one exception is the list of staging partitions
// (etcdkv.Store.ListPartitions lists at the current revision, one round
// trip per partition, so it runs beside the other checks). A partition it
// lists is judged by what it held at R: one that held keys at R had its
// token written into a branch before its first key (writers learn their
// token from the branch), so if no branch and no work item references it
// at R, its token had been released by then, and a released token is
// never referenced again: the partition is garbage. One whose first key
// came after R is left out.
//
// # Checks
//
//   - every branch and tag points to an existing commit;
//   - every commit's parents exist, its generation is 1 + the largest of
//     its parents' (0 or 1 for a root), and its id is the hash of its
//     content (ref.ComputeCommitID);
//   - every object of the tree a commit reachable from a branch or a tag
//     names exists in the blob store: its root and inner nodes (which are
//     always read and checked, as they name the rest) and its ranges; with
//     Config.Full every range is read and verified too: it hashes to its
//     id, every record decodes, keys are sorted, and every node and range
//     matches its parent's entry (bounds, count, size; package committed's
//     ReadTreeNode, VerifyRange, Matches). Each object is checked once per
//     run, however many commits share it;
//   - staging partitions that no branch (staging or sealed token) and no
//     queued work item references are orphaned: a late writer's keys in a
//     token already handed to the cleaner. Partitions younger than
//     Config.OrphanGrace (by the time in their token's id) are left out,
//     as the cleaner's sweep leaves them;
//   - repository records in initial past the creation timeout, or in
//     deleting for longer than Config.DeletingTimeout;
//   - branches with more sealed tokens than Config.MaxSealedTokens, and
//     staged tombstones per branch (counted in the report, a finding past
//     Config.MaxTombstones);
//   - etcd: alarms, each member's database size against
//     Config.EtcdQuotaBytes, and each member's hash of the key space at R
//     (members that disagree hold different data).
//
// Records that do not decode are findings, never fatal; what they might
// reference is then not called orphaned, as the cleaner does.
//
// # Repair
//
// Read-only unless Config.Repair. Repair does only what is provably safe:
// it queues each orphaned staging partition for the cleaner (the work item
// graveler_deleted/tokens/<token>, written with SetIf(kv.Absent)) after
// reading every branch and work item again at the current revision and
// finding the token still unreferenced. A token is a fresh name that no
// branch ever references again once none does, so the cleaner may drop
// it. Report.Repairs says what was done. Nothing else is ever written.
//
// # Concurrency and cost
//
// A Checker is safe for concurrent use; each Run is independent. Within a
// run, Config.Parallel goroutines read metaranges and as many check
// ranges, and the staging partitions are listed beside the other checks.
// A run holds in memory one repository's commit graph at a time (about
// 200 bytes a commit), the names of every branch token and staging
// partition, and a small summary of each range checked.
//
// # Errors
//
// Run returns an error wrapping ErrIncomplete when it could not check
// everything (etcd unreachable within Config.ConnectTimeout: also
// ErrUnreachable; a read failed; a revision was compacted; a blob could
// not be read for another reason than its absence), together with the
// report of what it did check. Problems found are findings, not errors.
package fsck
