package etcdkv

import (
	"context"
	"errors"

	"graveler/kv"
)

var errFirstAttempt = errors.New("first attempt timed out")

func predicateFailed() error { return kv.ErrPredicateFailed }

// SentAfterForTest is the revision bound a write sent now would record:
// the highest response revision the store has seen.
func (s *Store) SentAfterForTest() int64 { return s.maxRev.Load() }

// SettleSetIfForTest runs the settle path of SetIf as if its first attempt,
// sent after the store had seen revision sentAfter, had failed
// ambiguously.
func (s *Store) SettleSetIfForTest(ctx context.Context, partition, key, value []byte, pred kv.Predicate, sentAfter int64) error {
	return s.settleSetIf(ctx, s.etcdKey(partition, key), value, pred, sentAfter, "test", errFirstAttempt, predicateFailed)
}

// SettleDeleteIfForTest runs the settle path of DeleteIf as if its first
// attempt had failed ambiguously.
func (s *Store) SettleDeleteIfForTest(ctx context.Context, partition, key []byte, pred kv.Predicate) error {
	return s.settleDeleteIf(ctx, s.etcdKey(partition, key), pred, "test", errFirstAttempt, predicateFailed)
}

// ScanRestartsForTest exposes the restart counter.
var ScanRestartsForTest = scanRestarts

// AttemptTimeoutsForTest exposes the counter of attempts that ran out of
// the request timeout.
var AttemptTimeoutsForTest = attemptTimeouts

// SetAfterDropChunkForTest runs f after each chunk DropPartition deletes,
// until the returned function restores the default.
func SetAfterDropChunkForTest(f func()) (restore func()) {
	afterDropChunk = f
	return func() { afterDropChunk = nil }
}

// MembersOutForTest lists the endpoints taken out of the rotation.
func (s *Store) MembersOutForTest() []string { return s.members.outForTest() }
