package etcdkv

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"graveler/kv"
)

// refusedForTest is what a write answered NOSPACE returns when it did not
// apply.
var refusedForTest = fmt.Errorf("%w: test: %w", kv.ErrQuotaExceeded, rpctypes.ErrNoSpace)

// NoSpaceSetForTest decides, as Set does, an attempt of Set(partition,
// key, value) guarded by bound that etcd answered NOSPACE.
func (s *Store) NoSpaceSetForTest(ctx context.Context, partition, key, value []byte, bound int64) error {
	return s.noSpaceBlind(ctx, "test", s.setWrite(s.etcdKey(partition, key), value), bound, refusedForTest)
}

// NoSpaceSetIfForTest decides, as SetIf does, a SetIf sent after revision
// sentAfter that etcd answered NOSPACE.
func (s *Store) NoSpaceSetIfForTest(ctx context.Context, partition, key, value []byte, pred kv.Predicate, sentAfter int64) error {
	return s.noSpaceSetIf(ctx, "test", s.etcdKey(partition, key), value, pred, sentAfter, refusedForTest)
}
