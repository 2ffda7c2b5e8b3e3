// Package graveler holds the domain of a Git-like versioning engine for
// data-lake metadata: typed ids, records, validation, errors, the one pull
// Iterator, the interfaces of its three stores (RefManager, StagingManager,
// CommittedManager, owned here by their consumer), and the Graveler service
// that composes them into seed 004's lock-free writer, reader and committer
// flows.
//
// Dependencies: graveler/ref, graveler/staging and graveler/committed import
// this package for its types and implement its interfaces; a main wires them
// together with New. graveler never imports a store implementation.
//
// Fences: the writer's and the reader's fence (seed 004) read the branch
// record after the write, or together with the entries read. When the
// stores offer it (BranchFencer with FencedStager or FencedReader: kv's
// SetReader and MultiGetter, as on etcd), that read is part of the same
// kv request, at the write's or the read's own revision, so a staged write
// or a Get costs one round trip; Config.SeparateFenceRead keeps a separate,
// amortized branch read.
//
// Grouped reads (readgroup.go): Gets of one branch that arrive while such
// a transaction is in flight share the next one, which reads every key
// they ask for with the branch record, and is every one's fence; a lone
// Get never waits, and one whose caller gives up is answered at once
// without failing the others (Config.UngroupedReads turns this off). A Get
// of a commit, a tag or a "~N" ref reads committed data only: its commit
// records come from the RefManager's commit cache, and its repository
// check runs beside the ref's resolution.
//
// The reader's fence also guards ListEntries (per page) and
// DiffUncommitted (per chunk), which read again from the branch as it is
// now when a token they read from has left it. A reset of a key or a
// prefix drops entries only from a staging token no commit has sealed,
// and checks that none sealed it meanwhile; otherwise (a commit in
// flight) it stages overrides on top (see resetStaged), so a discarded
// value never comes back when that commit lands.
//
// Range tombstones: DeletePrefix stages one record deleting every key under
// a prefix (RangeStager). Readers hide the keys of older tokens and of the
// head under a newer token's prefixes by seeking past them, so a deleted
// prefix costs a listing one seek; a commit and DiffUncommitted turn it
// into one delete per key of the tree under the prefix. A listing page
// reads at most Config.ListPageBudget stored records: where per-key
// tombstones use that up, ListEntriesPage returns a short (even empty)
// page with a place to resume. Records a token holds but never returns
// (entries under a reset range, reset records) count against the budget
// but are passed over within one step of its iterator, so a page can
// overrun the budget by one run of them; there are never more of them
// than entries the token staged.
//
// Change feed: every branch write that is a change of its own says what
// it did (Branch.Change: a commit, a merge or fast-forward, a reset, ...);
// sealing and releasing staging tokens say ChangeNone. Each operation's
// decisive write is marked in the kv.Revisions of its context (kv.Effect,
// done by the RefManager), so a caller learns the revision at which its
// change became visible. A reset of a key or a prefix writes no branch
// record; its last staged write is its revision.
//
// Commit pacing: a commit reads its staged entries at a rate that a
// controller adjusts by the latency of the staged writes this Graveler
// serves (pace.go, Config.CommitPacing): full speed when nobody writes,
// slower when the writers' latency rises above its level with no commit
// reading; Config.CommitReadRate bounds it. The writes of another replica
// are not seen.
//
// Concurrency: Graveler is safe for concurrent use from any number of
// goroutines and processes; correctness comes from compare-and-swap on the
// branch record, never from a lock.
//
// Errors: every error wraps one category sentinel (ErrNotFound,
// ErrAlreadyExists, ErrConflict, ErrInvalidArgument, ErrFailedPrecondition,
// ErrUnavailable, ErrAmbiguous, ErrResourceExhausted); test with errors.Is / errors.AsType.
package graveler
