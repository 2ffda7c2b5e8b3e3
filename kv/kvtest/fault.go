package kvtest

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"sync"

	"graveler/kv"
)

// FaultMode is how an injected fault behaves.
type FaultMode int

const (
	// FaultError: the operation is not applied and fails with kv.ErrUnavailable.
	FaultError FaultMode = iota
	// FaultAmbiguousApplied: a write is applied, then reported as kv.ErrAmbiguous.
	FaultAmbiguousApplied
	// FaultAmbiguousNotApplied: a write is not applied and reported as kv.ErrAmbiguous.
	FaultAmbiguousNotApplied
	// FaultCrash: the operation is not applied and it and every later
	// operation fail, as if the process died there: no cleanup code can
	// reach the store.
	FaultCrash
)

func (m FaultMode) String() string {
	return [...]string{"error", "ambiguous-applied", "ambiguous-not-applied", "crash"}[m]
}

var (
	// ErrInjected marks every injected failure.
	ErrInjected = errors.New("kvtest: injected fault")
	// ErrCrashed is returned by every operation after a FaultCrash.
	ErrCrashed = errors.New("kvtest: store crashed")
)

// FaultStore wraps a kv.Store and fails chosen operations. Operations are
// numbered from 1 in the order they start (Get, Set, SetIf, Delete, a Scan,
// DropPartition each count one), so a test can first run a flow to count its
// operations (Ops), then re-run it failing operation N for every N.
// Safe for concurrent use.
type FaultStore struct {
	inner kv.Store

	mu       sync.Mutex
	ops      int64
	failAt   int64
	mode     FaultMode
	rate     float64
	modes    []FaultMode
	rng      *rand.Rand
	crashed  bool
	injected int64
}

var (
	_ kv.Store            = (*FaultStore)(nil)
	_ kv.CondWriter       = (*FaultStore)(nil)
	_ kv.PartitionDropper = (*FaultStore)(nil)
	_ kv.SetReader        = (*FaultStore)(nil)
	_ kv.MultiGetter      = (*FaultStore)(nil)
)

// NewFaultStore wraps inner with no faults armed.
func NewFaultStore(inner kv.Store) *FaultStore { return &FaultStore{inner: inner} }

// Inner returns the wrapped store, to inspect state without counting ops.
func (f *FaultStore) Inner() kv.Store { return f.inner }

// FailAt arms a fault of mode at operation n (counted since the last Reset).
func (f *FaultStore) FailAt(n int64, mode FaultMode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failAt, f.mode = n, mode
}

// FailRandomly fails each operation with probability rate, choosing a mode
// from modes (default FaultError), deterministically from seed.
func (f *FaultStore) FailRandomly(seed uint64, rate float64, modes ...FaultMode) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(modes) == 0 {
		modes = []FaultMode{FaultError}
	}
	f.rate, f.modes, f.rng = rate, modes, rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// Reset disarms every fault, clears a crash and restarts the op count.
func (f *FaultStore) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops, f.failAt, f.rate, f.crashed, f.injected = 0, 0, 0, false, 0
}

// Ops is the number of operations started since the last Reset.
func (f *FaultStore) Ops() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops
}

// Injected counts the faults injected since the last Reset.
func (f *FaultStore) Injected() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injected
}

// Crashed reports whether a FaultCrash has happened.
func (f *FaultStore) Crashed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.crashed
}

// next numbers an operation and decides its fate: fault is nil when the
// operation runs normally.
func (f *FaultStore) next(op string) (n int64, fault *FaultMode, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	n = f.ops
	if f.crashed {
		return n, nil, fmt.Errorf("%w: %s (op %d)", ErrCrashed, op, n)
	}
	var m FaultMode
	switch {
	case f.failAt == n:
		m = f.mode
	case f.rate > 0 && f.rng.Float64() < f.rate:
		m = f.modes[f.rng.IntN(len(f.modes))]
	default:
		return n, nil, nil
	}
	f.injected++
	if m == FaultCrash {
		f.crashed = true
		return n, nil, fmt.Errorf("%w: %w: crash at %s (op %d)", ErrCrashed, ErrInjected, op, n)
	}
	return n, &m, nil
}

func injected(op string, n int64, m FaultMode) error {
	if m == FaultError {
		return fmt.Errorf("%w: %w: %s (op %d)", kv.ErrUnavailable, ErrInjected, op, n)
	}
	return fmt.Errorf("%w: %w: %s %s (op %d)", kv.ErrAmbiguous, ErrInjected, m, op, n)
}

func (f *FaultStore) read(op string) error {
	n, m, err := f.next(op)
	if err != nil {
		return err
	}
	if m != nil {
		// A read changes nothing: every mode is a plain failure.
		return fmt.Errorf("%w: %w: %s (op %d)", kv.ErrUnavailable, ErrInjected, op, n)
	}
	return nil
}

func (f *FaultStore) write(op string, apply func() error) error {
	n, m, err := f.next(op)
	if err != nil {
		return err
	}
	if m == nil {
		return apply()
	}
	if *m == FaultAmbiguousApplied {
		if err := apply(); err != nil {
			return err
		}
	}
	return injected(op, n, *m)
}

func (f *FaultStore) Get(ctx context.Context, partition, key []byte) ([]byte, kv.Predicate, error) {
	if err := f.read("get"); err != nil {
		return nil, kv.Absent, err
	}
	return f.inner.Get(ctx, partition, key)
}

func (f *FaultStore) Set(ctx context.Context, partition, key, value []byte) error {
	return f.write("set", func() error { return f.inner.Set(ctx, partition, key, value) })
}

func (f *FaultStore) SetIf(ctx context.Context, partition, key, value []byte, pred kv.Predicate) error {
	return f.write("setif", func() error { return f.inner.SetIf(ctx, partition, key, value, pred) })
}

// SetAndRead is one numbered operation, like the single request it is on
// etcd; an inner store without the ability gets kv.SetAndRead's fallback.
func (f *FaultStore) SetAndRead(ctx context.Context, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, error) {
	var out []kv.Entry
	err := f.write("set_and_read", func() error {
		var err error
		out, err = kv.SetAndRead(ctx, f.inner, writes, reads)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetMany is one numbered read.
func (f *FaultStore) GetMany(ctx context.Context, reads []kv.KeyRef) ([]kv.Entry, error) {
	if err := f.read("get_many"); err != nil {
		return nil, err
	}
	return kv.GetMany(ctx, f.inner, reads)
}

func (f *FaultStore) Delete(ctx context.Context, partition, key []byte) error {
	// A wrapper: forwards the caller's Delete unchanged.
	return f.write("delete", func() error { return f.inner.Delete(ctx, partition, key) })
}

func (f *FaultStore) DeleteIf(ctx context.Context, partition, key []byte, pred kv.Predicate) error {
	return f.write("deleteif", func() error { return f.inner.DeleteIf(ctx, partition, key, pred) })
}

func (f *FaultStore) Scan(ctx context.Context, partition []byte, opts kv.ScanOptions) iter.Seq2[kv.Entry, error] {
	return func(yield func(kv.Entry, error) bool) {
		if err := f.read("scan"); err != nil {
			yield(kv.Entry{}, err)
			return
		}
		for e, err := range f.inner.Scan(ctx, partition, opts) {
			if !yield(e, err) || err != nil {
				return
			}
		}
	}
}

func (f *FaultStore) DropPartition(ctx context.Context, partition []byte) (int64, error) {
	var n int64
	err := f.write("drop_partition", func() error {
		var err error
		n, err = kv.DropPartition(ctx, f.inner, partition)
		return err
	})
	return n, err
}

func (f *FaultStore) Close() error { return f.inner.Close() }

// SetAndReadUnless is one numbered operation, named as SetAndRead is:
// to a fault walk it is the same request.
func (f *FaultStore) SetAndReadUnless(ctx context.Context, absent []kv.KeyRef, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, bool, error) {
	var out []kv.Entry
	var applied bool
	err := f.write("set_and_read", func() error {
		var err error
		out, applied, err = kv.SetAndReadUnless(ctx, f.inner, absent, writes, reads)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return out, applied, nil
}

// DeleteIfWith is one numbered operation, named as DeleteIf is.
func (f *FaultStore) DeleteIfWith(ctx context.Context, partition, key []byte, pred kv.Predicate, also []kv.Write) error {
	return f.write("deleteif", func() error { return kv.DeleteIfWith(ctx, f.inner, partition, key, pred, also) })
}

// SetIfWith is one numbered operation, named as SetIf is.
func (f *FaultStore) SetIfWith(ctx context.Context, partition, key, value []byte, pred kv.Predicate, absent []kv.KeyRef, also []kv.Write) error {
	return f.write("setif", func() error { return kv.SetIfWith(ctx, f.inner, partition, key, value, pred, absent, also) })
}
