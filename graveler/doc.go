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
// The reader's fence also guards ListEntries (per page) and
// DiffUncommitted (per chunk), which read again from the branch as it is
// now when a token they read from has left it. A reset of a key or a
// prefix drops entries only from a staging token no commit has sealed,
// and checks that none sealed it meanwhile; otherwise (a commit in
// flight) it stages overrides on top (see resetStaged), so a discarded
// value never comes back when that commit lands.
//
// Change feed: every branch write that is a change of its own says what
// it did (Branch.Change: a commit, a merge or fast-forward, a reset, ...);
// sealing and releasing staging tokens say ChangeNone. Each operation's
// decisive write is marked in the kv.Revisions of its context (kv.Effect,
// done by the RefManager), so a caller learns the revision at which its
// change became visible. A reset of a key or a prefix writes no branch
// record; its last staged write is its revision.
//
// Concurrency: Graveler is safe for concurrent use from any number of
// goroutines and processes; correctness comes from compare-and-swap on the
// branch record, never from a lock.
//
// Errors: every error wraps one category sentinel (ErrNotFound,
// ErrAlreadyExists, ErrConflict, ErrInvalidArgument, ErrFailedPrecondition,
// ErrUnavailable, ErrAmbiguous); test with errors.Is / errors.AsType.
package graveler
