package kv

import (
	"fmt"
)

// Limits bound what a Store accepts, so that an oversized record fails
// before it is sent with an error naming the size and the limit.
type Limits struct {
	// MaxKeySize bounds len(partition)+len(key).
	MaxKeySize int
	// MaxValueSize bounds len(value).
	MaxValueSize int
}

// DefaultLimits fit comfortably inside etcd's default 1.5 MiB request limit
// with room for the transaction's framing and a guarded compare.
var DefaultLimits = Limits{
	MaxKeySize:   4 << 10,
	MaxValueSize: 1 << 20,
}

// ValidatePartition checks that a partition name is non-empty, made of
// [A-Za-z0-9._-] segments separated by single '/', with no leading or
// trailing '/'. These names can never break the prefix that a store builds
// from them.
func ValidatePartition(partition []byte) error {
	if len(partition) == 0 {
		return fmt.Errorf("%w: empty", ErrInvalidPartition)
	}
	prevSlash := true
	for _, c := range partition {
		switch {
		case c == '/':
			if prevSlash {
				return fmt.Errorf("%w: %q", ErrInvalidPartition, partition)
			}
			prevSlash = true
			continue
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return fmt.Errorf("%w: %q has byte %#x", ErrInvalidPartition, partition, c)
		}
		prevSlash = false
	}
	if prevSlash {
		return fmt.Errorf("%w: %q ends with '/'", ErrInvalidPartition, partition)
	}
	return nil
}

// CheckKey validates partition and key against l.
func (l Limits) CheckKey(partition, key []byte) error {
	if err := ValidatePartition(partition); err != nil {
		return err
	}
	if len(key) == 0 {
		return fmt.Errorf("%w: empty key in partition %q", ErrInvalidKey, partition)
	}
	if size := len(partition) + len(key); l.MaxKeySize > 0 && size > l.MaxKeySize {
		return fmt.Errorf("%w: partition and key are %d bytes, limit %d", ErrKeyTooLarge, size, l.MaxKeySize)
	}
	return nil
}

// CheckWrite validates a key and value against l.
func (l Limits) CheckWrite(partition, key, value []byte) error {
	if err := l.CheckKey(partition, key); err != nil {
		return err
	}
	if l.MaxValueSize > 0 && len(value) > l.MaxValueSize {
		return fmt.Errorf("%w: value is %d bytes, limit %d (key %q)", ErrValueTooLarge, len(value), l.MaxValueSize, key)
	}
	return nil
}
