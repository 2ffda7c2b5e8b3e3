package staging_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"graveler/graveler"
	"graveler/graveler/staging"
	"graveler/keys"
	"graveler/kv"
)

// fenceRead is a record outside the token, as the writer's fence reads
// the branch record.
func (e *env) fenceRead(value string) []kv.KeyRef {
	e.t.Helper()
	part := []byte("fence-" + e.base)
	if err := e.store.Set(e.ctx, part, []byte("branch"), []byte(value)); err != nil {
		e.t.Fatal(err)
	}
	return []kv.KeyRef{{Partition: part, Key: []byte("branch")}}
}

func testSetAndRead(e *env) {
	t, st := e.t, e.token("x")
	if !e.m.FencedWrites() {
		t.Fatal("a store with SetAndRead is not used for fenced writes")
	}
	reads := e.fenceRead("b1")
	got, err := e.m.SetAndRead(e.ctx, st, graveler.Key("k"), val("1"), reads)
	if err != nil || len(got) != 1 || string(got[0].Value) != "b1" {
		t.Fatalf("set and read: %v %v", got, err)
	}
	if _, err := e.m.SetAndRead(e.ctx, st, graveler.Key("gone"), nil, reads); err != nil {
		t.Fatal(err)
	}
	e.want(st, "k", val("1"))
	if v, err := e.m.Get(e.ctx, st, graveler.Key("gone")); err != nil || v != nil {
		t.Fatalf("tombstone: %v %v", v, err)
	}
	// Bad input is refused like Set's, before any request.
	before := e.store.setReads.Load()
	if _, err := e.m.SetAndRead(e.ctx, st, nil, val("1"), reads); !errors.Is(err, graveler.ErrInvalidKey) {
		t.Fatalf("empty key: %v", err)
	}
	if _, err := e.m.SetAndRead(e.ctx, st, graveler.Key("k"), &graveler.Value{}, reads); !errors.Is(err, graveler.ErrInvalidArgument) {
		t.Fatalf("value without identity: %v", err)
	}
	if _, err := e.m.SetAndRead(e.ctx, "bad token/", graveler.Key("k"), val("1"), reads); !errors.Is(err, graveler.ErrInvalidArgument) {
		t.Fatalf("bad token: %v", err)
	}
	// As many fence reads as fit beside the write and the seal marker,
	// then one more: refused before any request.
	most := make([]kv.KeyRef, kv.MaxSetAndReadOps-2)
	for i := range most {
		most[i] = kv.KeyRef{Partition: reads[0].Partition, Key: fmt.Appendf(nil, "r%03d", i)}
	}
	if _, err := e.m.SetAndRead(e.ctx, st, graveler.Key("many"), val("1"), append(most, reads[0])); !errors.Is(err, graveler.ErrInvalidArgument) {
		t.Fatalf("%d fence reads: %v, want ErrInvalidArgument", len(most)+1, err)
	}
	if n := e.store.setReads.Load() - before; n != 0 {
		t.Fatalf("%d requests for refused input", n)
	}
	if got, err := e.m.SetAndRead(e.ctx, st, graveler.Key("many"), val("1"), most); err != nil || len(got) != len(most) {
		t.Fatalf("%d fence reads: %d entries, %v", len(most), len(got), err)
	}
	if m := staging.New(struct{ kv.Store }{e.store}, staging.Config{}); m.FencedWrites() {
		t.Fatal("a store without SetAndRead claims fenced writes")
	}
}

// testSetAndReadShares holds one request in flight and checks that the
// writers arriving meanwhile share the next request, that a key written
// twice is written once with one of the values, that all writers get
// reads made after their writes, and that each writer's kv.Revisions
// notes the shared request's revision.
func testSetAndReadShares(e *env) {
	t, st := e.t, e.token("x")
	reads := e.fenceRead("b1")
	gate := make(chan struct{})
	e.store.gate.Store(&gate)
	const writers = 20
	var wg sync.WaitGroup
	errs := make(chan error, writers+1)
	wg.Go(func() {
		_, err := e.m.SetAndRead(e.ctx, st, graveler.Key("first"), val("f"), reads)
		errs <- err
	})
	// Wait until the first request is at the gate.
	for e.store.setReads.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := e.store.Set(e.ctx, reads[0].Partition, reads[0].Key, []byte("b2")); err != nil {
		t.Fatal(err)
	}
	recs := make([]*kv.Revisions, writers)
	for i := range writers {
		key := fmt.Sprintf("k%02d", i)
		if i == writers-1 {
			key = "k00" // the same key as writer 0
		}
		ctx, rec := kv.WithRevisions(e.ctx)
		recs[i] = rec
		wg.Go(func() {
			got, err := e.m.SetAndRead(ctx, st, graveler.Key(key), val(fmt.Sprint(i)), reads)
			if err == nil && string(got[0].Value) != "b2" {
				err = fmt.Errorf("writer %d read %q, made before its write", i, got[0].Value)
			}
			errs <- err
		})
	}
	// Let them all queue behind the gate (the key written twice folds
	// into one write), then open it.
	for staging.QueuedForTest(e.m) < writers {
		time.Sleep(time.Millisecond)
	}
	e.store.gate.Store(nil)
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := e.store.setReads.Load(); n != 2 {
		t.Fatalf("%d requests for %d writers queued behind one", n, writers+1)
	}
	if w := e.store.setReadWrites.Load(); w > int64(writers) {
		t.Fatalf("%d keys written for %d distinct keys", w, writers)
	}
	for i := 1; i < writers-1; i++ {
		e.want(st, fmt.Sprintf("k%02d", i), val(fmt.Sprint(i)))
	}
	if v, err := e.m.Get(e.ctx, st, graveler.Key("k00")); err != nil || (string(v.Data) != "data-0" && string(v.Data) != fmt.Sprintf("data-%d", writers-1)) {
		t.Fatalf("key written twice: %v %v", v, err)
	}
	// The shared request's revision: that of its last write.
	var shared int64
	for e, err := range e.store.Scan(e.ctx, keys.StagingPartition(string(st)), kv.ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		shared = max(shared, e.Predicate.Version())
	}
	for i, rec := range recs {
		if got := rec.Last(); got != shared {
			t.Fatalf("writer %d noted revision %d, want the shared request's %d", i, got, shared)
		}
	}
}

// testSetAndReadFailure: a failed request fails every writer that shared
// it; a writer whose context ends while it waits returns at once; and a
// batch refused for its size is retried write by write.
func testSetAndReadFailure(e *env) {
	t, st := e.t, e.token("x")
	reads := e.fenceRead("b1")
	injected := fmt.Errorf("%w: injected", kv.ErrUnavailable)
	e.store.failSetRead.Store(&injected)
	for i := range 3 {
		if _, err := e.m.SetAndRead(e.ctx, st, graveler.Key(fmt.Sprint(i)), val("1"), reads); !errors.Is(err, graveler.ErrUnavailable) {
			t.Fatalf("failed request: want ErrUnavailable, got %v", err)
		}
	}
	e.store.failSetRead.Store(nil)

	gate := make(chan struct{})
	e.store.gate.Store(&gate)
	before := e.store.setReads.Load()
	go func() { _, _ = e.m.SetAndRead(context.Background(), st, graveler.Key("held"), val("1"), reads) }()
	for e.store.setReads.Load() == before {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := e.m.SetAndRead(ctx, st, graveler.Key("waits"), val("1"), reads); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a waiting writer whose context ended: %v", err)
	}
	e.store.gate.Store(nil)
	close(gate)

	// Small kv limits: one write fits, two do not.
	small := kv.NewMemoryStoreWithLimits(kv.Limits{MaxKeySize: 1 << 10, MaxValueSize: 1 << 10})
	defer small.Close()
	cs := &countingStore{Store: small}
	m := staging.New(cs, staging.Config{})
	gate2 := make(chan struct{})
	cs.gate.Store(&gate2)
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = m.SetAndRead(e.ctx, st, graveler.Key("a"), val("1"), reads[:0]) })
	for cs.setReads.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	big := &graveler.Value{Identity: []byte("id"), Data: make([]byte, 2000)}
	var bigErr error
	wg.Go(func() { _, bigErr = m.SetAndRead(e.ctx, st, graveler.Key("big"), big, reads[:0]) })
	var okErr error
	wg.Go(func() { _, okErr = m.SetAndRead(e.ctx, st, graveler.Key("ok"), val("2"), reads[:0]) })
	for staging.QueuedForTest(m) < 2 {
		time.Sleep(time.Millisecond)
	}
	cs.gate.Store(nil)
	close(gate2)
	wg.Wait()
	if !errors.Is(bigErr, graveler.ErrInvalidArgument) {
		t.Fatalf("oversized write: %v", bigErr)
	}
	if okErr != nil {
		t.Fatalf("a write that shared a request with an oversized one: %v", okErr)
	}
	if v, err := m.Get(e.ctx, st, graveler.Key("ok")); err != nil || string(v.Data) != "data-2" {
		t.Fatalf("the write that fit: %v %v", v, err)
	}
}

func (e *env) want(st graveler.StagingToken, key string, want *graveler.Value) {
	e.t.Helper()
	v, err := e.m.Get(e.ctx, st, graveler.Key(key))
	if err != nil || v == nil || string(v.Data) != string(want.Data) || string(v.Identity) != string(want.Identity) {
		e.t.Fatalf("%s: got %v, %v; want %v", key, v, err, want)
	}
}
