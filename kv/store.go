package kv

import (
	"context"
	"fmt"
	"iter"
)

// Predicate names one version of a stored value, as returned by Get. It is
// opaque to callers: pass it back to SetIf unchanged. The zero Predicate
// (Absent) means "the key does not exist", so SetIf(..., Absent) creates a key
// only if it is missing.
type Predicate struct {
	version int64
}

// Absent is the predicate of a missing key.
var Absent = Predicate{}

// NewPredicate is for Store implementations: it wraps the store's own version
// number (etcd's ModRevision, a counter in memory). Version 0 means absent.
func NewPredicate(version int64) Predicate { return Predicate{version: version} }

// Version is the version number given to NewPredicate: the revision of
// the write that stored this version, the number NoteWrite reported for
// it (see Revisions).
func (p Predicate) Version() int64 { return p.version }

// IsAbsent reports whether p is the predicate of a missing key.
func (p Predicate) IsAbsent() bool { return p.version == 0 }

func (p Predicate) String() string {
	if p.IsAbsent() {
		return "absent"
	}
	return fmt.Sprintf("v%d", p.version)
}

// Entry is one key/value pair of a Scan, with the predicate of its version.
type Entry struct {
	Key       []byte
	Value     []byte
	Predicate Predicate
}

// ScanOptions shape a Scan.
type ScanOptions struct {
	// Start is the first key to return (inclusive); nil starts at the
	// partition's first key.
	Start []byte
	// Limit is the most entries the caller will read; 0 means no limit. It is
	// a hint that lets a store fetch no more than needed.
	Limit int
}

// Store is the key/value abstraction of seed 004.
//
// All methods are safe for concurrent use. Values returned are owned by the
// caller. A Store must be closed with Close.
type Store interface {
	// Get returns the value of key and the predicate of its current version,
	// or ErrNotFound.
	Get(ctx context.Context, partition, key []byte) ([]byte, Predicate, error)
	// Set stores value under key, overwriting any existing value.
	Set(ctx context.Context, partition, key, value []byte) error
	// SetIf stores value only if key's current version is pred (Absent: only
	// if key does not exist); otherwise it returns ErrPredicateFailed.
	// On etcd an ambiguous SetIf is settled from the key's history, which
	// recognizes this attempt by its value: it applied iff the first
	// change after pred (for Absent: a creation after the attempt was
	// sent) wrote exactly these bytes. A caller whose value could equal
	// another writer's, or its own from an earlier attempt, must make it
	// unique (a random write id in the record); otherwise settling may
	// report another's write as its own. When the history is compacted
	// the result is ErrAmbiguous, never a guess.
	SetIf(ctx context.Context, partition, key, value []byte, pred Predicate) error
	// Delete removes key. Deleting a missing key is not an error. Use it
	// only on keys nobody can write again concurrently; a record read
	// earlier is removed with DeleteIf.
	Delete(ctx context.Context, partition, key []byte) error
	// DeleteIf removes key only if its current version is pred, as read
	// by Get or Scan; otherwise it returns ErrPredicateFailed and changes
	// nothing. With Absent it succeeds only when key is missing. It is how
	// a record read earlier is deleted without removing a newer record
	// written meanwhile under the same key (a re-created repository or
	// branch). On etcd an ambiguous DeleteIf is settled from the key's
	// history: if the version pred was ended by a deletion, the delete is
	// reported applied (the caller's intent holds whoever deleted it); if
	// by a write, ErrPredicateFailed.
	DeleteIf(ctx context.Context, partition, key []byte, pred Predicate) error
	// Scan walks the partition in ascending byte order of keys, starting at
	// opts.Start. An error is yielded at most once, as the last element.
	// Breaking out of the loop releases everything. A scan may run while
	// others write: each entry returned was the key's value at some point
	// during the scan, and keys that were neither written nor deleted during
	// the scan are all returned exactly once.
	Scan(ctx context.Context, partition []byte, opts ScanOptions) iter.Seq2[Entry, error]
	// Close releases the store's resources. Calls after Close return ErrClosed.
	Close() error
}

// PartitionDropper is an optional ability: delete every key of a partition,
// in bounded chunks, returning how many keys were deleted. Callers probe it
// with a type assertion and fall back to DropPartition.
type PartitionDropper interface {
	DropPartition(ctx context.Context, partition []byte) (int64, error)
}

// DropPartition deletes every key of partition, through the store's
// PartitionDropper if it has one, otherwise by scanning and deleting.
func DropPartition(ctx context.Context, s Store, partition []byte) (int64, error) {
	if d, ok := s.(PartitionDropper); ok {
		return d.DropPartition(ctx, partition)
	}
	var n int64
	for {
		var keys [][]byte
		for e, err := range s.Scan(ctx, partition, ScanOptions{Limit: 1000}) {
			if err != nil {
				return n, err
			}
			keys = append(keys, e.Key)
			if len(keys) == 1000 {
				break
			}
		}
		if len(keys) == 0 {
			return n, nil
		}
		for _, k := range keys {
			// Partition drop: its owner is unreachable, so nobody re-creates its keys.
			if err := s.Delete(ctx, partition, k); err != nil {
				return n, err
			}
			n++
		}
	}
}
