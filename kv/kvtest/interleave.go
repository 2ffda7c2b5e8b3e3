package kvtest

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"graveler/kv"
)

// LateAckStore reports a write applied after its caller's context ended as
// kv.ErrAmbiguous, as the etcd store does when the answer is lost with the
// caller. Over a PauseStore, a write held After while its caller gives up
// then looks as it would on the wire. Besides kv.Store it has the
// conditional writes (kv.CondWriter, done by the inner store's or kv's
// fallback), so a branch update or delete that seals its token does so
// in one step, as on etcd; the inner store's other optional abilities
// (SetReader, MultiGetter, PartitionDropper) are hidden, so callers take
// their plain-Store paths for those.
type LateAckStore struct{ kv.Store }

var _ kv.CondWriter = LateAckStore{}

func lateAck(ctx context.Context, err error) error {
	if err == nil && ctx.Err() != nil {
		return fmt.Errorf("%w: answer lost with the caller: %w", kv.ErrAmbiguous, ctx.Err())
	}
	return err
}

func (s LateAckStore) Set(ctx context.Context, p, k, v []byte) error {
	return lateAck(ctx, s.Store.Set(ctx, p, k, v))
}

func (s LateAckStore) SetIf(ctx context.Context, p, k, v []byte, pred kv.Predicate) error {
	return lateAck(ctx, s.Store.SetIf(ctx, p, k, v, pred))
}

func (s LateAckStore) Delete(ctx context.Context, p, k []byte) error {
	return lateAck(ctx, s.Store.Delete(ctx, p, k))
}

func (s LateAckStore) DeleteIf(ctx context.Context, p, k []byte, pred kv.Predicate) error {
	return lateAck(ctx, s.Store.DeleteIf(ctx, p, k, pred))
}

func (s LateAckStore) SetIfWith(ctx context.Context, p, k, v []byte, pred kv.Predicate, absent []kv.KeyRef, also []kv.Write) error {
	return lateAck(ctx, kv.SetIfWith(ctx, s.Store, p, k, v, pred, absent, also))
}

func (s LateAckStore) DeleteIfWith(ctx context.Context, p, k []byte, pred kv.Predicate, also []kv.Write) error {
	return lateAck(ctx, kv.DeleteIfWith(ctx, s.Store, p, k, pred, also))
}

func (s LateAckStore) SetAndReadUnless(ctx context.Context, absent []kv.KeyRef, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, bool, error) {
	got, applied, err := kv.SetAndReadUnless(ctx, s.Store, absent, writes, reads)
	if err = lateAck(ctx, err); err != nil {
		return nil, false, err
	}
	return got, applied, nil
}

// Mode is what happens while the operation under test is held.
type Mode int

const (
	// Race: the racing operation runs while the write waits before the store.
	Race Mode = iota
	// CancelBefore: the caller gives up while the write waits before the store.
	CancelBefore
	// CancelAfter: the caller gives up after the store applied the write,
	// before the answer reaches it.
	CancelAfter
)

// Modes lists every Mode, for tests that run each.
var Modes = []Mode{Race, CancelBefore, CancelAfter}

func (m Mode) String() string { return [...]string{"race", "cancel-before", "cancel-after"}[m] }

// OpOn matches an operation named one of names on (partition, key); a nil
// partition matches any partition, a nil key any key.
func OpOn(partition, key []byte, names ...string) func(Op) bool {
	return func(op Op) bool {
		return slices.ContainsFunc(names, func(n string) bool { return op.Is(n, partition, key) })
	}
}

// Nth matches the n-th operation (from 1) that match matches, counted from
// when it is armed.
func Nth(n int, match func(Op) bool) func(Op) bool {
	var seen atomic.Int64
	return func(op Op) bool { return match(op) && seen.Add(1) == int64(n) }
}

// interleaveTimeout bounds the wait for an operation to reach its pause
// point; a test that waits that long has failed anyway.
const interleaveTimeout = 30 * time.Second

// Interleave runs op with the operation of ps that match selects held, as
// m says, and returns op's error: in Race mode racer runs while it is held;
// otherwise op's context is canceled while it is held (Before the store for
// CancelBefore, After it for CancelAfter). It fails t if op ends, or the
// timeout passes, before the operation is held.
func Interleave(t testing.TB, ctx context.Context, ps *PauseStore, m Mode, match func(Op) bool,
	op func(ctx context.Context) error, racer func()) error {
	t.Helper()
	when := Before
	if m == CancelAfter {
		when = After
	}
	pt := ps.Pause(when, match)
	defer pt.Release()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- op(ctx) }()
	select {
	case <-pt.Reached():
	case err := <-done:
		t.Fatalf("%v: the operation ended (%v) without reaching its pause point", m, err)
	case <-time.After(interleaveTimeout):
		t.Fatalf("%v: no operation reached the pause point", m)
	}
	if m == Race {
		racer()
	} else {
		cancel()
	}
	pt.Release()
	return <-done
}
