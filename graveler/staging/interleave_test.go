package staging_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/staging"
	"graveler/kv"
	"graveler/kv/kvtest"
)

// Interleaving tests of the fenced write batcher: a request held in flight
// by a kvtest.PauseStore, writers queued behind it, and callers giving up
// at each point. The rule under test: a write whose caller is gone before
// it was sent is never sent; a caller whose write was sent hears the
// outcome, and its answer agrees with what the store holds.

const holdTimeout = 20 * time.Second

// pausedEnv is a Manager on a PauseStore over a fresh memory store or a
// fresh embedded etcd.
type pausedEnv struct {
	t     *testing.T
	ctx   context.Context
	ps    *kvtest.PauseStore
	m     *staging.Manager
	st    graveler.StagingToken
	reads []kv.KeyRef
}

func forEachPausedStore(t *testing.T, cfg staging.Config, f func(e *pausedEnv)) {
	for _, b := range []struct {
		name string
		new  func(t *testing.T) kv.Store
	}{
		{"memory", func(t *testing.T) kv.Store { s := kv.NewMemoryStore(); t.Cleanup(func() { s.Close() }); return s }},
		{"etcd", func(t *testing.T) kv.Store { return etcdkvtest.NewStore(t) }},
	} {
		t.Run(b.name, func(t *testing.T) {
			if b.name == "etcd" && testing.Short() {
				t.Skip("embedded etcd")
			}
			t.Parallel()
			store := b.new(t)
			ps := kvtest.NewPauseStore(store)
			e := &pausedEnv{t: t, ctx: t.Context(), ps: ps, m: staging.New(ps, cfg), st: "tok"}
			fence := []byte("fence")
			if err := store.Set(e.ctx, fence, []byte("branch"), []byte("b1")); err != nil {
				t.Fatal(err)
			}
			e.reads = []kv.KeyRef{{Partition: fence, Key: []byte("branch")}}
			f(e)
		})
	}
}

// write runs a fenced write of key in the background.
func (e *pausedEnv) write(ctx context.Context, key string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := e.m.SetAndRead(ctx, e.st, graveler.Key(key), val(key), e.reads)
		done <- err
	}()
	return done
}

// holdFirst starts a lone writer of key and holds its request before the
// store sees it; the returned point releases it.
func (e *pausedEnv) holdFirst(key string) (*kvtest.PausePoint, <-chan error) {
	pt := e.ps.Pause(kvtest.Before, func(op kvtest.Op) bool { return op.Name == "set_and_read" })
	done := e.write(e.ctx, key)
	pt.Wait(e.t, holdTimeout)
	return pt, done
}

// holdNext arms a point holding the next request other than held's.
func (e *pausedEnv) holdNext(when kvtest.When, held *kvtest.PausePoint) *kvtest.PausePoint {
	n := held.Op().N
	return e.ps.Pause(when, func(op kvtest.Op) bool { return op.Name == "set_and_read" && op.N != n })
}

func (e *pausedEnv) waitQueued(n int) {
	e.t.Helper()
	deadline := time.Now().Add(holdTimeout)
	for staging.QueuedForTest(e.m) != n {
		if time.Now().After(deadline) {
			e.t.Fatalf("%d writers queued, want %d", staging.QueuedForTest(e.m), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// staged reports whether key is staged (with its own value).
func (e *pausedEnv) staged(key string) bool {
	e.t.Helper()
	v, err := e.m.Get(e.ctx, e.st, graveler.Key(key))
	if errors.Is(err, graveler.ErrEntryNotFound) {
		return false
	}
	if err != nil || !sameValue(v, val(key)) {
		e.t.Fatalf("get %s: %v %v", key, v, err)
	}
	return true
}

// release lets pt go and waits for done, which must succeed.
func (e *pausedEnv) release(pt *kvtest.PausePoint, done <-chan error) {
	e.t.Helper()
	pt.Release()
	if err := wait(e.t, done); err != nil {
		e.t.Fatal(err)
	}
}

// giveUpAt waits until pt holds its request, ends the writers' context
// with cancel meanwhile, and lets the request go.
func (e *pausedEnv) giveUpAt(pt *kvtest.PausePoint, cancel context.CancelFunc) {
	e.t.Helper()
	pt.Wait(e.t, holdTimeout)
	cancel()
	pt.Release()
}

// writeLater makes a write of "later", which must succeed: it runs after
// any batch queued before it, so what those did is in the store.
func (e *pausedEnv) writeLater() {
	e.t.Helper()
	if err := wait(e.t, e.write(e.ctx, "later")); err != nil {
		e.t.Fatal(err)
	}
}

func wait(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(holdTimeout):
		t.Fatal("a write did not return")
		return nil
	}
}

// TestFencedQueuedWriterGivesUp: a writer queued behind a request in
// flight whose context ends is answered with its context's error and
// taken out of its batch: its write is never sent, while the others of
// the batch are.
func TestFencedQueuedWriterGivesUp(t *testing.T) {
	forEachPausedStore(t, staging.Config{}, func(e *pausedEnv) {
		pt, first := e.holdFirst("first")
		ctx, cancel := context.WithCancel(e.ctx)
		gone := e.write(ctx, "gone")
		e.waitQueued(1)
		stays := e.write(e.ctx, "stays")
		e.waitQueued(2)
		cancel()
		if err := wait(t, gone); !errors.Is(err, context.Canceled) {
			t.Fatalf("writer that gave up while queued: %v", err)
		}
		pt.Release()
		for _, done := range []<-chan error{first, stays} {
			if err := wait(t, done); err != nil {
				t.Fatal(err)
			}
		}
		// A later write of the group runs after any batch queued before it.
		e.writeLater()
		if e.staged("gone") {
			t.Fatal("the write of a caller that gave up while queued was sent")
		}
		if !e.staged("stays") || !e.staged("first") {
			t.Fatal("a write of the batch is missing")
		}
	})
}

// TestFencedInFlightWriterGivesUp: once its batch is sent, a writer whose
// context ends waits for the outcome and hears it, since its write may
// land: here it did, and the writer is told so.
func TestFencedInFlightWriterGivesUp(t *testing.T) {
	for _, when := range []struct {
		name string
		when kvtest.When
	}{{"held-before", kvtest.Before}, {"held-after", kvtest.After}} {
		t.Run(when.name, func(t *testing.T) {
			forEachPausedStore(t, staging.Config{}, func(e *pausedEnv) {
				pt, first := e.holdFirst("first")
				ctx, cancel := context.WithCancel(e.ctx)
				gone := e.write(ctx, "gone")
				stays := e.write(e.ctx, "stays")
				e.waitQueued(2)
				batch := e.holdNext(when.when, pt)
				e.release(pt, first)
				e.giveUpAt(batch, cancel)
				if err := wait(t, gone); err != nil {
					t.Fatalf("a writer whose batch was in flight when it gave up: %v, want the batch's outcome", err)
				}
				if err := wait(t, stays); err != nil {
					t.Fatal(err)
				}
				if !e.staged("gone") || !e.staged("stays") {
					t.Fatal("a write acknowledged is missing")
				}
			})
		})
	}
}

// TestFencedInFlightAllGiveUp: when every writer of a batch in flight has
// given up, the request is abandoned; whatever each one is answered
// agrees with the store once the answer is given.
func TestFencedInFlightAllGiveUp(t *testing.T) {
	forEachPausedStore(t, staging.Config{}, func(e *pausedEnv) {
		pt, first := e.holdFirst("first")
		ctx, cancel := context.WithCancel(e.ctx)
		gone := e.write(ctx, "gone")
		e.waitQueued(1)
		batch := e.holdNext(kvtest.Before, pt)
		e.release(pt, first)
		e.giveUpAt(batch, cancel)
		err := wait(t, gone)
		e.writeLater()
		switch staged := e.staged("gone"); {
		case err == nil && !staged:
			t.Fatal("acknowledged, not staged")
		case err != nil && staged && !errors.Is(err, graveler.ErrAmbiguous):
			t.Fatalf("staged after a definite failure: %v", err)
		}
	})
}

// TestFencedLoneWriterGivesUp: a lone writer sends on its own context; if
// it gives up while its request is held before the store, the request
// fails and nothing is written (on etcd the answer is an ambiguous one,
// and the request was never sent).
func TestFencedLoneWriterGivesUp(t *testing.T) {
	forEachPausedStore(t, staging.Config{}, func(e *pausedEnv) {
		pt := e.ps.Pause(kvtest.Before, func(op kvtest.Op) bool { return op.Name == "set_and_read" })
		ctx, cancel := context.WithCancel(e.ctx)
		done := e.write(ctx, "lone")
		e.giveUpAt(pt, cancel)
		if err := wait(t, done); !errors.Is(err, context.Canceled) {
			t.Fatalf("lone writer that gave up: %v", err)
		}
		e.writeLater()
		if e.staged("lone") {
			t.Fatal("the write of a caller that gave up before it was sent landed")
		}
	})
}

// refusingStore refuses a guarded set-and-read of more than maxOps
// writes, as etcd refuses a transaction over its --max-txn-ops, before
// applying anything; onRefuse, if set, runs as it refuses. Requests it
// lets through are held at the PauseStore's gates.
type refusingStore struct {
	*kvtest.PauseStore
	maxOps   int
	onRefuse func()
	refused  atomic.Int32
}

func (s *refusingStore) SetAndReadUnless(ctx context.Context, absent []kv.KeyRef, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, bool, error) {
	if len(writes) > s.maxOps {
		s.refused.Add(1)
		if s.onRefuse != nil {
			s.onRefuse()
		}
		return nil, false, fmt.Errorf("%w: %d writes", kv.ErrTooManyOps, len(writes))
	}
	return s.PauseStore.SetAndReadUnless(ctx, absent, writes, reads)
}

// TestFencedBatchRefusedGoesAlone: a batch the store refuses for its
// number of operations is sent again write by write, so every writer
// succeeds; a writer that gave up before that is not sent again.
func TestFencedBatchRefusedGoesAlone(t *testing.T) {
	forEachPausedStore(t, staging.Config{}, func(e *pausedEnv) {
		rs := &refusingStore{PauseStore: e.ps, maxOps: 1}
		e.m = staging.New(rs, staging.Config{})
		pt, first := e.holdFirst("first")
		ctx, cancel := context.WithCancel(e.ctx)
		var dones []<-chan error
		for i := range 4 {
			dones = append(dones, e.write(e.ctx, fmt.Sprintf("k%d", i)))
		}
		e.waitQueued(4)
		gone := e.write(ctx, "gone")
		e.waitQueued(5)
		// The shared request is refused; hold the first write sent alone
		// and give up meanwhile: the refused request applied nothing.
		alone := e.holdNext(kvtest.Before, pt)
		e.release(pt, first)
		e.giveUpAt(alone, cancel)
		for _, done := range dones {
			if err := wait(t, done); err != nil {
				t.Fatalf("a write that fits alone, after its batch was refused: %v", err)
			}
		}
		switch err, staged := wait(t, gone), e.staged("gone"); {
		case err == nil && !staged:
			t.Fatal("acknowledged, not staged")
		case err != nil && staged && !errors.Is(err, graveler.ErrAmbiguous):
			t.Fatalf("a write refused with its batch was sent again after its caller gave up: %v", err)
		}
		for i := range 4 {
			if !e.staged(fmt.Sprintf("k%d", i)) {
				t.Fatalf("k%d missing", i)
			}
		}
		if rs.refused.Load() == 0 {
			t.Fatal("no request was refused: the path under test did not run")
		}
	})
}

// TestFencedBatchRefusedSkipsWriterGone: two writers of one key share a
// batch the store refuses; the later one gives up while the refused
// request is out. Sent again alone, the key carries the value of the
// writer still waiting, and the one that gave up hears its context's
// error: its write, of which nothing applied, is never sent again.
func TestFencedBatchRefusedSkipsWriterGone(t *testing.T) {
	forEachPausedStore(t, staging.Config{}, func(e *pausedEnv) {
		ctx, cancel := context.WithCancel(e.ctx)
		rs := &refusingStore{PauseStore: e.ps, maxOps: 1, onRefuse: cancel}
		e.m = staging.New(rs, staging.Config{})
		put := func(ctx context.Context, key, v string) <-chan error {
			done := make(chan error, 1)
			go func() {
				_, err := e.m.SetAndRead(ctx, e.st, graveler.Key(key), val(v), e.reads)
				done <- err
			}()
			return done
		}
		pt, first := e.holdFirst("first")
		live := put(e.ctx, "k", "live")
		e.waitQueued(1)
		gone := put(ctx, "k", "gone")
		e.waitQueued(2)
		other := put(e.ctx, "o", "o")
		e.waitQueued(3)
		e.release(pt, first)
		if err := wait(t, live); err != nil {
			t.Fatalf("the writer still waiting: %v", err)
		}
		if err := wait(t, other); err != nil {
			t.Fatalf("the writer of another key: %v", err)
		}
		if err := wait(t, gone); !errors.Is(err, context.Canceled) {
			t.Fatalf("the writer that gave up before its write was sent again: %v, want context.Canceled", err)
		}
		v, err := e.m.Get(e.ctx, e.st, graveler.Key("k"))
		if err != nil || !sameValue(v, val("live")) {
			t.Fatalf("k = %v, %v; want the value of the writer still waiting", v, err)
		}
		if rs.refused.Load() == 0 {
			t.Fatal("no request was refused: the path under test did not run")
		}
	})
}

// TestFencedBatchBytes: a batch stays within FencedBatchBytes, also when
// a later write of a key already queued replaces the earlier one with a
// larger value; only a write larger than the limit by itself goes over,
// alone.
func TestFencedBatchBytes(t *testing.T) {
	const limit = 600
	forEachPausedStore(t, staging.Config{FencedBatchBytes: limit}, func(e *pausedEnv) {
		var mu sync.Mutex
		var over []string
		sizes := &sizingStore{PauseStore: e.ps, check: func(writes []kv.Write) {
			n := 0
			for _, w := range writes {
				n += len(w.Partition) + len(w.Key) + len(w.Value)
			}
			if len(writes) > 1 && n > limit {
				mu.Lock()
				over = append(over, fmt.Sprintf("%d writes, %d bytes", len(writes), n))
				mu.Unlock()
			}
		}}
		e.m = staging.New(sizes, staging.Config{FencedBatchBytes: limit})
		pt, first := e.holdFirst("first")
		small := func(key string, n int) *graveler.Value {
			return &graveler.Value{Identity: []byte("id-" + key), Data: make([]byte, n)}
		}
		var dones []<-chan error
		set := func(key string, v *graveler.Value) {
			done := make(chan error, 1)
			go func() {
				_, err := e.m.SetAndRead(e.ctx, e.st, graveler.Key(key), v, e.reads)
				done <- err
			}()
			dones = append(dones, done)
		}
		set("a", small("a", 100))
		e.waitQueued(1)
		set("b", small("b", 250))
		e.waitQueued(2)
		// Replacing a's 100 bytes with 400 would take the batch past the
		// limit: it goes in the next batch instead.
		set("a", small("a", 400))
		e.waitQueued(3)
		// Larger than the limit on its own.
		set("huge", small("huge", 2*limit))
		e.waitQueued(4)
		e.release(pt, first)
		for _, done := range dones {
			if err := wait(t, done); err != nil {
				t.Fatal(err)
			}
		}
		if len(over) > 0 {
			t.Fatalf("batches over %d bytes: %v", limit, over)
		}
		if n := sizes.checked.Load(); n < 3 {
			t.Fatalf("%d requests checked: the batches were not sent through the checking store", n)
		}
		v, err := e.m.Get(e.ctx, e.st, graveler.Key("a"))
		if err != nil || len(v.Data) != 400 {
			t.Fatalf("the later write of a: %d bytes, %v", len(v.Data), err)
		}
	})
}

var (
	_ kv.CondWriter = (*sizingStore)(nil)
	_ kv.CondWriter = (*refusingStore)(nil)
	_ kv.CondWriter = (*panicOnceStore)(nil)
)

// sizingStore checks the writes of every guarded set-and-read, the call
// fenced batches are sent with.
type sizingStore struct {
	*kvtest.PauseStore
	check   func([]kv.Write)
	checked atomic.Int32
}

func (s *sizingStore) SetAndReadUnless(ctx context.Context, absent []kv.KeyRef, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, bool, error) {
	s.checked.Add(1)
	s.check(writes)
	return s.PauseStore.SetAndReadUnless(ctx, absent, writes, reads)
}

// panicOnceStore panics in its first guarded set-and-read after armed.
type panicOnceStore struct {
	*kv.MemoryStore
	armed atomic.Bool
}

func (s *panicOnceStore) SetAndReadUnless(ctx context.Context, absent []kv.KeyRef, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, bool, error) {
	if s.armed.CompareAndSwap(true, false) {
		panic("store failure")
	}
	return s.MemoryStore.SetAndReadUnless(ctx, absent, writes, reads)
}

// TestFencedWriterPanicFreesToken: a lone writer's request panics in the
// store (the gRPC server recovers such a panic and goes on serving); the
// token's next write is sent, not queued behind a request that will never
// finish.
func TestFencedWriterPanicFreesToken(t *testing.T) {
	store := kv.NewMemoryStore()
	t.Cleanup(func() { store.Close() })
	ps := &panicOnceStore{MemoryStore: store}
	m := staging.New(ps, staging.Config{})
	ctx := t.Context()
	reads := []kv.KeyRef{{Partition: []byte("fence"), Key: []byte("branch")}}
	ps.armed.Store(true)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the store's panic did not reach the writer")
			}
		}()
		_, _ = m.SetAndRead(ctx, "tok", graveler.Key("a"), val("a"), reads)
	}()
	done := make(chan error, 1)
	go func() {
		_, err := m.SetAndRead(ctx, "tok", graveler.Key("b"), val("b"), reads)
		done <- err
	}()
	if err := wait(t, done); err != nil {
		t.Fatalf("the next write of the token: %v", err)
	}
}
