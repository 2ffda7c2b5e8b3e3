package kv

import (
	"context"
	"fmt"
)

// MultiGetter is an optional ability: read several keys, of any
// partitions, at one instant and in one round trip (on etcd: one
// read-only transaction, linearizable, at a single revision). A reader
// that reads a branch record together with the entries it names sees
// them consistent with each other, which is seed 004's reader fence
// without a second read.
//
// The result has one Entry per read, in order, as for SetReader; at most
// MaxSetAndReadOps reads.
type MultiGetter interface {
	GetMany(ctx context.Context, reads []KeyRef) ([]Entry, error)
}

// GetMany reads reads through s's MultiGetter when it has one, otherwise
// by one Get per read, in order: the reads are then not at one instant,
// and callers that need one must check for the ability.
func GetMany(ctx context.Context, s Store, reads []KeyRef) ([]Entry, error) {
	if err := CheckGetMany(reads); err != nil {
		return nil, err
	}
	if mg, ok := s.(MultiGetter); ok {
		return mg.GetMany(ctx, reads)
	}
	return getAll(ctx, s, reads)
}

// CheckGetMany checks the shape MultiGetter requires: at least one read and
// at most MaxSetAndReadOps.
func CheckGetMany(reads []KeyRef) error {
	if len(reads) == 0 {
		return fmt.Errorf("%w: get many with no key", ErrInvalidKey)
	}
	if len(reads) > MaxSetAndReadOps {
		return fmt.Errorf("%w: get many of %d keys, limit %d", ErrTooManyOps, len(reads), MaxSetAndReadOps)
	}
	return nil
}
