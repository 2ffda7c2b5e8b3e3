package etcdkv

import (
	"context"
	"errors"

	"graveler/kv"
)

// SettleSetIfForTest runs the settle path of SetIf as if its first attempt
// had failed ambiguously.
func (s *Store) SettleSetIfForTest(ctx context.Context, partition, key, value []byte, pred kv.Predicate) error {
	return s.settleSetIf(ctx, s.etcdKey(partition, key), value, pred, "test", errors.New("first attempt timed out"), func() error {
		return kv.ErrPredicateFailed
	})
}

// ScanRestartsForTest exposes the restart counter.
var ScanRestartsForTest = scanRestarts

// SetAfterDropChunkForTest runs f after each chunk DropPartition deletes,
// until the returned function restores the default.
func SetAfterDropChunkForTest(f func()) (restore func()) {
	afterDropChunk = f
	return func() { afterDropChunk = nil }
}
