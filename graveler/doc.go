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
// Concurrency: Graveler is safe for concurrent use from any number of
// goroutines and processes; correctness comes from compare-and-swap on the
// branch record, never from a lock.
//
// Errors: every error wraps one category sentinel (ErrNotFound,
// ErrAlreadyExists, ErrConflict, ErrInvalidArgument, ErrFailedPrecondition,
// ErrUnavailable, ErrAmbiguous); test with errors.Is / errors.AsType.
package graveler
