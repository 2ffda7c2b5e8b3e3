// Package kv defines the narrow key/value store that all mutable metadata of
// graveler lives on (seed 004): Get, Set, SetIf, Delete, DeleteIf and Scan
// on (partition, key) pairs, plus Close.
//
// A partition is a namespace: (partition, key) is unique, key alone is not,
// and a Scan never crosses into another partition. Partition names are built
// only by package keys; see ValidatePartition for the characters allowed.
// Keys are arbitrary non-empty bytes, ordered bytewise.
//
// Concurrency: every Store method is safe to call from many goroutines. The
// store gives read-after-write consistency per key and compare-and-swap
// through SetIf and DeleteIf; it gives no multi-key transactions.
//
// A write that returned is done: whatever the answer (success, failure,
// ErrAmbiguous, the context's error), no attempt of it applies afterwards.
// The memory store has no attempts; the etcd store fences an attempt whose
// answer was lost before it answers (package etcdkv, "write fence"), and
// its doc names the few windows the fence cannot close: etcd unreachable
// when the fence must move, a process that dies (until its lease
// expires), and etcd out of space.
//
// Errors: ErrNotFound, ErrPredicateFailed, ErrAmbiguous (a write that may or
// may not have been applied), ErrKeyTooLarge, ErrValueTooLarge, ErrInvalidKey,
// ErrInvalidPartition, ErrTooManyOps, ErrUnavailable, ErrQuotaExceeded and ErrClosed, always
// wrapped with context; test them with errors.Is. Context cancellation is
// returned as (a wrapping of) the context's error.
//
// Optional abilities are separate interfaces probed at run time, as
// database/sql/driver does: PartitionDropper, SetReader, MultiGetter.
//
// Revisions: every store notes the revision of each write it applied into
// the Revisions of the write's context (WithRevisions, NoteWrite), and an
// operation marks its decisive write (Effect), so a request can answer
// with the revision at which its change became visible.
package kv
