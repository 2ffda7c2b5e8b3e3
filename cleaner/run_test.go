package cleaner_test

import (
	"context"
	"iter"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"graveler/cleaner"
	"graveler/kv"
)

// localElector is an in-memory Elector: one leader at a time, whose
// leadership the test can revoke.
type localElector struct {
	slot   chan struct{}
	holder atomic.Int64 // replica id of the leader, -1 when none
	wins   atomic.Int64 // campaigns won so far
	mu     sync.Mutex
	revoke context.CancelFunc
}

func newLocalElector() *localElector {
	e := &localElector{slot: make(chan struct{}, 1)}
	e.holder.Store(-1)
	return e
}

// replica is one replica's view of the elector.
type replica struct {
	e  *localElector
	id int64
}

func (r replica) Campaign(ctx context.Context) (context.Context, func(), error) {
	select {
	case r.e.slot <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	lead, cancel := context.WithCancel(ctx)
	r.e.holder.Store(r.id)
	r.e.wins.Add(1)
	r.e.mu.Lock()
	r.e.revoke = cancel
	r.e.mu.Unlock()
	var once sync.Once
	return lead, func() {
		once.Do(func() {
			cancel()
			r.e.holder.Store(-1)
			<-r.e.slot
		})
	}, nil
}

func (e *localElector) revokeLeader() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.revoke != nil {
		e.revoke()
	}
}

// guardedStore flags any operation a replica starts while it does not lead.
type guardedStore struct {
	kv.Store
	r          replica
	violations *atomic.Int64
	ops        *atomic.Int64
}

func (g guardedStore) check(ctx context.Context) {
	// Resign cancels before it clears the holder: reading the holder first
	// and the context second never flags a replica that was just revoked.
	if g.r.e.holder.Load() != g.r.id && ctx.Err() == nil {
		g.violations.Add(1)
	}
	if ctx.Err() == nil {
		g.ops.Add(1) // work done as leader, not a revoked one's last calls
	}
}

func (g guardedStore) Scan(ctx context.Context, p []byte, o kv.ScanOptions) iter.Seq2[kv.Entry, error] {
	g.check(ctx)
	return g.Store.Scan(ctx, p, o)
}

func (g guardedStore) Get(ctx context.Context, p, k []byte) ([]byte, kv.Predicate, error) {
	g.check(ctx)
	return g.Store.Get(ctx, p, k)
}

// TestRunElectsOneLeader: replicas sharing an elector work only while
// they lead, leadership moves when revoked, and Run returns when its
// context ends.
func TestRunElectsOneLeader(t *testing.T) {
	store := kv.NewMemoryStore()
	newWorld(t, store, shape{live: 1, dead: 1, branches: 1, commits: 1, entries: 1})
	el := newLocalElector()
	var violations atomic.Int64
	ops := make([]atomic.Int64, 3)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for i := range ops {
		r := replica{e: el, id: int64(i)}
		gs := guardedStore{Store: store, r: r, violations: &violations, ops: &ops[i]}
		c := cleaner.New(gs, cleaner.Config{Interval: time.Millisecond, Elector: r, Lister: cleaner.NewMemoryLister(store), Sweep: true, SweepGrace: -1})
		wg.Go(func() {
			if err := c.Run(ctx); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	total := func() (n int64) {
		for i := range ops {
			n += ops[i].Load()
		}
		return n
	}
	deadline := time.Now().Add(30 * time.Second)
	const terms = 3
	for term := int64(1); term <= terms; term++ {
		// Wait for this term's leader to be elected and to work, then
		// revoke it: the next term needs a new campaign won.
		for el.wins.Load() < term {
			if time.Now().After(deadline) {
				t.Fatalf("term %d: no replica won the campaign after the leader was revoked", term)
			}
			time.Sleep(time.Millisecond)
		}
		for base := total(); total() < base+20; {
			if time.Now().After(deadline) {
				t.Fatalf("term %d: the leader did no work", term)
			}
			time.Sleep(time.Millisecond)
		}
		el.revokeLeader()
	}
	cancel()
	wg.Wait()
	if violations.Load() != 0 {
		t.Fatalf("%d operations by a replica that did not lead", violations.Load())
	}
	if w := el.wins.Load(); w < terms {
		t.Fatalf("%d campaigns won, want at least %d", w, terms)
	}
}

// TestEtcdElector: a second campaigner leads only after the first resigns.
func TestEtcdElector(t *testing.T) {
	store, _, _ := newEtcd(t)
	key := cleaner.ElectionKey(store.Prefix())
	a := cleaner.NewEtcdElector(store.Client(), key, "a", 5)
	b := cleaner.NewEtcdElector(store.Client(), key, "b", 5)
	leadA, resignA, err := a.Campaign(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lead   context.Context
		resign func()
		err    error
	}
	got := make(chan result, 1)
	var aResigned atomic.Bool
	go func() {
		l, r, err := b.Campaign(t.Context())
		if err == nil && !aResigned.Load() {
			t.Error("b leads while a still does")
		}
		got <- result{l, r, err}
	}()
	if leadA.Err() != nil {
		t.Fatal("a lost leadership")
	}
	aResigned.Store(true)
	resignA()
	if leadA.Err() == nil {
		t.Fatal("a's leader context still alive after resigning")
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.lead.Err() != nil {
		t.Fatal("b's leader context ended at once")
	}
	r.resign()

	// Run with the etcd elector makes passes and stops with its context.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	c := cleaner.New(store, cleaner.Config{Interval: time.Hour, Elector: a})
	go func() { done <- c.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
