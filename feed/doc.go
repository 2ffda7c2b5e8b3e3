// Package feed is the change feed of refs on etcd: it turns etcd's history
// of the repository records and repository partitions into ref events
// (repository created and deleted, branch created, moved and deleted, tag
// created and deleted), in etcd revision order, for WatchRefs
// (docs/change-feed.md).
//
// # What is watched
//
// One etcd watch covers [<root>/graveler/repos/, <root>/repo;): the
// repository records, the cleaner's work list (graveler_deleted, ignored)
// and every repository partition (repo:<repo>-<uid>/), and no staging
// partition (staging:..., the high-traffic entries). It asks for previous
// values, so a write tells what it replaced.
//
// # Events
//
// A decoder keeps, per repository name, the incarnation (unique id) and
// state its record names, read at the revision it starts from and advanced
// event by event. Only the partition of a repository's current active
// incarnation produces events; writes while a repository is initial, an
// abandoned creation, writes of a deletion, and the cleaner dropping a
// deleted incarnation's partition produce nothing.
//
//   - RepositoryCreated: a record becomes active. It carries the record
//     and, unless the repository is bare, the head of its default branch
//     read at that revision (the branch written while the record was
//     initial is not announced separately).
//   - RepositoryDeleted: the first write that takes an active record out of
//     active (deleting), removes it, or replaces its incarnation; a record
//     that no longer decodes counts as removed. Its refs are gone and no
//     event follows for them.
//   - BranchCreated: a branch record written where none was (etcd version
//     1); the cause is the record's graveler.BranchChange (CREATE, RESTORE;
//     none for a record written by an older server).
//   - BranchMoved: a rewrite whose BranchChange is not ChangeNone, with the
//     old and new heads and the cause (RESET has equal heads); or a rewrite
//     with ChangeNone whose head changed (an older server's), with no
//     cause. A rewrite with ChangeNone and the same head (sealing or
//     releasing staging tokens) is no event. For COMMIT, MERGE, REVERT and
//     CHERRY_PICK the event carries the new head's commit record, taken
//     from the watch (commit records are written before the move that
//     names them) or read from etcd, through a bounded LRU (commit records
//     are immutable).
//   - BranchDeleted: with the head it had.
//   - TagCreated, TagDeleted: with the commit. Tags are never rewritten;
//     a rewrite to another commit reads as a deletion and a creation.
//
// Undecodable records are logged and skipped. Every event carries the etcd
// revision of its write; all the events of one revision (one etcd
// transaction) come in one message, and its ResumeRevision is that
// revision.
//
// # Subscriptions
//
// Subscribe starts after a revision: StartRevision, or etcd's current
// revision for 0. Next then returns exactly the changes after it, in
// scope (one repository, or all; a repository that does not exist yet is
// fine: its changes come once it does), with no gap and no duplicate, so
// a subscriber that resumes with the last ResumeRevision it got misses and
// repeats nothing. With InitialState, Next first returns the refs that
// exist at one revision R (RepositoryExists, BranchExists, TagExists), in
// pages of Config.PageSize read at R (bounded memory: a page of records at
// a time), each with ResumeRevision 0, then KindInitialEnd at R, then the
// changes after R. A start revision after etcd's current revision is a
// *FutureRevisionError.
//
// With nothing to deliver, Next returns a KindBookmark at least every
// ProgressInterval (default 10s, within [100ms, 10min]). Its revision is
// one up to which every change in scope was delivered: the subscription's
// last revision, moved on by revisions with nothing in scope and by etcd's
// progress notifications (requested half way through the interval on the
// watch that feeds the subscription), never by a revision whose events
// might not have arrived yet.
//
// # Fan-out
//
// The hub is one etcd watch per Feed, shared by every subscription. It
// decodes each revision once into a bounded ring (Config.RingSize
// revisions with changes, Config.RingEvents events) that holds every
// change after a revision (the ring's start); subscriptions read it with a
// cursor. A subscription that starts within the ring is served from
// memory. One that starts before it catches up: a watch of its own from
// its start, decoded with a state read at its start, buffered up to
// Config.CatchUpBuffer revisions (when the subscriber lags, the catch-up
// stops its watch and starts it again from where it was, so a slow
// subscriber costs no more memory than that). Whenever the ring holds
// every change after the revision the catch-up reached (an event past it,
// or a progress notification once the catch-up is synced), it offers the
// subscription to join the ring there; the subscription takes the offer
// when it reads it, if the ring still holds what it needs, and the
// catch-up ends. Revisions at or below what a subscription delivered are
// always skipped, so no path repeats a change.
//
// A subscription whose unread changes leave the ring is too slow: Next
// fails with *TooSlowError (ErrTooSlow) naming the revision to resume
// from; the changes still in the ring are not delivered.
//
// # Compaction and failures
//
// A start revision that is neither in the ring nor still in etcd's
// history (below its compaction revision) is a *CompactedError
// (ErrCompacted) naming the compaction revision: start again with
// InitialState. The compaction revision itself can be served. If the hub
// itself falls behind etcd's compaction (its watch broke and could not
// resume in time), every subscription reading the ring fails with a
// *CompactedError and the hub starts afresh from the current revision.
//
// A hub or catch-up watch that breaks (a lost leader: the watches require
// one; a member restart; a closed channel) is re-established from the last
// revision it saw plus one, with the decoder state it had: subscribers see
// nothing of it. Reads the decoders need (a default branch's head, a
// commit record) are retried while etcd is unreachable.
//
// Close ends every subscription with ErrClosed (the server maps it to
// UNAVAILABLE: clients resume elsewhere), stops the hub and the catch-ups,
// and waits for them.
//
// # Metrics
//
// graveler_feed_subscribers, graveler_feed_events_delivered_total,
// graveler_feed_catchups_total, graveler_feed_slow_consumer_closes_total,
// graveler_feed_watch_restarts_total{reason="error"|"compacted"} and
// graveler_feed_revision (how far the hub has got).
//
// # Concurrency and errors
//
// A Feed is safe for concurrent use. A Subscription's Next must be called
// from one goroutine at a time; Close may be called from any. Errors:
// ErrInvalidRequest (wrapping graveler.ErrInvalidArgument), ErrClosed,
// *CompactedError, *FutureRevisionError, *TooSlowError, and etcd's
// failures wrapped with kv.ErrUnavailable. Every error of Next but its
// context's ends the subscription.
package feed
