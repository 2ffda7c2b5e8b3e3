package ref

import (
	"errors"
	"fmt"

	"graveler/graveler"
	"graveler/kv"
)

var (
	// ErrUnknownFormat is returned for a stored record whose format version
	// is newer than this code understands (written by a newer release).
	ErrUnknownFormat = fmt.Errorf("ref: unknown record format version: %w", graveler.ErrFailedPrecondition)
	// ErrCorruptRecord is returned for a stored record that does not decode.
	ErrCorruptRecord = fmt.Errorf("ref: corrupt record: %w", graveler.ErrFailedPrecondition)
	// ErrRepositoryCreationRaced is returned when a repository record was
	// replaced or removed while CreateRepository was writing its refs; the
	// half-created incarnation is queued for the cleaner.
	ErrRepositoryCreationRaced = fmt.Errorf("ref: repository changed during creation: %w", graveler.ErrConflict)

	// errStillCounts: a record being retired was made active meanwhile
	// (a create that finished late), so it is no longer retirable.
	errStillCounts = fmt.Errorf("ref: repository record changed: %w", graveler.ErrConflict)
)

// storeErr wraps an error from the kv store with context, adding the
// graveler category a caller (and the gRPC server) can act on.
func storeErr(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	switch {
	case errors.Is(err, kv.ErrAmbiguous):
		return fmt.Errorf("ref: %s: %w: %w", msg, graveler.ErrAmbiguous, err)
	case errors.Is(err, kv.ErrUnavailable), errors.Is(err, kv.ErrQuotaExceeded):
		return fmt.Errorf("ref: %s: %w: %w", msg, graveler.ErrUnavailable, err)
	case errors.Is(err, kv.ErrValueTooLarge), errors.Is(err, kv.ErrKeyTooLarge):
		return fmt.Errorf("ref: %s: %w: %w", msg, graveler.ErrInvalidArgument, err)
	}
	return fmt.Errorf("ref: %s: %w", msg, err)
}
