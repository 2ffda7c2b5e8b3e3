// Package gravelertest builds a complete Graveler service for tests and
// benchmarks: refs and staging on a given kv.Store (memory or etcd),
// committed data in an in-memory blob store; a settable Clock for the
// configs' Now; and MarkDeleting, which leaves a repository as a delete
// interrupted after its first step. Safe to use from parallel tests; each
// call builds an independent service.
//
// Errors: none returned. New cannot fail; MarkDeleting fails t when the
// repository record cannot be read, decoded or written; the service New
// builds returns graveler's errors.
package gravelertest

import (
	"fmt"
	"sync/atomic"
	"testing"

	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/gcfence"
	"graveler/graveler/ref"
	"graveler/graveler/staging"
	"graveler/kv"
)

// Options tune New. Zero values take the packages' defaults.
type Options struct {
	Ref       ref.Config
	Staging   staging.Config
	Committed committed.Config
	Graveler  graveler.Config
	// Blobs is the blob store for committed data (nil: a fresh in-memory
	// one, closed by t.Cleanup). Services given the same Blobs and kv store
	// behave like gravelerd replicas sharing one etcd and one bucket.
	Blobs committed.BlobStore
	// GCFence wraps the committed manager as gravelerd does (gcfence.Wrap),
	// so tests of the garbage collector see commits fenced against its
	// sweeps.
	GCFence bool
	// Fence tunes that fence.
	Fence gcfence.Config
}

var namespaces atomic.Int64

// Namespace returns a fresh mem:// storage namespace.
func Namespace() graveler.StorageNamespace {
	return graveler.StorageNamespace(fmt.Sprintf("mem://gravelertest-%d", namespaces.Add(1)))
}

// New returns a Graveler on store; a blob store New makes is closed by
// t.Cleanup (one in opts.Blobs stays the caller's).
func New(t testing.TB, store kv.Store, opts Options) *graveler.Graveler {
	t.Helper()
	blobs := opts.Blobs
	if blobs == nil {
		own := committed.NewBucketStore(committed.BucketConfig{})
		t.Cleanup(func() { own.Close() })
		blobs = own
	}
	var cm graveler.CommittedManager = committed.NewManager(blobs, opts.Committed)
	if opts.GCFence {
		cm = gcfence.Wrap(cm, blobs, gcfence.New(store, opts.Fence))
	}
	return graveler.New(
		ref.New(store, opts.Ref),
		staging.New(store, opts.Staging),
		cm,
		opts.Graveler,
	)
}
