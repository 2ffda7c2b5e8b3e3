package committed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"graveler/graveler"
)

// spanStore records every slice read from a pack, and can run a hook
// before each read.
type spanStore struct {
	BlobStore
	mu     sync.Mutex
	spans  []Location
	before func(n int)
}

func (s *spanStore) GetRange(ctx context.Context, ns graveler.StorageNamespace, name string, offset, length int64) ([]byte, error) {
	s.mu.Lock()
	s.spans = append(s.spans, Location{Pack: strings.TrimPrefix(name, packsPrefix), Offset: offset, Length: length})
	n, before := len(s.spans), s.before
	s.mu.Unlock()
	if before != nil {
		before(n)
	}
	return s.BlobStore.GetRange(ctx, ns, name, offset, length)
}

func (s *spanStore) reset() []Location {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.spans
	s.spans = nil
	return out
}

// rangeReads lists, per read that began at a range, the ranges it
// covered (as indexes into ranges); reads of inner nodes are left out.
func rangeReads(ranges []RangeDescriptor, spans []Location) [][]int {
	var out [][]int
	for _, sp := range spans {
		var covered []int
		for i, d := range ranges {
			if d.Loc.Pack == sp.Pack && d.Loc.Offset >= sp.Offset && d.Loc.Offset+d.Loc.Length <= sp.Offset+sp.Length {
				covered = append(covered, i)
			}
		}
		if len(covered) > 0 {
			out = append(out, covered)
		}
	}
	return out
}

// readAheadTree writes 3,000 entries in ranges of about 8 records under
// nodes of many children (one pack) and returns the store, its records
// and its ranges.
func readAheadTree(t *testing.T) (*spanStore, graveler.StorageNamespace, graveler.MetaRangeID, []graveler.ValueRecord, []RangeDescriptor) {
	t.Helper()
	inner := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { inner.Close() })
	store := &spanStore{BlobStore: inner}
	ns := testNS()
	recs := numbered(3000, "v")
	id := write(t, NewManager(store, tinyConfig), ns, recs)
	ranges, err := ReadMetaRange(context.Background(), store, ns, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(ranges) < 200 || !ranges[0].Loc.Packed() {
		t.Fatalf("%d ranges (packed %v), want hundreds in a pack", len(ranges), ranges[0].Loc.Packed())
	}
	store.reset()
	return store, ns, id, recs, ranges
}

func wantRecords(t *testing.T, got, want []graveler.ValueRecord) {
	t.Helper()
	if err := sameRecords(got, want); err != nil {
		t.Fatal(err)
	}
}

// listWith lists tree id through m, reading ahead (as List does) or one
// range at a time.
func listWith(t *testing.T, m *Manager, ns graveler.StorageNamespace, id graveler.MetaRangeID, ahead bool) []graveler.ValueRecord {
	t.Helper()
	ctx := context.Background()
	if ahead {
		it, err := m.List(ctx, ns, id)
		if err != nil {
			t.Fatal(err)
		}
		return collect(t, it)
	}
	root, err := m.loadRoot(ctx, ns, id)
	if err != nil {
		t.Fatal(err)
	}
	return collect(t, &listIter{c: newCursor(ctx, m, ns, id, root), pending: true})
}

// TestListReadsAhead: a listing reads runs of adjacent ranges in one read
// each, every range exactly once, the runs doubling from readAheadStart
// to readAheadRanges; without read-ahead it reads one range per read.
func TestListReadsAhead(t *testing.T) {
	store, ns, id, recs, ranges := readAheadTree(t)

	m := NewManager(store, tinyConfig)
	wantRecords(t, listWith(t, m, ns, id, true), recs)
	spans := store.reset()
	reads := rangeReads(ranges, spans)
	// Each range read ahead is cached in memory of its own: one holding
	// the whole run would keep it alive after the others were evicted,
	// beyond what the cache counts.
	for _, r := range reads {
		for k := 1; k < len(r); k++ {
			a, _ := m.ranges.get(rangeCacheKey(ns, string(ranges[r[k-1]].ID)))
			b, _ := m.ranges.get(rangeCacheKey(ns, string(ranges[r[k]].ID)))
			if a == nil || b == nil {
				t.Fatalf("ranges %d and %d not cached", r[k-1], r[k])
			}
			if n := len(a.data); cap(a.data) > n && &a.data[:n+1][n] == &b.data[0] {
				t.Fatalf("ranges %d and %d share one buffer", r[k-1], r[k])
			}
		}
	}
	for i, n := range readsPerRange(ranges, spans) {
		if n != 1 {
			t.Fatalf("range %d read %d times, want once", i, n)
		}
	}
	if len(reads) > len(ranges)/8 {
		t.Errorf("%d reads for %d ranges, want at most %d", len(reads), len(ranges), len(ranges)/8)
	}
	if len(reads[0]) != readAheadStart || len(reads[1]) != 2*readAheadStart {
		t.Errorf("first runs of %d and %d ranges, want %d and %d", len(reads[0]), len(reads[1]), readAheadStart, 2*readAheadStart)
	}
	for _, r := range reads {
		if len(r) > readAheadRanges {
			t.Fatalf("a run of %d ranges, want at most %d", len(r), readAheadRanges)
		}
	}

	m = NewManager(store, tinyConfig)
	wantRecords(t, listWith(t, m, ns, id, false), recs)
	if reads := rangeReads(ranges, store.reset()); len(reads) != len(ranges) {
		t.Errorf("without read-ahead: %d reads for %d ranges", len(reads), len(ranges))
	}
}

// TestListReadAheadAfterSeek: a seek starts the runs over, so a page of a
// few entries reads at most readAheadStart ranges.
func TestListReadAheadAfterSeek(t *testing.T) {
	ctx := context.Background()
	store, ns, id, _, ranges := readAheadTree(t)
	m := NewManager(store, tinyConfig)
	it, err := m.List(ctx, ns, id)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200 && it.Next(); i++ {
	}
	store.reset()

	mid := len(ranges) / 2
	it.SeekGE(ranges[mid].MinKey)
	if !it.Next() || !bytes.Equal(it.Value().Key, ranges[mid].MinKey) {
		t.Fatalf("after seeking to %q: %v", ranges[mid].MinKey, it.Value())
	}
	reads := rangeReads(ranges, store.reset())
	if len(reads) != 1 || reads[0][0] != mid || len(reads[0]) > readAheadStart {
		t.Fatalf("a page of one entry read ranges %v, want one read from %d of at most %d", reads, mid, readAheadStart)
	}
}

// TestListReadAheadSkipsCached: a range already cached ends a run before
// it and is not read again.
func TestListReadAheadSkipsCached(t *testing.T) {
	ctx := context.Background()
	store, ns, id, recs, ranges := readAheadTree(t)
	wantRecords(t, listWith(t, NewManager(store, tinyConfig), ns, id, true), recs)
	var cached int
	for _, r := range rangeReads(ranges, store.reset()) {
		if len(r) >= 8 {
			cached = r[len(r)/2]
			break
		}
	}
	if cached == 0 {
		t.Fatal("no run of 8 ranges")
	}
	m := NewManager(store, tinyConfig)
	if _, err := m.Get(ctx, ns, id, ranges[cached].MinKey); err != nil {
		t.Fatal(err)
	}
	store.reset()
	wantRecords(t, listWith(t, m, ns, id, true), recs)
	for _, r := range rangeReads(ranges, store.reset()) {
		if slices.Contains(r, cached) {
			t.Fatalf("a read of ranges %v; range %d was cached", r, cached)
		}
	}
}

// TestListReadAheadDamagedRange: a damaged range inside a run is
// reported as it was without read-ahead: the listing returns every
// record before it, then ErrCorrupt naming it. The run's other ranges,
// before and after it, are cached.
func TestListReadAheadDamagedRange(t *testing.T) {
	ctx := context.Background()
	store, ns, id, recs, ranges := readAheadTree(t)
	wantRecords(t, listWith(t, NewManager(store, tinyConfig), ns, id, true), recs)
	run := rangeReads(ranges, store.reset())[1]
	if len(run) < 3 {
		t.Fatalf("second run %v, want at least 3 ranges", run)
	}
	bad := run[1]
	storedFlip(t, store, ns, ranges[bad], 1)
	m := NewManager(store, tinyConfig)
	it, err := m.List(ctx, ns, id)
	if err != nil {
		t.Fatal(err)
	}
	var got []graveler.ValueRecord
	for it.Next() {
		got = append(got, *it.Value())
	}
	if !errors.Is(it.Err(), ErrCorrupt) || !strings.Contains(it.Err().Error(), string(ranges[bad].ID)) {
		t.Fatalf("listing through damaged range %s: %v", ranges[bad].ID, it.Err())
	}
	before := 0
	for _, d := range ranges[:bad] {
		before += d.Count
	}
	wantRecords(t, got, recs[:before])
	spans := store.reset()
	reads := rangeReads(ranges, spans)
	if len(reads) < 2 || !slices.Equal(reads[1], run) {
		t.Fatalf("reads %v: the damaged range was not read in the run %v", reads, run)
	}
	for _, i := range []int{run[0], run[2]} {
		if !m.ranges.has(rangeCacheKey(ns, string(ranges[i].ID))) {
			t.Errorf("range %d of the run %v is not cached", i, run)
		}
	}
	// Only the damaged range is read a second time, on its own.
	for i, n := range readsPerRange(ranges, spans) {
		if want := 1; i == bad {
			want = 2
			if n != want {
				t.Errorf("damaged range %d read %d times, want %d", i, n, want)
			}
		} else if i <= run[len(run)-1] && n != want {
			t.Errorf("range %d read %d times, want %d", i, n, want)
		}
	}
}

// TestReadAheadWaiterReadsItself: a Get that waits on a run read ahead
// whose check of its range fails reads the range itself and reports what
// is wrong with it (ErrCorrupt), not that the run did not decode it.
func TestReadAheadWaiterReadsItself(t *testing.T) {
	ctx := context.Background()
	base, ns, id, _, ranges := readAheadTree(t)
	storedFlip(t, base, ns, ranges[1], 1)
	g := &gateStore{BlobStore: base, loc: ranges[0].Loc, second: make(chan struct{})}
	m := NewManager(g, tinyConfig)
	root, err := m.loadRoot(ctx, ns, id)
	if err != nil {
		t.Fatal(err)
	}
	listed := make(chan error, 1)
	go func() {
		it := &listIter{c: newCursor(ctx, m, ns, id, root), pending: true}
		it.c.ahead = readAheadStart
		it.Next()
		listed <- it.Err()
	}()
	// The run [0 1] is being read (held): a Get of range 1 waits on it.
	for g.n.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	m.mu.Lock()
	_, busy := m.loading[rangeCacheKey(ns, string(ranges[1].ID))]
	m.mu.Unlock()
	if !busy {
		t.Fatal("range 1 is not being read with range 0")
	}
	got := make(chan error, 1)
	go func() {
		_, err := m.Get(ctx, ns, id, ranges[1].MinKey)
		got <- err
	}()
	// Time for the Get to reach its wait on the run. Were it late, it
	// would read range 1 itself after the run and the test would pass
	// without the wait; it cannot fail because of it.
	time.Sleep(100 * time.Millisecond)
	g.release() // let the run's read go on
	if err := <-listed; err != nil {
		t.Fatalf("listing the first record: %v", err)
	}
	if err := <-got; !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get of the damaged range waiting on the run: %v, want ErrCorrupt", err)
	}
}

// TestReadAheadBounds: a run stays within readAheadBytes (ranges of one
// large record each here).
func TestReadAheadBounds(t *testing.T) {
	inner := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { inner.Close() })
	store := &spanStore{BlobStore: inner}
	ns := testNS()
	var recs []graveler.ValueRecord
	big := strings.Repeat("x", 20<<10)
	for i := range 100 {
		recs = append(recs, rec(fmt.Sprintf("key-%04d", i), "v", big))
	}
	cfg := tinyConfig
	cfg.MaxRangeSize = 0
	id := write(t, NewManager(store, cfg), ns, recs)
	store.reset()
	wantRecords(t, listWith(t, NewManager(store, cfg), ns, id, true), recs)
	spans := store.reset()
	longest := int64(0)
	for _, sp := range spans {
		longest = max(longest, sp.Length)
	}
	if longest > readAheadBytes || longest < readAheadBytes/2 {
		t.Fatalf("longest read %d bytes, want at most %d and near it", longest, readAheadBytes)
	}
}

// TestListReadAheadGivenUp: a listing whose caller gives up during a
// run's read ends with the context's error and reads nothing more.
func TestListReadAheadGivenUp(t *testing.T) {
	store, ns, id, _, ranges := readAheadTree(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	it, err := NewManager(store, tinyConfig).List(ctx, ns, id)
	if err != nil {
		t.Fatal(err)
	}
	store.before = func(n int) {
		if n == 3 {
			cancel()
		}
	}
	rows := 0
	for it.Next() {
		rows++
	}
	if !errors.Is(it.Err(), context.Canceled) {
		t.Fatalf("listing given up: %v after %d rows", it.Err(), rows)
	}
	spans := store.reset()
	if len(spans) > 3 {
		t.Fatalf("%d reads, want none after the third, during which the caller gave up", len(spans))
	}
	if rows >= len(ranges) {
		t.Fatalf("%d rows listed after giving up", rows)
	}
}

// readsPerRange counts, per range, the store reads that covered it.
func readsPerRange(ranges []RangeDescriptor, spans []Location) []int {
	seen := make([]int, len(ranges))
	for _, r := range rangeReads(ranges, spans) {
		for _, i := range r {
			seen[i]++
		}
	}
	return seen
}

// TestListReadAheadSmallRangeCache: with a range cache of room for a few
// ranges, a listing still reads every range once: a run is at most an
// eighth of the cache (a run that filled it would evict its own first
// range, the one the cursor wants next, and ranges read ahead would
// evict each other before the listing reached them).
func TestListReadAheadSmallRangeCache(t *testing.T) {
	ctx := context.Background()
	store, ns, id, recs, ranges := readAheadTree(t)
	var biggest int64
	for _, d := range ranges {
		biggest = max(biggest, d.Loc.Length)
	}
	cfg := tinyConfig
	cfg.RangeCacheBytes = int(4 * biggest) // room for 4 ranges

	// Control: one read per range without read-ahead.
	m := NewManager(store, cfg)
	root, err := m.loadRoot(ctx, ns, id)
	if err != nil {
		t.Fatal(err)
	}
	store.reset()
	wantRecords(t, collect(t, &listIter{c: newCursor(ctx, m, ns, id, root), pending: true}), recs)
	for i, n := range readsPerRange(ranges, store.reset()) {
		if n != 1 {
			t.Fatalf("control: range %d read %d times", i, n)
		}
	}

	wantRecords(t, listWith(t, NewManager(store, cfg), ns, id, true), recs)
	seen := readsPerRange(ranges, store.reset())
	var extra, worst int
	for _, n := range seen {
		extra += n - 1
		worst = max(worst, n)
	}
	if extra > 0 {
		t.Fatalf("RangeCacheBytes %d: %d range reads beyond one each for %d ranges (one range read %d times)", cfg.RangeCacheBytes, extra, len(ranges), worst)
	}
}

// gateStore counts reads of a pack that cover loc; the first waits
// (up to a second) for a second such read to begin.
type gateStore struct {
	BlobStore
	loc    Location
	n      atomic.Int32
	second chan struct{}
	once   sync.Once
}

// release lets the held read go on.
func (s *gateStore) release() { s.once.Do(func() { close(s.second) }) }

func (s *gateStore) GetRange(ctx context.Context, ns graveler.StorageNamespace, name string, offset, length int64) ([]byte, error) {
	if strings.TrimPrefix(name, packsPrefix) == s.loc.Pack && offset <= s.loc.Offset && s.loc.Offset+s.loc.Length <= offset+length {
		switch s.n.Add(1) {
		case 1:
			select {
			case <-s.second:
			case <-time.After(time.Second):
			}
		case 2:
			s.release()
		}
	}
	return s.BlobStore.GetRange(ctx, ns, name, offset, length)
}

// TestListReadAheadReadOnce: two listings that enter the same cold range
// at once read it once, with read-ahead as without (the package doc:
// "One range or node is read once however many readers want it at the
// same time"): a run's ranges count as being read until it is done.
func TestListReadAheadReadOnce(t *testing.T) {
	ctx := context.Background()
	for _, ahead := range []bool{false, true} {
		t.Run(fmt.Sprintf("ahead=%v", ahead), func(t *testing.T) {
			base, ns, id, _, ranges := readAheadTree(t)
			g := &gateStore{BlobStore: base, loc: ranges[0].Loc, second: make(chan struct{})}
			m := NewManager(g, tinyConfig)
			if _, err := m.loadRoot(ctx, ns, id); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var it graveler.ValueIterator
					if ahead {
						var err error
						if it, err = m.List(ctx, ns, id); err != nil {
							t.Error(err)
							return
						}
					} else {
						root, _ := m.loadRoot(ctx, ns, id)
						it = &listIter{c: newCursor(ctx, m, ns, id, root), pending: true}
					}
					if !it.Next() {
						t.Errorf("no first record: %v", it.Err())
					}
				}()
			}
			wg.Wait()
			if n := g.n.Load(); n != 1 {
				t.Fatalf("range 0 read %d times by two listings at once, want once", n)
			}
		})
	}
}

// TestListReadAheadDiskCacheSlices: CachedBlobStore (a non-file
// namespace) keys a pack slice by its offset and length, and a run is
// cached range by range under those keys: ranges on local disk one at a
// time (a Get read them) are not fetched again by a listing, and ranges a
// listing cached are not fetched again by a Get of a Manager whose memory
// is cold (another process, after a restart).
func TestListReadAheadDiskCacheSlices(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (*spanStore, BlobStore, graveler.StorageNamespace, graveler.MetaRangeID, []graveler.ValueRecord, []RangeDescriptor) {
		inner := &spanStore{BlobStore: NewBucketStore(BucketConfig{})}
		t.Cleanup(func() { inner.Close() })
		cached, err := NewCachedBlobStore(inner, CacheConfig{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		ns := testNS() // mem://, not file:
		recs := numbered(3000, "v")
		id := write(t, NewManager(cached, tinyConfig), ns, recs)
		ranges, err := ReadMetaRange(ctx, cached, ns, id)
		if err != nil {
			t.Fatal(err)
		}
		return inner, cached, ns, id, recs, ranges
	}
	innerRangeReads := func(ranges []RangeDescriptor, inner *spanStore) int {
		return len(rangeReads(ranges, inner.reset()))
	}

	t.Run("gets then a listing", func(t *testing.T) {
		inner, cached, ns, id, recs, ranges := setup(t)
		warm := NewManager(cached, tinyConfig)
		for _, d := range ranges {
			if _, err := warm.Get(ctx, ns, id, d.MinKey); err != nil {
				t.Fatal(err)
			}
		}
		inner.reset()
		// Control: a listing one range at a time reads nothing behind.
		plain := NewManager(cached, tinyConfig)
		wantRecords(t, listWith(t, plain, ns, id, false), recs)
		if n := innerRangeReads(ranges, inner); n > 0 {
			t.Fatalf("control: %d reads behind the disk cache", n)
		}
		wantRecords(t, listWith(t, NewManager(cached, tinyConfig), ns, id, true), recs)
		if n := innerRangeReads(ranges, inner); n > 0 {
			t.Fatalf("a listing read %d slices of ranges from the store behind the disk cache; every range was on disk", n)
		}
	})
	// A listing, one range at a time (the control) or reading ahead, then
	// a Get of every range through a Manager whose memory is cold.
	for _, ahead := range []bool{false, true} {
		t.Run(fmt.Sprintf("a listing (ahead=%v) then gets", ahead), func(t *testing.T) {
			inner, cached, ns, id, recs, ranges := setup(t)
			wantRecords(t, listWith(t, NewManager(cached, tinyConfig), ns, id, ahead), recs)
			inner.reset()
			cold := NewManager(cached, tinyConfig)
			for _, d := range ranges {
				if _, err := cold.Get(ctx, ns, id, d.MinKey); err != nil {
					t.Fatal(err)
				}
			}
			if n := innerRangeReads(ranges, inner); n > 0 {
				t.Fatalf("Gets read %d of %d ranges from the store behind the disk cache; a listing had read them all", n, len(ranges))
			}
		})
	}
}

// TestListReadAheadSeveralPacks: a tree whose ranges sit in several packs
// (an Apply onto a base) lists right, and every range is read once.
func TestListReadAheadSeveralPacks(t *testing.T) {
	ctx := context.Background()
	store, ns, id, recs, _ := readAheadTree(t)
	var changes []graveler.ValueRecord
	want := append([]graveler.ValueRecord(nil), recs...)
	for i := 5; i < len(recs); i += 97 {
		want[i] = rec(string(recs[i].Key), "new", "x")
		changes = append(changes, want[i])
	}
	next, _, err := NewManager(store, tinyConfig).Apply(ctx, ns, id, newSliceIter(changes), graveler.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ranges, err := ReadMetaRange(ctx, store, ns, next)
	if err != nil {
		t.Fatal(err)
	}
	packs := map[string]bool{}
	for _, d := range ranges {
		packs[d.Loc.Pack] = true
	}
	if len(packs) < 2 {
		t.Fatalf("ranges in %d packs", len(packs))
	}
	store.reset()
	wantRecords(t, listWith(t, NewManager(store, tinyConfig), ns, next, true), want)
	spans := store.reset()
	for i, n := range readsPerRange(ranges, spans) {
		if n != 1 {
			t.Fatalf("range %d read %d times", i, n)
		}
	}
	t.Logf("%d ranges in %d packs, %d reads", len(ranges), len(packs), len(spans))
}
