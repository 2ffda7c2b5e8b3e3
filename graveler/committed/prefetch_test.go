package committed

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"graveler/graveler"
)

// heldStore holds every read from a pack of an object hold selects (by
// its parsed bytes) until gate opens, and reports each as it begins, on
// began while it has room (with walkCtx set, only reads not made with
// it). A held read ends early with its context's error; with walkCtx
// set, the other reads complete regardless of theirs, like a file or
// network read already under way. Once done is set it counts every call
// at its entry (a check after the wrapped store returned would miss the
// reads it refuses for a cancelled context). Nothing is held before
// armed is set.
type heldStore struct {
	BlobStore
	hold    func(*rangeFile) bool
	armed   atomic.Bool
	walkCtx context.Context
	began   chan int64 // each held read's offset
	gate    chan struct{}
	mu      sync.Mutex
	done    bool
	after   int
}

func newHeldStore(inner BlobStore, hold func(*rangeFile) bool) *heldStore {
	s := &heldStore{BlobStore: inner, hold: hold, began: make(chan int64, 1024), gate: make(chan struct{})}
	s.armed.Store(true)
	return s
}

// nodesOf selects the inner nodes of level (0: of any level).
func nodesOf(level int) func(*rangeFile) bool {
	return func(f *rangeFile) bool { return f.version == nodeVersion && (level == 0 || f.level == level) }
}

func isRange(f *rangeFile) bool { return f.version == leafVersion }

func (s *heldStore) GetRange(ctx context.Context, ns graveler.StorageNamespace, name string, offset, length int64) ([]byte, error) {
	s.mu.Lock()
	if s.done {
		s.after++
	}
	s.mu.Unlock()
	data, err := s.BlobStore.GetRange(ctx, ns, name, offset, length)
	if err != nil || !s.armed.Load() {
		return data, err
	}
	body, _, _ := splitLocations(data)
	if f, perr := parseRange(body); perr != nil || !s.hold(f) {
		return data, err
	}
	walk := s.walkCtx == nil || ctx == s.walkCtx
	if s.walkCtx == nil || !walk {
		select {
		case s.began <- offset:
		default:
		}
	}
	if !walk {
		<-s.gate
		return data, nil
	}
	select {
	case <-s.gate:
		return data, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// prefetchTree writes, packed, a tree of three levels or more whose
// level-1 nodes each hold a few ranges, and returns it with its records.
func prefetchTree(t *testing.T, store BlobStore, ns graveler.StorageNamespace) (graveler.MetaRangeID, []graveler.ValueRecord) {
	t.Helper()
	cfg := multiLevelConfig()
	recs := numbered(3000, "v")
	id := write(t, NewManager(store, cfg), ns, recs)
	root, err := NewManager(store, cfg).loadRoot(context.Background(), ns, id)
	if err != nil {
		t.Fatal(err)
	}
	if root.level < 3 {
		t.Fatalf("root of level %d, want at least 3", root.level)
	}
	return id, recs
}

// applyAsync starts Apply of changes onto base; its error arrives on the
// channel returned.
func applyAsync(ctx context.Context, m *Manager, ns graveler.StorageNamespace, base graveler.MetaRangeID, changes []graveler.ValueRecord) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, _, err := m.Apply(ctx, ns, base, newSliceIter(changes), graveler.ApplyOptions{})
		done <- err
	}()
	return done
}

// scattered returns a store holding a prefetchTree, the tree, and a
// change to every every-th of its keys.
func scattered(t *testing.T, every int) (BlobStore, graveler.StorageNamespace, graveler.MetaRangeID, []graveler.ValueRecord) {
	t.Helper()
	inner := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { inner.Close() })
	ns := testNS()
	base, recs := prefetchTree(t, inner, ns)
	var changes []graveler.ValueRecord
	for i := 0; i < len(recs); i += every {
		changes = append(changes, rec(string(recs[i].Key), "new", "x"))
	}
	return inner, ns, base, changes
}

// TestPrefetchReadsNodesAside: the walk does not read the inner nodes a
// commit's changes fall in one after another: while one is being read,
// the prefetcher has begun reading another. Before, the walk's goroutine
// read each node the change stream wanted, in turn, as changes arrived.
// The reads of nodes of level 1 are held: every node above them passes,
// and their siblings, under one parent or under several, must be read
// side by side.
func TestPrefetchReadsNodesAside(t *testing.T) {
	ctx := context.Background()
	inner, ns, base, changes := scattered(t, 97)
	store := newHeldStore(inner, nodesOf(1))
	m := NewManager(store, multiLevelConfig())
	// The root, read before the walk, is stored on its own: not gated.
	done := applyAsync(ctx, m, ns, base, changes)
	seen := map[int64]bool{}
	deadline := time.After(30 * time.Second)
	for len(seen) < 2 {
		select {
		case off := <-store.began:
			seen[off] = true
		case err := <-done:
			t.Fatalf("Apply ended (%v) before two node reads were in flight at once", err)
		case <-deadline:
			t.Fatalf("one node read held, %d distinct node reads began: nodes are read one after another", len(seen))
		}
	}
	close(store.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestPrefetchGivenUpReadsNoMore: an Apply whose caller gives up while the
// prefetcher's node reads are held returns, and no read begins after it
// has: the readers the walk started do not outlive it.
func TestPrefetchGivenUpReadsNoMore(t *testing.T) {
	inner, ns, base, changes := scattered(t, 53)
	store := newHeldStore(inner, nodesOf(0))
	ctx, cancel := context.WithCancel(context.Background())
	m := NewManager(store, multiLevelConfig())
	done := applyAsync(ctx, m, ns, base, changes)
	<-store.began
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply after its caller gave up: %v, want context.Canceled", err)
	}
	store.mu.Lock()
	store.done = true
	store.mu.Unlock()
	close(store.gate)
	// Anything still running would read now; give it the chance.
	time.Sleep(100 * time.Millisecond)
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.after > 0 {
		t.Fatalf("%d store reads began after Apply returned", store.after)
	}
}

// TestPrefetchReaderFinishingAfterStop: an Apply is cancelled while its
// prefetcher's readers are reading inner nodes; Apply's stop waits for
// them, and their reads then complete. A reader going on down from the
// node it read hands what is below to the other readers: it must not send
// on a queue stop has closed (a panic in a goroutine kills the process),
// nor queue work nobody will do.
func TestPrefetchReaderFinishingAfterStop(t *testing.T) {
	inner, ns, base, changes := scattered(t, 7)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := newHeldStore(inner, nodesOf(2))
	store.walkCtx = ctx
	store.armed.Store(false)
	m := NewManager(store, multiLevelConfig())
	// Every node above level 2 cached: the changes want many nodes of
	// level 2 at once, so readers hold some while the walk holds its
	// first, and going on down each meets nodes of level 1 to hand on.
	root, err := m.loadRoot(ctx, ns, base)
	if err != nil {
		t.Fatal(err)
	}
	var warm func(n *treeNode)
	warm = func(n *treeNode) {
		for i := range n.children {
			if n.level > 3 {
				c, err := m.loadChild(ctx, ns, &n.children[i], n.level)
				if err != nil {
					t.Fatal(err)
				}
				warm(c)
			}
		}
	}
	warm(root)
	store.armed.Store(true)
	done := applyAsync(ctx, m, ns, base, changes)
	<-store.began
	cancel()
	// The walk's held read ends; Apply's stop now waits for the readers
	// held at the gate. (Too short a wait only hides a failure.)
	time.Sleep(200 * time.Millisecond)
	close(store.gate)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply after its caller gave up: %v, want context.Canceled", err)
	}
}

// TestSharedLoadGivenUpIsReadAgain: of two readers of one node (or
// range), the one whose read is in flight gives up; the other, waiting
// on that read, is not handed the cancellation but reads it itself.
func TestSharedLoadGivenUpIsReadAgain(t *testing.T) {
	for _, kind := range []string{"node", "range"} {
		t.Run(kind, func(t *testing.T) {
			store := newHeldStore(NewBucketStore(BucketConfig{}), nodesOf(0))
			t.Cleanup(func() { store.Close() })
			ns := testNS()
			base, _ := prefetchTree(t, store, ns)
			root, err := NewManager(store, multiLevelConfig()).loadRoot(context.Background(), ns, base)
			if err != nil {
				t.Fatal(err)
			}
			d := root.children[0]
			m := NewManager(store, multiLevelConfig())
			load := func(ctx context.Context) error {
				if kind == "node" {
					_, err := m.loadChild(ctx, ns, &d, root.level)
					return err
				}
				// A range: the first child of the first node, whose read
				// (the node's) is let through first.
				n, err := m.loadChild(ctx, ns, &d, root.level)
				for err == nil && n.level > 1 {
					n, err = m.loadChild(ctx, ns, &n.children[0], n.level)
				}
				if err != nil {
					return err
				}
				_, err = m.loadRange(ctx, ns, &n.children[0])
				return err
			}
			if kind == "range" {
				// Nodes pass; the range's read is held.
				rs := newHeldStore(store.BlobStore, isRange)
				m = NewManager(rs, multiLevelConfig())
				runGivenUp(t, load, rs)
				return
			}
			runGivenUp(t, load, store)
		})
	}
}

// runGivenUp starts a reader that gives up once its read is held by s, a
// second reader of the same object, then the cancellation, then opens
// the gate: the first fails with context.Canceled, the second succeeds.
func runGivenUp(t *testing.T, load func(context.Context) error, s *heldStore) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { first <- load(ctx) }()
	<-s.began
	second := make(chan error, 1)
	go func() { second <- load(context.Background()) }()
	time.Sleep(20 * time.Millisecond) // the second now waits on the first's read
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the reader that gave up: %v, want context.Canceled", err)
	}
	close(s.gate)
	if err := <-second; err != nil {
		t.Fatalf("the reader that did not give up: %v", err)
	}
}

// TestConcurrentNodeLoadsReadOnce: readers that want one inner node while
// its read is in flight wait for that read rather than read it again.
func TestConcurrentNodeLoadsReadOnce(t *testing.T) {
	ctx := context.Background()
	store := newHeldStore(NewBucketStore(BucketConfig{}), nodesOf(0))
	t.Cleanup(func() { store.Close() })
	ns := testNS()
	base, _ := prefetchTree(t, store, ns)
	root, err := NewManager(store, multiLevelConfig()).loadRoot(ctx, ns, base)
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(store, multiLevelConfig())
	d := root.children[0]
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := m.loadChild(ctx, ns, &d, root.level); err != nil {
				t.Error(err)
			}
		})
	}
	<-store.began
	// The other three now wait on that read, or (if they read for
	// themselves) are held at the gate too.
	time.Sleep(50 * time.Millisecond)
	close(store.gate)
	wg.Wait()
	if n := 1 + len(store.began); n != 1 {
		t.Fatalf("%d reads of one node", n)
	}
}
