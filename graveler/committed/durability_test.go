package committed

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"graveler/graveler"
)

// crashStore models a machine whose file system keeps writes in memory
// until synced: Put lands in a volatile layer that Sync makes durable and
// crash drops. Reads see both layers, as a running machine does. Like
// Linux's syncfs, a Syncer fails when the file system met a write-back
// failure since the Syncer was taken, whoever synced since.
type crashStore struct {
	BlobStore // the durable layer
	mu        sync.Mutex
	pending   map[string][]byte // ns + "\x00" + name
	syncs     int
	// failures counts write-back failures; the failPut-th Put (counting
	// from 1, 0: none) meets one.
	failures, failPut, puts int
	// open counts the Syncers taken and not closed.
	open int
	// beforePut, when set, is called with each name Put is about to
	// store, without the lock.
	beforePut func(name string)
}

// pendingUnder counts the unsynced objects whose names start with prefix.
func (s *crashStore) pendingUnder(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k := range s.pending {
		if _, name, _ := strings.Cut(k, "\x00"); strings.HasPrefix(name, prefix) {
			n++
		}
	}
	return n
}

var errWriteBack = errors.New("crashStore: write-back failed")

func (s *crashStore) Put(ctx context.Context, ns graveler.StorageNamespace, name string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.beforePut != nil {
		s.beforePut(name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.puts++
	if s.puts == s.failPut {
		s.failures++
	}
	s.pending[string(ns)+"\x00"+name] = append([]byte(nil), data...)
	return nil
}

func (s *crashStore) Get(ctx context.Context, ns graveler.StorageNamespace, name string) ([]byte, error) {
	s.mu.Lock()
	data, ok := s.pending[string(ns)+"\x00"+name]
	s.mu.Unlock()
	if ok {
		return append([]byte(nil), data...), nil
	}
	return s.BlobStore.Get(ctx, ns, name)
}

func (s *crashStore) GetRange(ctx context.Context, ns graveler.StorageNamespace, name string, offset, length int64) ([]byte, error) {
	s.mu.Lock()
	data, ok := s.pending[string(ns)+"\x00"+name]
	s.mu.Unlock()
	if !ok {
		return s.BlobStore.GetRange(ctx, ns, name, offset, length)
	}
	if offset+length > int64(len(data)) {
		return nil, ErrShortBlob
	}
	return append([]byte(nil), data[offset:offset+length]...), nil
}

func (s *crashStore) Exists(ctx context.Context, ns graveler.StorageNamespace, name string) (bool, error) {
	s.mu.Lock()
	_, ok := s.pending[string(ns)+"\x00"+name]
	s.mu.Unlock()
	if ok {
		return true, nil
	}
	return s.BlobStore.Exists(ctx, ns, name)
}

func (s *crashStore) Stat(ctx context.Context, ns graveler.StorageNamespace, name string) (BlobInfo, error) {
	if err := s.flush(ctx, ns, name); err != nil {
		return BlobInfo{}, err
	}
	return s.BlobStore.Stat(ctx, ns, name)
}

func (s *crashStore) Touch(ctx context.Context, ns graveler.StorageNamespace, name string) error {
	if err := s.flush(ctx, ns, name); err != nil {
		return err
	}
	return s.BlobStore.Touch(ctx, ns, name)
}

// flush makes one pending object durable, where the test needs the
// durable layer to describe it (Stat, Touch): the model errs towards
// durability there, never towards loss.
func (s *crashStore) flush(ctx context.Context, ns graveler.StorageNamespace, name string) error {
	s.mu.Lock()
	data, ok := s.pending[string(ns)+"\x00"+name]
	delete(s.pending, string(ns)+"\x00"+name)
	s.mu.Unlock()
	if !ok {
		return nil
	}
	return s.BlobStore.Put(ctx, ns, name, data)
}

func (s *crashStore) BeginWrites(ctx context.Context, ns graveler.StorageNamespace) (Syncer, error) {
	inner, err := s.BlobStore.BeginWrites(ctx, ns)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open++
	return &crashSyncer{s: s, ns: ns, inner: inner, seen: s.failures}, nil
}

type crashSyncer struct {
	s      *crashStore
	ns     graveler.StorageNamespace
	inner  Syncer
	seen   int // s.failures when taken
	closed bool
}

func (c *crashSyncer) Sync(ctx context.Context) error {
	s := c.s
	s.mu.Lock()
	if s.failures > c.seen {
		s.mu.Unlock()
		return errWriteBack
	}
	s.syncs++
	var names []string
	for k := range s.pending {
		if strings.HasPrefix(k, string(c.ns)+"\x00") {
			names = append(names, strings.TrimPrefix(k, string(c.ns)+"\x00"))
		}
	}
	s.mu.Unlock()
	for _, name := range names {
		if err := s.flush(ctx, c.ns, name); err != nil {
			return err
		}
	}
	return c.inner.Sync(ctx)
}

func (c *crashSyncer) Close() error {
	c.s.mu.Lock()
	if !c.closed {
		c.closed = true
		c.s.open--
	}
	c.s.mu.Unlock()
	return c.inner.Close()
}

// syncersOpen reports the Syncers taken and not closed.
func (s *crashStore) syncersOpen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

// crash loses every write not synced and reports how many there were.
func (s *crashStore) crash() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.pending)
	s.pending = map[string][]byte{}
	return n
}

// TestTreeDurableWhenIDReturned: once a tree write (bulk, Apply, Merge)
// returns an ID, which a commit may record at once, a crash loses none of
// the tree's objects. The store loses every write not synced, so a writer
// that handed out an ID before syncing fails here.
func TestTreeDurableWhenIDReturned(t *testing.T) {
	ctx := context.Background()
	durable := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { durable.Close() })
	ns := graveler.StorageNamespace("mem://durability")
	store := &crashStore{BlobStore: durable, pending: map[string][]byte{}}
	cfg := multiLevelConfig()
	m := NewManager(store, cfg)

	check := func(what string, id graveler.MetaRangeID, want []graveler.ValueRecord) {
		t.Helper()
		if lost := store.crash(); lost != 0 {
			t.Fatalf("%s: %d objects were still unsynced when the tree's ID was returned", what, lost)
		}
		if n := store.syncersOpen(); n != 0 {
			t.Fatalf("%s: %d Syncers left open", what, n)
		}
		// A restarted daemon: nothing cached.
		fresh := NewManager(durable, cfg)
		if err := CheckTreeStored(ctx, durable, ns, id); err != nil {
			t.Fatalf("%s: after a crash: %v", what, err)
		}
		it, err := fresh.List(ctx, ns, id)
		if err != nil {
			t.Fatal(err)
		}
		got := collect(t, it)
		if err := sameRecords(got, want); err != nil {
			t.Fatalf("%s: after a crash: %v", what, err)
		}
	}

	recs := numbered(400, "v")
	base := write(t, m, ns, recs)
	if root, err := ReadTreeNode(ctx, durable, ns, base); err != nil || root.Level < 3 {
		t.Fatalf("base tree: %v (want 3 levels or more)", err)
	}
	check("bulk write", base, recs)

	var changes []graveler.ValueRecord
	want := append([]graveler.ValueRecord(nil), recs...)
	for i := 7; i < len(recs); i += 37 {
		r := rec(string(recs[i].Key), fmt.Sprint("w", i), "changed")
		changes = append(changes, r)
		want[i] = r
	}
	applied, _, err := m.Apply(ctx, ns, base, newSliceIter(changes), graveler.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("apply", applied, want)

	other, _, err := m.Apply(ctx, ns, base, newSliceIter([]graveler.ValueRecord{rec("zz-new", "n", "n")}), graveler.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("apply of a new key", other, append(append([]graveler.ValueRecord(nil), recs...), rec("zz-new", "n", "n")))
	merged, _, err := m.Merge(ctx, ns, applied, other, base, graveler.MergeStrategyNone)
	if err != nil {
		t.Fatal(err)
	}
	check("merge", merged, append(append([]graveler.ValueRecord(nil), want...), rec("zz-new", "n", "n")))
	if store.syncs == 0 {
		t.Fatal("no tree write synced the store")
	}
}

// TestRootReplacedOnlyOverDurablePacks: the same entries written again
// (a revert, a retried commit) make a root of an ID already stored, maybe
// named by a recorded commit, and Put replaces it with one naming this
// write's packs. So the root goes to the store only once every pack it
// names is durable: a crash between the two would leave the recorded
// commit's tree naming packs that are lost.
func TestRootReplacedOnlyOverDurablePacks(t *testing.T) {
	ctx := context.Background()
	durable := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { durable.Close() })
	ns := graveler.StorageNamespace("mem://root-replaced")
	cfg := multiLevelConfig()
	recs := numbered(400, "v")
	first := write(t, NewManager(durable, cfg), ns, recs)

	store := &crashStore{BlobStore: durable, pending: map[string][]byte{}}
	roots := 0
	store.beforePut = func(name string) {
		if !strings.HasPrefix(name, metarangesPrefix) {
			return
		}
		roots++
		if n := store.pendingUnder(packsPrefix); n != 0 {
			t.Errorf("the root %s was stored with %d packs not yet durable", name, n)
		}
	}
	again, err := NewManager(store, cfg).WriteMetaRangeByIterator(ctx, ns, newSliceIter(recs))
	if err != nil {
		t.Fatal(err)
	}
	if again != first || roots != 1 {
		t.Fatalf("the same entries gave %s, then %s (%d roots stored)", first, again, roots)
	}
	if lost := store.crash(); lost != 0 {
		t.Fatalf("%d objects unsynced when the ID was returned", lost)
	}
	root, err := ReadTreeNode(ctx, durable, ns, first)
	if err != nil {
		t.Fatal(err)
	}
	if !root.Children[0].Loc.Packed() {
		t.Fatal("the rewritten root names no pack")
	}
	if err := CheckTreeStored(ctx, durable, ns, first); err != nil {
		t.Fatal(err)
	}
}

// TestNamespaceMarkerDurable: the marker CheckNamespace writes (which the
// cleaner needs to empty a deleted repository's namespace) survives a
// crash right after it returns.
func TestNamespaceMarkerDurable(t *testing.T) {
	ctx := context.Background()
	durable := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { durable.Close() })
	ns := graveler.StorageNamespace("mem://marker-durability")
	store := &crashStore{BlobStore: durable, pending: map[string][]byte{}}
	if err := NewManager(store, Config{}).CheckNamespace(ctx, ns, "_graveler/marker", []byte("mine")); err != nil {
		t.Fatal(err)
	}
	if lost := store.crash(); lost != 0 {
		t.Fatalf("%d objects unsynced when CheckNamespace returned", lost)
	}
	got, err := durable.Get(ctx, ns, "_graveler/marker")
	if err != nil || string(got) != "mine" {
		t.Fatalf("after a crash: %q %v", got, err)
	}
}

// TestWriteBackFailureFailsTheWriter: a write-back failure met after a
// writer's first write fails the writer's sync, so no tree ID is handed
// out for objects that may not be on disk; a writer that took its Syncer
// only before the root (after the failure) would not hear of it, as
// syncfs does not tell a descriptor opened after a failure about it.
func TestWriteBackFailureFailsTheWriter(t *testing.T) {
	ctx := context.Background()
	durable := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { durable.Close() })
	ns := graveler.StorageNamespace("mem://write-back")
	cfg := multiLevelConfig()
	// Packs of a few objects, so that the write makes several Puts.
	cfg.PackBytes = 2 << 10
	recs := numbered(400, "v")
	for _, failPut := range []int{1, 5} {
		store := &crashStore{BlobStore: durable, pending: map[string][]byte{}, failPut: failPut}
		m := NewManager(store, cfg)
		if _, err := m.WriteMetaRangeByIterator(ctx, ns, newSliceIter(recs)); !errors.Is(err, errWriteBack) {
			t.Fatalf("write-back failure at put %d: the write returned %v, want the failure", failPut, err)
		}
		if n := store.syncersOpen(); n != 0 {
			t.Fatalf("%d Syncers left open after a failed write", n)
		}
	}
	// Another writer's failure before this writer began is not this
	// writer's: it succeeds.
	store := &crashStore{BlobStore: durable, pending: map[string][]byte{}, failPut: 1}
	if err := store.Put(ctx, ns, "ranges/other", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := NewManager(store, cfg).WriteMetaRangeByIterator(ctx, ns, newSliceIter(recs)); err != nil {
		t.Fatalf("a failure before the writer began failed it: %v", err)
	}
}

// hookStore passes Touches and Syncs on, calling its hooks (each may be
// nil) before and after each Touch and at each Sync's start and end.
type hookStore struct {
	BlobStore
	beforeTouch, afterTouch func(name string)
	syncBegun, syncDone     func()
}

func (s *hookStore) Touch(ctx context.Context, ns graveler.StorageNamespace, name string) error {
	if s.beforeTouch != nil {
		s.beforeTouch(name)
	}
	err := s.BlobStore.Touch(ctx, ns, name)
	if s.afterTouch != nil {
		s.afterTouch(name)
	}
	return err
}

func (s *hookStore) BeginWrites(ctx context.Context, ns graveler.StorageNamespace) (Syncer, error) {
	inner, err := s.BlobStore.BeginWrites(ctx, ns)
	if err != nil {
		return nil, err
	}
	return &hookSyncer{Syncer: inner, s: s}, nil
}

type hookSyncer struct {
	Syncer
	s *hookStore
}

func (h *hookSyncer) Sync(ctx context.Context) error {
	if h.s.syncBegun != nil {
		h.s.syncBegun()
	}
	err := h.Syncer.Sync(ctx)
	if h.s.syncDone != nil {
		h.s.syncDone()
	}
	return err
}

// gate is a channel closed once (open), which a hook waits on (pass), up to
// a few seconds so that a writer that never opens it is slow, not stuck.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate() *gate  { return &gate{ch: make(chan struct{})} }
func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }
func (g *gate) pass() {
	select {
	case <-g.ch:
	case <-time.After(5 * time.Second):
	}
}

// agedTree writes a tree of several levels to a file:// namespace and
// makes every object in it older than half the GC grace, so a write onto
// it by a Manager that remembers nothing touches the children it reuses.
func agedTree(t *testing.T) (ns graveler.StorageNamespace, durable BlobStore, cfg Config, base graveler.MetaRangeID, last graveler.ValueRecord) {
	t.Helper()
	ns, dir := fileNS(t)
	durable = NewBucketStore(BucketConfig{})
	t.Cleanup(func() { durable.Close() })
	cfg = multiLevelConfig()
	cfg.GCGrace = 6 * time.Hour
	recs := numbered(400, "v")
	base = write(t, NewManager(durable, cfg), ns, recs)
	ageFiles(t, dir, time.Now().Add(-10*time.Hour))
	return ns, durable, cfg, base, recs[len(recs)-1]
}

// ageFiles sets the modification time of every file under dir.
func ageFiles(t *testing.T, dir string, at time.Time) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return os.Chtimes(p, at, at)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTouchesSyncedWhenIDReturned: the objects a tree write touches to
// keep them from the collector (children older than half the GC grace)
// have their new times made durable before the tree's ID is handed out:
// a Sync begins after the last Touch. A crash that lost a touch would let
// a collection that marked before the commit delete an object the
// recorded commit names. Each Touch waits for some Sync to have begun, so
// a writer that syncs while it checks its children's times touches after
// that sync began: only a sync begun later covers the touch.
func TestTouchesSyncedWhenIDReturned(t *testing.T) {
	ctx := context.Background()
	ns, durable, cfg, base, last := agedTree(t)
	var (
		mu     sync.Mutex
		events []string
	)
	note := func(e string) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	begun := newGate()
	store := &hookStore{
		BlobStore:   durable,
		beforeTouch: func(string) { begun.pass() },
		afterTouch:  func(name string) { note("touch " + name) },
		syncBegun:   func() { note("sync"); begun.open() },
	}
	// A restarted gravelerd: nothing remembered, every child is asked about.
	m := NewManager(store, cfg)
	if _, _, err := m.Apply(ctx, ns, base, newSliceIter([]graveler.ValueRecord{rec(string(last.Key), "x", "x")}), graveler.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	lastTouch, lastSync := -1, -1
	for i, e := range events {
		if strings.HasPrefix(e, "touch ") {
			lastTouch = i
		} else {
			lastSync = i
		}
	}
	if lastTouch < 0 {
		t.Fatalf("nothing touched (events %v): the test's objects were not old enough", events)
	}
	if lastSync < lastTouch {
		t.Fatalf("the last touch came after the last sync began: %v", events)
	}
}

// TestTouchWriteBackFailureFailsTheWriter: a write-back failure met while
// the writer touches the old children its new nodes name, after its first
// sync returned (each Touch waits for that), fails the write: the touched
// times may not be on disk, so no tree ID is handed out.
func TestTouchWriteBackFailureFailsTheWriter(t *testing.T) {
	ctx := context.Background()
	ns, durable, cfg, base, last := agedTree(t)
	crash := &crashStore{BlobStore: durable, pending: map[string][]byte{}}
	synced := newGate()
	store := &hookStore{
		BlobStore: crash,
		beforeTouch: func(string) {
			synced.pass()
			crash.mu.Lock()
			crash.failures++
			crash.mu.Unlock()
		},
		syncDone: synced.open,
	}
	m := NewManager(store, cfg)
	_, _, err := m.Apply(ctx, ns, base, newSliceIter([]graveler.ValueRecord{rec(string(last.Key), "x", "x")}), graveler.ApplyOptions{})
	if !errors.Is(err, errWriteBack) {
		t.Fatalf("a write-back failure during the touches: the write returned %v, want the failure", err)
	}
	if n := crash.syncersOpen(); n != 0 {
		t.Fatalf("%d Syncers left open after a failed write", n)
	}
}

// TestCallerGivesUpDuringTouches: a caller that gives up while the writer
// touches its old children (its first sync begun) gets its context's
// error and no tree ID, and the writer waits for the sync in flight
// before it releases the Syncer.
func TestCallerGivesUpDuringTouches(t *testing.T) {
	ns, durable, cfg, base, last := agedTree(t)
	crash := &crashStore{BlobStore: durable, pending: map[string][]byte{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	begun := newGate()
	var syncing, overlapped atomic.Int64
	store := &hookStore{
		BlobStore:   crash,
		beforeTouch: func(string) { begun.pass(); cancel() },
		syncBegun:   func() { syncing.Add(1); begun.open() },
		syncDone: func() {
			// A slow sync: a writer that did not wait for it would
			// return, and close its Syncer, meanwhile.
			time.Sleep(50 * time.Millisecond)
			if crash.syncersOpen() == 0 {
				overlapped.Add(1) // the Syncer was closed under this sync
			}
			syncing.Add(-1)
		},
	}
	id, _, err := NewManager(store, cfg).Apply(ctx, ns, base, newSliceIter([]graveler.ValueRecord{rec(string(last.Key), "x", "x")}), graveler.ApplyOptions{})
	if !errors.Is(err, context.Canceled) || id != "" {
		t.Fatalf("Apply after its caller gave up: %q, %v; want no ID and context.Canceled", id, err)
	}
	if n := crash.syncersOpen(); n != 0 {
		t.Fatalf("%d Syncers left open", n)
	}
	if syncing.Load() != 0 || overlapped.Load() != 0 {
		t.Fatalf("a sync was still running (%d) or outlived its Syncer (%d) when Apply returned", syncing.Load(), overlapped.Load())
	}
}
