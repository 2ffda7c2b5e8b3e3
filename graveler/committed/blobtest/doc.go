// Package blobtest is the conformance suite for committed.BlobStore: every
// implementation (file, memory and S3 buckets, the disk cache in front of
// any of them) must pass Run unchanged, so callers can rely on the contract
// rather than on one backend's behaviour.
//
// The suite checks round trips of empty, binary and multi-megabyte objects,
// overwrites, ErrBlobNotFound on missing objects, idempotent deletes,
// rejection of names that could escape a namespace (ErrInvalidBlobName),
// isolation between namespaces, concurrent use from many goroutines and
// that a cancelled context fails an operation without side effects.
package blobtest
