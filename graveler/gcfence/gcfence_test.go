package gcfence_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/gcfence"
	"graveler/keys"
	"graveler/kv"
)

const ns = graveler.StorageNamespace("s3://bucket/data/repo")

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// countingStore counts the reads of sweep records and runs onRead after
// each one.
type countingStore struct {
	kv.Store
	reads  atomic.Int64
	onRead func(n int64)
}

func (s *countingStore) Get(ctx context.Context, partition, key []byte) ([]byte, kv.Predicate, error) {
	v, p, err := s.Store.Get(ctx, partition, key)
	n := s.reads.Add(1)
	if s.onRead != nil {
		s.onRead(n)
	}
	return v, p, err
}

// stores runs fn on every kv.Store implementation.
func stores(t *testing.T, fn func(t *testing.T, store kv.Store)) {
	t.Run("memory", func(t *testing.T) { fn(t, kv.NewMemoryStore()) })
	t.Run("etcd", func(t *testing.T) { fn(t, etcdkvtest.NewStore(t)) })
}

func newFence(store kv.Store, c *clock) *gcfence.Fence {
	return gcfence.New(store, gcfence.Config{TTL: 30 * time.Second, SafetyMargin: 10 * time.Second, ClockSkew: 5 * time.Second, Poll: time.Millisecond, Now: c.Now})
}

func TestSettle(t *testing.T) {
	stores(t, func(t *testing.T, store kv.Store) {
		ctx := context.Background()
		c := &clock{now: time.Unix(1_700_000_000, 0)}
		f := newFence(store, c)

		// No sweep ever: nothing overlapped.
		tok, err := f.Begin(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		if over, err := f.Settle(ctx, ns, tok); err != nil || over {
			t.Fatalf("no sweep: overlapped %v, %v", over, err)
		}

		// A sweep that began and ended between Begin and Settle.
		tok, _ = f.Begin(ctx, ns)
		s, err := f.StartSweep(ctx, ns, "run-1")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(ctx); err != nil {
			t.Fatal(err)
		}
		if over, err := f.Settle(ctx, ns, tok); err != nil || !over {
			t.Fatalf("sweep between: overlapped %v, %v", over, err)
		}

		// A sweep that ended before Begin, record unchanged since.
		tok, _ = f.Begin(ctx, ns)
		if over, err := f.Settle(ctx, ns, tok); err != nil || over {
			t.Fatalf("sweep before: overlapped %v, %v", over, err)
		}

		// Another namespace's sweep is not this one's.
		tok, _ = f.Begin(ctx, ns)
		other, err := f.StartSweep(ctx, "s3://bucket/data/other", "run-2")
		if err != nil {
			t.Fatal(err)
		}
		if over, err := f.Settle(ctx, ns, tok); err != nil || over {
			t.Fatalf("other namespace's sweep: overlapped %v, %v", over, err)
		}
		_ = other.Finish(ctx)

		// Two spellings of one location share one record.
		tok, _ = f.Begin(ctx, "s3://bucket/data/repo/")
		s, err = f.StartSweep(ctx, ns, "run-3")
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Finish(ctx)
		if over, err := f.Settle(ctx, "s3://bucket/data/repo/", tok); err != nil || !over {
			t.Fatalf("same location, other spelling: overlapped %v, %v", over, err)
		}
	})
}

// TestSettleWaitsForRunningSweep: a writer whose writes overlap a running
// sweep returns only once that sweep is done, and says it overlapped.
func TestSettleWaitsForRunningSweep(t *testing.T) {
	stores(t, func(t *testing.T, store kv.Store) {
		ctx := context.Background()
		c := &clock{now: time.Unix(1_700_000_000, 0)}
		cs := &countingStore{Store: store}
		f := newFence(cs, c)            // the writer's, counted
		collector := newFence(store, c) // the collector's
		s, err := collector.StartSweep(ctx, ns, "run-1")
		if err != nil {
			t.Fatal(err)
		}
		tok, err := f.Begin(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		var finished atomic.Bool
		start := cs.reads.Load()
		var once sync.Once
		cs.onRead = func(n int64) {
			// Settle has looked at the running record a few times: only
			// now does the sweep end.
			if n >= start+4 {
				once.Do(func() {
					finished.Store(true)
					if err := s.Finish(ctx); err != nil {
						t.Error(err)
					}
				})
			}
		}
		over, err := f.Settle(ctx, ns, tok)
		if err != nil || !over {
			t.Fatalf("overlapped %v, %v", over, err)
		}
		if !finished.Load() {
			t.Fatal("Settle returned while the sweep was running")
		}
	})
}

// TestSettleGivesUpWithCaller: a writer whose caller gives up while it
// waits for a sweep returns the context's error.
func TestSettleGivesUpWithCaller(t *testing.T) {
	stores(t, func(t *testing.T, store kv.Store) {
		c := &clock{now: time.Unix(1_700_000_000, 0)}
		cs := &countingStore{Store: store}
		f := newFence(cs, c)
		if _, err := f.StartSweep(context.Background(), ns, "run-1"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		tok, err := f.Begin(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		start := cs.reads.Load()
		cs.onRead = func(n int64) {
			if n >= start+2 {
				cancel()
			}
		}
		if _, err := f.Settle(ctx, ns, tok); !errors.Is(err, context.Canceled) {
			t.Fatalf("Settle after the caller gave up: %v", err)
		}
	})
}

// TestStalledSweep: a collector that stalls past its deadline is waited
// for until the deadline plus the clock skew, then writers go on; the
// collector, back, refuses to delete, and its record is left to the
// next run.
func TestStalledSweep(t *testing.T) {
	stores(t, func(t *testing.T, store kv.Store) {
		ctx := context.Background()
		c := &clock{now: time.Unix(1_700_000_000, 0)}
		f := newFence(store, c)
		s, err := f.StartSweep(ctx, ns, "run-1")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Permit(ctx); err != nil {
			t.Fatalf("fresh sweep: %v", err)
		}
		if _, err := f.StartSweep(ctx, ns, "run-2"); !errors.Is(err, gcfence.ErrSweepBusy) {
			t.Fatalf("second collector while one runs: %v", err)
		}
		tok, _ := f.Begin(ctx, ns)
		// The collector stalls; the deadline and the skew pass.
		c.Advance(30*time.Second + 5*time.Second + time.Millisecond)
		if over, err := f.Settle(ctx, ns, tok); err != nil || !over {
			t.Fatalf("Settle past a stalled sweep's deadline: %v, %v", over, err)
		}
		if err := s.Permit(ctx); !errors.Is(err, gcfence.ErrSweepLost) {
			t.Fatalf("stalled collector's Permit: %v", err)
		}
		if err := s.Permit(ctx); !errors.Is(err, gcfence.ErrSweepLost) {
			t.Fatalf("Permit once lost: %v", err)
		}
		s2, err := f.StartSweep(ctx, ns, "run-2")
		if err != nil {
			t.Fatalf("next collector: %v", err)
		}
		if err := s2.Permit(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPermitExtends: a sweep that keeps deleting keeps its deadline ahead;
// one whose record another collector took refuses to go on.
func TestPermitExtends(t *testing.T) {
	stores(t, func(t *testing.T, store kv.Store) {
		ctx := context.Background()
		c := &clock{now: time.Unix(1_700_000_000, 0)}
		f := newFence(store, c)
		s, err := f.StartSweep(ctx, ns, "run-1")
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			c.Advance(8 * time.Second) // 160 s in all, five deadlines
			if err := s.Permit(ctx); err != nil {
				t.Fatalf("a sweep that keeps going: %v", err)
			}
		}
		// A writer arriving now still waits for it.
		tok, _ := f.Begin(ctx, ns)
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := f.Settle(wctx, ns, tok); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Settle during an extended sweep: %v", err)
		}
		// The record is overwritten (an operator, or a collector that took
		// over): the sweep must stop at its next extension.
		if err := store.Set(ctx, keys.Graveler(), keys.GCSweep("s3://bucket/data/repo"), []byte(`{"run":"x","state":"done"}`)); err != nil {
			t.Fatal(err)
		}
		c.Advance(20 * time.Second)
		if err := s.Permit(ctx); !errors.Is(err, gcfence.ErrSweepLost) {
			t.Fatalf("Permit after the record changed: %v", err)
		}
	})
}

// TestCorruptRecord: a record that does not decode makes writers check
// their trees and collectors refuse nothing they can overwrite.
func TestCorruptRecord(t *testing.T) {
	stores(t, func(t *testing.T, store kv.Store) {
		ctx := context.Background()
		c := &clock{now: time.Unix(1_700_000_000, 0)}
		f := newFence(store, c)
		if err := store.Set(ctx, keys.Graveler(), keys.GCSweep("s3://bucket/data/repo"), []byte("{")); err != nil {
			t.Fatal(err)
		}
		tok, err := f.Begin(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		if over, err := f.Settle(ctx, ns, tok); err != nil || !over {
			t.Fatalf("corrupt record: overlapped %v, %v", over, err)
		}
		s, err := f.StartSweep(ctx, ns, "run-1")
		if err != nil {
			t.Fatalf("sweep over a corrupt record: %v", err)
		}
		if err := s.Finish(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
