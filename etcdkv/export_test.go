package etcdkv

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"

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

// SetTxnForTest is the transaction one attempt of Set sends with bound.
func (s *Store) SetTxnForTest(ctx context.Context, partition, key, value []byte, bound int64) clientv3.Txn {
	return s.blindTxnForTest(ctx, s.setWrite(s.etcdKey(partition, key), value), bound)
}

// DeleteTxnForTest is the transaction one attempt of Delete sends with
// bound.
func (s *Store) DeleteTxnForTest(ctx context.Context, partition, key []byte, bound int64) clientv3.Txn {
	return s.blindTxnForTest(ctx, s.deleteWrite(s.etcdKey(partition, key)), bound)
}

// SetAndReadTxnForTest is the transaction one attempt of SetAndRead sends
// with bound.
func (s *Store) SetAndReadTxnForTest(ctx context.Context, writes []kv.Write, reads []kv.KeyRef, bound int64) (clientv3.Txn, error) {
	w, err := s.setAndReadWrite(writes, reads)
	if err != nil {
		return nil, err
	}
	return s.blindTxnForTest(ctx, w, bound), nil
}

// SetBeforeBlindAttemptForTest runs f after each attempt of an
// unconditional write has read its bound and before it is sent, until
// the returned function restores the default.
func SetBeforeBlindAttemptForTest(f func()) (restore func()) {
	beforeBlindAttempt = f
	return func() { beforeBlindAttempt = nil }
}

// blindTxnForTest is the transaction one attempt of w sends with bound,
// with the store's fence as it stands.
func (s *Store) blindTxnForTest(ctx context.Context, w blindWrite, bound int64) clientv3.Txn {
	rev, err := s.fenceFor(ctx)
	if err != nil {
		panic(err)
	}
	els := append(w.orElse[:len(w.orElse):len(w.orElse)], s.fence.read())
	return s.cli.Txn(ctx).If(append(w.cmps(bound), s.fence.cmp(rev))...).Then(w.ops...).Else(els...)
}

// SetBeforeFencedSendForTest runs f after each write attempt has read its
// fence revision and before it is sent, until the returned function
// restores the default.
func SetBeforeFencedSendForTest(f func(rev int64)) (restore func()) {
	beforeFencedSend = f
	return func() { beforeFencedSend = nil }
}

// FenceOffForTest is what the store does when an attempt that carried
// fence revision rev loses its answer.
func (s *Store) FenceOffForTest(ctx context.Context, rev int64) { s.fenceOff(ctx, rev) }

// FenceRevForTest is the fence revision the store's next attempt carries.
func (s *Store) FenceRevForTest(ctx context.Context) (int64, error) { return s.fenceFor(ctx) }

// HoldFenceLockForTest takes the fence's lock, as a stalled move does,
// until release is called.
func (s *Store) HoldFenceLockForTest(ctx context.Context) (release func()) {
	if err := s.fence.acquire(ctx); err != nil {
		panic(err)
	}
	return s.fence.release
}

// ReadErrForTest maps err as a failed read on ctx does.
func ReadErrForTest(ctx context.Context, err error) error { return readErr(ctx, "test", err) }
