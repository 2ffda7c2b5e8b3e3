package etcdkv

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/kv"
)

// SettleSetIfWithForTest runs the settle path of SetIfWith as if its
// first attempt, sent after the store had seen revision sentAfter, had
// failed ambiguously.
func (s *Store) SettleSetIfWithForTest(ctx context.Context, partition, key, value []byte, pred kv.Predicate, absent []kv.KeyRef, also []kv.Write, sentAfter int64) error {
	k, cmps, ops, err := s.setIfWithTxn(partition, key, value, pred, absent, also)
	if err != nil {
		return err
	}
	return s.settleSetIfWith(ctx, k, value, pred, cmps, ops, sentAfter, "test", errFirstAttempt, predicateFailed)
}

// SettleDeleteIfWithForTest runs the settle path of DeleteIfWith as if
// its first attempt had failed ambiguously.
func (s *Store) SettleDeleteIfWithForTest(ctx context.Context, partition, key []byte, pred kv.Predicate, also []kv.Write) error {
	k, cmps, ops, err := s.deleteIfWithTxn(partition, key, pred, also)
	if err != nil {
		return err
	}
	return s.settleDeleteIfWith(ctx, k, pred, also, cmps, ops, "test", errFirstAttempt, predicateFailed)
}

// SettleSetAndReadUnlessForTest runs the settle path of SetAndReadUnless
// as if its first round had failed ambiguously.
func (s *Store) SettleSetAndReadUnlessForTest(ctx context.Context, absent []kv.KeyRef, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, bool, error) {
	w, err := s.setAndReadUnlessWrite(absent, writes, reads)
	if err != nil {
		return nil, false, err
	}
	resp, err := s.settleBlind(ctx, "test", w, errFirstAttempt)
	if err != nil {
		return nil, false, err
	}
	return unlessResult(resp, w, len(writes), reads)
}

// SetAndReadUnlessTxnForTest is the transaction one attempt of
// SetAndReadUnless sends with bound.
func (s *Store) SetAndReadUnlessTxnForTest(ctx context.Context, absent []kv.KeyRef, writes []kv.Write, reads []kv.KeyRef, bound int64) (clientv3.Txn, error) {
	w, err := s.setAndReadUnlessWrite(absent, writes, reads)
	if err != nil {
		return nil, err
	}
	return s.blindTxnForTest(ctx, w, bound), nil
}
