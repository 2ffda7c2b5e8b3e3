// Package blobtest is the conformance suite for committed.BlobStore: every
// implementation (file, memory and S3 buckets, the disk cache in front of
// any of them) must pass Run unchanged, so callers can rely on the contract
// rather than on one backend's behaviour.
//
// The suite checks round trips of empty, binary and multi-megabyte objects,
// overwrites, ErrBlobNotFound on missing objects, idempotent deletes,
// rejection of names that could escape a namespace (ErrInvalidBlobName),
// isolation between namespaces, concurrent use from many goroutines, that
// a cancelled context fails an operation without side effects, listing by
// prefix across several pages with each object's size and modification
// time, Stat, and Touch (it refreshes the modification time of an object,
// never creates one, and leaves its bytes alone). RunWithOptions takes a
// backend's way to age an object, so Touch is seen to bring an old one up
// to date.
//
// StartFakeS3 runs an S3-compatible server in the test process with a
// clock the test can move, for any package that needs an s3:// store.
//
// Concurrency: Run's cases run one after another, each on a store of its
// own from newStore (the Concurrent case then uses it from many
// goroutines). StartFakeS3 sets the AWS environment through t.Setenv, so
// it cannot be called from a parallel test; the server and its Clock are
// safe for concurrent use.
//
// Errors: none returned. A case that finds the contract broken fails t,
// naming the operation and what it got; StartFakeS3 fails t when it cannot
// create a bucket.
package blobtest
