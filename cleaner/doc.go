// Package cleaner reclaims what repository deletes, branch deletes and
// commits leave behind on the kv store and in the blob store
// (docs/architecture.md, "Cleaner"):
//
//  1. Records: a repository record that no longer counts (deleting, or
//     initial past the creation timeout) is retired through ref, which queues
//     it under graveler_deleted/repos and removes the record.
//  2. graveler_deleted/repos/<repo>/<unique id>: collect the staging and
//     sealed tokens of the incarnation's branches, drop those staging
//     partitions, drop the repository partition, empty its storage
//     namespace (Config.Blobs: every object there, the marker
//     graveler.NamespaceMarker last and only if it names this
//     incarnation) once its claim is marked reclaiming, release the claim,
//     then remove the entry.
//  3. graveler_deleted/tokens/<token>: drop the staging partition, then
//     remove the entry.
//  4. With Config.Sweep, an orphan sweep: repository and staging partitions
//     that no record, branch or work item references (a late writer's keys
//     in a token already dropped, the partition of a create that crashed
//     before its record could be queued) are dropped too.
//
// Every step is idempotent and an entry is removed only after what it names
// is gone, so a run that stops anywhere (crash, Config.Timeout,
// Config.MaxKeys) is finished by the next one; a failure on one entry is
// counted and the run moves on to the next. Records read earlier are
// removed only at the version read (kv.Store.DeleteIf): a work item queued
// again while its partitions were being dropped (a create that wrote to
// the partition late, then queued it) survives for the next run, and a
// repository record retired through ref never removes a newer incarnation
// that took the name meanwhile.
//
// An undecodable repository or branch record does not stop a run: it is
// logged with its key, counted in graveler_cleaner_skipped_records_total
// and Summary.SkippedRecords (once per run), and passed over. Whatever it
// may reference is kept: for an undecodable repository record, every work
// item and partition of that name; for an undecodable branch of a live
// repository, every queued or orphan token minted for that repository
// ("<repo>.<id>") and every token of another shape. A branch of a deleted
// incarnation that does not decode is dropped with its partition; its
// tokens are left to the sweep.
//
// Safety alongside gravelerd: nothing reachable from a live repository is
// dropped. Before draining, a run reads the work list and
// only then the live tokens (the staging and sealed tokens of every branch
// of every active or still-creating repository); a queued token that is
// still live (a branch delete that stopped between queueing its tokens and
// removing the branch) is skipped and retried next run. Tokens are fresh
// unique names that never become referenced again once unreferenced,
// so a token found unreferenced after the work list was read stays so.
//
// Passes must not overlap (one cleaner at a time: a CronJob that forbids
// concurrent runs, or Run's leader election). Emptying a deleted
// repository's storage namespace checks its claim once, before the
// listing, not before each delete: two passes reclaiming one repository
// can both find the claim theirs, and while the second still deletes, the
// first releases the namespace and a new repository claims it and stores
// objects there, which the second deletes. Everything else a pass does is
// safe beside another pass.
//
// The sweep lists partitions first, then reads records, then the work list,
// then branches: a partition that holds keys was referenced before it was
// listed (records are written before their partition, branches before
// writers learn their token), so one found unreferenced afterwards is
// garbage. The exception is a reset's override token, written before the
// branch update that names it; gravelerd sends that update within
// graveler.Config.OverridePublishWithin (5 minutes) of the token's birth
// or never, so the grace below covers it. As a second guard against
// in-flight work the sweep honours a
// grace period (Config.SweepGrace): a staging token ("<repo>.<id>") or
// unique id whose id carries its creation time (a UUIDv7, as ref.NewID
// makes, or a ULID, as earlier versions made; ref.IDTime) is reclaimed
// only when that time is older than the grace; any other name is reclaimed
// only when the same process saw it unreferenced in two passes at least
// the grace apart (in --once mode such partitions are therefore never
// swept).
//
// Garbage collection (Config.GC, after the reclaim of RunOnce, at most
// once per GCConfig.Interval): the committed objects (ranges and
// metaranges under committed.RangesPrefix and MetaRangesPrefix; nothing
// else is ever deleted) that no commit references. The mark notes the
// time, then reads every repository record, namespace claim and commit
// record, on etcd at one revision; every commit of every live (active or
// initial) repository is a root. A namespace a deleted repository still
// holds (its record deleting, or its claim not yet released) is left to
// its reclaim, and one of a repository with no branch (being created, or
// bare while RestoreRefs loads its commits) is left alone. Each namespace is swept on its own: read every metarange
// its commits reference, list its objects, and delete those neither
// referenced nor modified within GCConfig.Grace of the mark's time (the
// writer's side of that rule is in committed's package doc), each after
// one more Stat, so that an object stored again meanwhile is kept. That
// Stat and the delete run under a sweep record (package gcfence) written
// before the namespace's first delete, kept ahead of its deadline while
// deleting and marked done at the end, so a commit that stores the object
// again between them learns of it and fails retryably instead of
// referencing a deleted object; a collection never deletes once its
// record's deadline is near, and skips a namespace another collection is
// sweeping. An
// undecodable repository record or commit record, or a failed read of the
// records, aborts the whole collection before anything is deleted; any
// failed read in a namespace (a metarange missing or unreadable, a
// listing, a Stat) ends that namespace's sweep, counted in Summary.Errors;
// nothing unread is ever taken for unreferenced. Deletes are bounded by
// GCConfig.DeleteRate. Summary.GC says what was marked, listed, deleted
// and kept young; graveler_gc_* metrics count the same.
//
// Orphan discovery needs more than kv.Store: a PartitionLister, probed on
// the store or given in Config.Lister. *etcdkv.Store is one (keys-only
// ranges that skip from one partition to the next; NewEtcdLister makes one
// from a client and a root prefix); NewMemoryLister lists a
// kv.MemoryStore's partitions.
//
// Modes: RunOnce does one bounded pass and returns a Summary (what was
// reclaimed, or with Config.DryRun what would be, counted the same way and
// logged as "would reclaim"); a pass cut short by Config.MaxKeys or
// Config.Timeout is Summary.Incomplete, and Summary.StoppedBy says which.
// Run repeats it every Config.Interval while this process leads, through
// an Elector (NewEtcdElector: go.etcd.io/etcd/client/v3/concurrency).
//
// Out of space (etcd's NOSPACE alarm: only reads and deletes are served):
// the drops and work-item removals are deletes, so a pass still frees
// space. Token items are reclaimed whole; a deleted repository's
// partitions are dropped, but marking its namespace claim reclaiming is a
// write, so its namespace, claim and work item wait for the next pass
// after the alarm ends (a failure in Summary that says so). Retiring a
// record and the GC's bookkeeping fail the same way. The election needs a
// lease, which etcd refuses then, so Run makes its passes without leading
// (EtcdElector reports kv.ErrQuotaExceeded). Passes of several replicas
// may then overlap, which is safe while etcd refuses writes, since no
// create can claim a released namespace; an overlap that outlasts the
// alarm is not.
//
// Concurrency: a Cleaner's methods may be called from several goroutines
// (its state is locked), but its passes, like those of separate Cleaners,
// must not overlap (above); Run makes one at a time. New starts no
// goroutines. The store and Config.Blobs stay owned by the caller.
//
// Errors: RunOnce returns an error (wrapping ErrRunFailed) when a pass could
// not read what it needs to decide safely (a failed scan of the records,
// the work list, the namespace claims or live tokens); failures on single
// entries are counted in Summary.Errors and described in Summary.Failures,
// and the pass continues.
package cleaner
