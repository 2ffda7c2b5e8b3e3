package committed

import (
	"context"
	"errors"
	"fmt"

	"graveler/graveler"
)

// ErrBlobNotFound: no object under that name in the namespace.
var ErrBlobNotFound = fmt.Errorf("committed: blob %w", graveler.ErrNotFound)

// ErrInvalidBlobName: an object name that could escape its namespace.
var ErrInvalidBlobName = errors.New("committed: invalid blob name")

// BlobStore holds immutable objects under a storage namespace (a URL:
// file:///dir, mem://name or s3://bucket/prefix). Names are relative,
// made of [A-Za-z0-9._-] segments joined by '/', never "..". Objects are
// content-addressed by their callers, so Put of an existing name with the
// same content is harmless. Implementations are safe for concurrent use.
type BlobStore interface {
	// Put stores data under name in ns, replacing any object there.
	Put(ctx context.Context, ns graveler.StorageNamespace, name string, data []byte) error
	// Get returns the object's bytes, or an error wrapping ErrBlobNotFound.
	Get(ctx context.Context, ns graveler.StorageNamespace, name string) ([]byte, error)
	// Exists reports whether the object is stored.
	Exists(ctx context.Context, ns graveler.StorageNamespace, name string) (bool, error)
	// Delete removes the object; deleting a missing object is not an error.
	Delete(ctx context.Context, ns graveler.StorageNamespace, name string) error
	// Close releases open buckets.
	Close() error
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
