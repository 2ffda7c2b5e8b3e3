package kv

import (
	"context"
	"errors"
	"fmt"
)

// KeyRef names one key of one partition.
type KeyRef struct {
	Partition []byte
	Key       []byte
}

// Write is one key to set to Value.
type Write struct {
	Partition []byte
	Key       []byte
	Value     []byte
}

// MaxSetAndReadOps bounds the writes plus reads of one SetAndRead: etcd's
// default --max-txn-ops, less one for the compare (and the Else read)
// that the etcd store adds to every write for its write fence.
const MaxSetAndReadOps = 127

// SetReader is an optional ability: write keys, then read others, in one
// round trip. Every read observes the store at an instant no earlier than
// all the writes took effect (on etcd: the same revision, in one
// transaction). That is exactly what a writer needs to learn whether its
// write came before or after a concurrent change of another key, which is
// seed 004's writer fence; doing both in one request saves a round trip,
// and many writers' writes can share it.
//
// The writes must name distinct keys, and writes plus reads may number
// at most MaxSetAndReadOps. The result has one Entry per read, in order:
// Key is the read's key, Value and Predicate its value and version, or nil
// and Absent when the key does not exist. On error some writes may have
// been applied (on etcd: all or none); ErrAmbiguous when unknown.
type SetReader interface {
	SetAndRead(ctx context.Context, writes []Write, reads []KeyRef) ([]Entry, error)
}

// SetAndRead writes writes and reads reads after them, through s's
// SetReader when it has one, otherwise by a Set per write followed by a
// Get per read: the reads then come later than the writes, which keeps
// the guarantee.
func SetAndRead(ctx context.Context, s Store, writes []Write, reads []KeyRef) ([]Entry, error) {
	if sr, ok := s.(SetReader); ok {
		return sr.SetAndRead(ctx, writes, reads)
	}
	if err := CheckSetAndRead(writes, reads); err != nil {
		return nil, err
	}
	for _, w := range writes {
		if err := s.Set(ctx, w.Partition, w.Key, w.Value); err != nil {
			return nil, err
		}
	}
	return getAll(ctx, s, reads)
}

// CheckSetAndRead checks the shape SetReader requires (the keys and values
// themselves are checked by the store's limits): at least one write,
// distinct write keys, and at most MaxSetAndReadOps operations.
func CheckSetAndRead(writes []Write, reads []KeyRef) error {
	if len(writes) == 0 {
		return fmt.Errorf("%w: set and read with no write", ErrInvalidKey)
	}
	if n := len(writes) + len(reads); n > MaxSetAndReadOps {
		return fmt.Errorf("%w: set and read of %d operations, limit %d", ErrTooManyOps, n, MaxSetAndReadOps)
	}
	if len(writes) > 1 {
		seen := make(map[string]bool, len(writes))
		for _, w := range writes {
			k := string(w.Partition) + "\x00" + string(w.Key)
			if seen[k] {
				return fmt.Errorf("%w: key %q of partition %q written twice in one set and read", ErrInvalidKey, w.Key, w.Partition)
			}
			seen[k] = true
		}
	}
	return nil
}

// getAll reads each of reads, a missing key giving an Absent entry.
func getAll(ctx context.Context, s Store, reads []KeyRef) ([]Entry, error) {
	out := make([]Entry, len(reads))
	for i, r := range reads {
		v, p, err := s.Get(ctx, r.Partition, r.Key)
		switch {
		case err == nil:
			out[i] = Entry{Key: clone(r.Key), Value: v, Predicate: p}
		case errors.Is(err, ErrNotFound):
			out[i] = Entry{Key: clone(r.Key)}
		default:
			return nil, err
		}
	}
	return out, nil
}
