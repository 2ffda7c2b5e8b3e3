package staging

import (
	"errors"
	"fmt"

	"graveler/graveler"
	"graveler/kv"
)

var (
	// ErrUnknownFormat is returned for a stored record whose format version
	// is newer than this code understands (written by a newer release).
	ErrUnknownFormat = fmt.Errorf("staging: unknown record format version: %w", graveler.ErrFailedPrecondition)
	// ErrCorruptRecord is returned for a stored record that does not decode.
	ErrCorruptRecord = fmt.Errorf("staging: corrupt record: %w", graveler.ErrFailedPrecondition)
	// ErrInvalidStagingToken is returned for a token that cannot name a
	// partition (see keys.ValidateName).
	ErrInvalidStagingToken = fmt.Errorf("staging: staging token: %w", graveler.ErrInvalidArgument)
)

// storeErr wraps an error from the kv store with context, adding the
// graveler category a caller (and the gRPC server) can act on. Context
// errors pass through wrapped, so errors.Is(err, context.Canceled) holds.
func storeErr(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	switch {
	case errors.Is(err, kv.ErrAmbiguous):
		return fmt.Errorf("staging: %s: %w: %w", msg, graveler.ErrAmbiguous, err)
	case errors.Is(err, kv.ErrUnavailable), errors.Is(err, kv.ErrQuotaExceeded):
		return fmt.Errorf("staging: %s: %w: %w", msg, graveler.ErrUnavailable, err)
	case errors.Is(err, kv.ErrValueTooLarge), errors.Is(err, kv.ErrKeyTooLarge):
		return fmt.Errorf("staging: %s: %w: %w", msg, graveler.ErrInvalidArgument, err)
	}
	return fmt.Errorf("staging: %s: %w", msg, err)
}

// qkey quotes an entry key for an error message (graveler.Echo).
func qkey(k []byte) string { return graveler.Echo(k) }
