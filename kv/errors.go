package kv

import "errors"

var (
	// ErrNotFound: the key does not exist in the partition.
	ErrNotFound = errors.New("kv: not found")
	// ErrPredicateFailed: SetIf found a different version than the predicate named.
	ErrPredicateFailed = errors.New("kv: predicate failed")
	// ErrAmbiguous: a write was sent but its outcome is unknown; it may or may
	// not have been applied. Callers must re-read before deciding.
	ErrAmbiguous = errors.New("kv: outcome unknown, the write may or may not have been applied")
	// ErrKeyTooLarge: partition plus key exceed the store's key size limit.
	ErrKeyTooLarge = errors.New("kv: key too large")
	// ErrValueTooLarge: the value exceeds the store's value size limit.
	ErrValueTooLarge = errors.New("kv: value too large")
	// ErrTooManyOps: one request names more operations than the store
	// takes at once (MaxSetAndReadOps).
	ErrTooManyOps = errors.New("kv: too many operations in one request")
	// ErrInvalidKey: the key is empty.
	ErrInvalidKey = errors.New("kv: invalid key")
	// ErrInvalidPartition: the partition name is empty or has characters
	// that could break the partition's prefix.
	ErrInvalidPartition = errors.New("kv: invalid partition")
	// ErrUnavailable: the store could not be reached; nothing was applied.
	ErrUnavailable = errors.New("kv: store unavailable")
	// ErrQuotaExceeded: the store refuses writes because it is out of space.
	ErrQuotaExceeded = errors.New("kv: store quota exceeded")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("kv: store closed")
)
