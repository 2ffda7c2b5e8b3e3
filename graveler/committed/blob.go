package committed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"graveler/graveler"
)

// ErrBlobNotFound: no object under that name in the namespace.
var ErrBlobNotFound = fmt.Errorf("committed: blob %w", graveler.ErrNotFound)

// ErrInvalidBlobName: an object name that could escape its namespace.
var ErrInvalidBlobName = errors.New("committed: invalid blob name")

// ErrShortBlob: a GetRange past the end of the object. Objects are never
// modified, so a reader that expected bytes there holds a damaged
// reference, or the store a damaged object.
var ErrShortBlob = errors.New("committed: object shorter than the range asked for")

// ErrInvalidBlobRange: a GetRange with a negative offset or a length < 1.
var ErrInvalidBlobRange = errors.New("committed: invalid blob range")

// checkBlobRange validates GetRange's arguments.
func checkBlobRange(name string, offset, length int64) error {
	if err := ValidateBlobName(name); err != nil {
		return err
	}
	if offset < 0 || length < 1 || offset > math.MaxInt64-length {
		return fmt.Errorf("%w: %q at %d+%d", ErrInvalidBlobRange, name, offset, length)
	}
	return nil
}

// BlobStore holds immutable objects under a storage namespace (a URL:
// file:///dir, mem://name or s3://bucket/prefix). Names are relative,
// made of [A-Za-z0-9._-] segments joined by '/', never "..". Objects are
// content-addressed by their callers, so Put of an existing name with the
// same content is harmless. Every object has a modification time, set by
// Put and Touch, by which a collector judges its age. Implementations are
// safe for concurrent use.
type BlobStore interface {
	// Put stores data under name in ns, replacing any object there.
	Put(ctx context.Context, ns graveler.StorageNamespace, name string, data []byte) error
	// Get returns the object's bytes, or an error wrapping ErrBlobNotFound.
	Get(ctx context.Context, ns graveler.StorageNamespace, name string) ([]byte, error)
	// GetRange returns length bytes of the object from offset: an error
	// wrapping ErrBlobNotFound when it is missing, one wrapping
	// ErrShortBlob when it ends before offset+length, and
	// ErrInvalidBlobRange for a negative offset or a length < 1.
	GetRange(ctx context.Context, ns graveler.StorageNamespace, name string, offset, length int64) ([]byte, error)
	// Exists reports whether the object is stored.
	Exists(ctx context.Context, ns graveler.StorageNamespace, name string) (bool, error)
	// Delete removes the object; deleting a missing object is not an error.
	Delete(ctx context.Context, ns graveler.StorageNamespace, name string) error
	// List calls fn with successive pages of the objects whose names start
	// with prefix ("" lists the whole namespace), each object once, in no
	// promised order. A page is fn's only during the call. An error from fn
	// ends the listing and is returned. prefix is a name cut anywhere (it
	// may end with '/'); one that could leave the namespace is
	// ErrInvalidBlobName. Objects written or deleted during a listing may
	// or may not be listed; every other object is.
	List(ctx context.Context, ns graveler.StorageNamespace, prefix string, fn func(page []BlobInfo) error) error
	// Stat describes the object, or returns an error wrapping ErrBlobNotFound.
	Stat(ctx context.Context, ns graveler.StorageNamespace, name string) (BlobInfo, error)
	// Touch sets the object's modification time to now, leaving its bytes
	// as they are; an error wrapping ErrBlobNotFound when it is missing
	// (Touch never creates an object).
	Touch(ctx context.Context, ns graveler.StorageNamespace, name string) error
	// BeginWrites returns a Syncer for writes to ns that follow: a writer
	// takes one before its first Put or Touch and syncs it before it
	// hands out anything naming what it wrote (a tree's ID, which a commit
	// record may name at once). The caller closes it.
	BeginWrites(ctx context.Context, ns graveler.StorageNamespace) (Syncer, error)
	// Close releases open buckets.
	Close() error
}

// Syncer makes a writer's objects durable (BlobStore.BeginWrites).
type Syncer interface {
	// Sync makes every object Put or Touched in the namespace before the
	// call durable: once it returns nil, a crash of the machine loses none
	// of them. It fails if the store failed to persist data of the
	// namespace since the Syncer was taken, even where another Syncer's
	// Sync met the failure first. Stores that persist each Put before it
	// returns (S3) and stores that persist nothing (mem://) have nothing to
	// do.
	Sync(ctx context.Context) error
	// Close releases the Syncer; it does not sync.
	Close() error
}

// noSync is the Syncer of stores with nothing to sync.
type noSync struct{}

func (noSync) Sync(ctx context.Context) error { return ctx.Err() }
func (noSync) Close() error                   { return nil }

// BlobInfo describes a stored object.
type BlobInfo struct {
	// Name is relative to the namespace, as given to Put.
	Name string
	// Size in bytes.
	Size int64
	// ModTime is when the object was last written or touched, by the
	// store's clock (an S3 server's, to the second).
	ModTime time.Time
}

// ValidateBlobPrefix checks a List prefix: "" or a valid name cut
// anywhere, so that it can only select objects inside the namespace.
func ValidateBlobPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	// Completing a cut segment ("ran" of "ranges", or "a/" before the
	// next one) must give a valid name.
	if err := ValidateBlobName(prefix + "x"); err != nil {
		return fmt.Errorf("%w: prefix %q", ErrInvalidBlobName, prefix)
	}
	return nil
}

// ValidateBlobName rejects names that could leave their namespace.
func ValidateBlobName(name string) error {
	if name == "" || len(name) > 1024 {
		return fmt.Errorf("%w: %q", ErrInvalidBlobName, name)
	}
	seg := 0
	for i := 0; i <= len(name); i++ {
		if i == len(name) || name[i] == '/' {
			if s := name[seg:i]; s == "" || s == "." || s == ".." {
				return fmt.Errorf("%w: %q", ErrInvalidBlobName, name)
			}
			seg = i + 1
			continue
		}
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %q", ErrInvalidBlobName, name)
		}
	}
	return nil
}
