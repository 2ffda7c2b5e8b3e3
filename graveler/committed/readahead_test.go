package committed

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

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

// TestListReadsAhead: a listing reads runs of adjacent ranges in one read
// each, every range exactly once, the runs doubling from readAheadStart
// to readAheadRanges; without read-ahead it reads one range per read.
func TestListReadsAhead(t *testing.T) {
	ctx := context.Background()
	store, ns, id, recs, ranges := readAheadTree(t)

	m := NewManager(store, tinyConfig)
	it, err := m.List(ctx, ns, id)
	if err != nil {
		t.Fatal(err)
	}
	wantRecords(t, collect(t, it), recs)
	reads := rangeReads(ranges, store.reset())
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
	seen := make([]int, len(ranges))
	for _, r := range reads {
		for _, i := range r {
			seen[i]++
		}
	}
	for i, n := range seen {
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
	root, err := m.loadRoot(ctx, ns, id)
	if err != nil {
		t.Fatal(err)
	}
	wantRecords(t, collect(t, &listIter{c: newCursor(ctx, m, ns, id, root), pending: true}), recs)
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
	it, err := NewManager(store, tinyConfig).List(ctx, ns, id)
	if err != nil {
		t.Fatal(err)
	}
	wantRecords(t, collect(t, it), recs)
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
	if it, err = m.List(ctx, ns, id); err != nil {
		t.Fatal(err)
	}
	wantRecords(t, collect(t, it), recs)
	for _, r := range rangeReads(ranges, store.reset()) {
		if slices.Contains(r, cached) {
			t.Fatalf("a read of ranges %v; range %d was cached", r, cached)
		}
	}
}

// TestListReadAheadDamagedRange: a damaged range inside a run is
// reported as it was without read-ahead: the listing returns every
// record before it, then ErrCorrupt naming it.
func TestListReadAheadDamagedRange(t *testing.T) {
	ctx := context.Background()
	store, ns, id, recs, ranges := readAheadTree(t)
	bad := 2 // the second range of the second run
	storedFlip(t, store, ns, ranges[bad], 1)
	store.reset()
	it, err := NewManager(store, tinyConfig).List(ctx, ns, id)
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
	before := ranges[0].Count + ranges[1].Count
	wantRecords(t, got, recs[:before])
	if reads := rangeReads(ranges, store.reset()); len(reads) < 2 || !slices.Contains(reads[1], bad) {
		t.Fatalf("reads %v: the damaged range was not read in a run", reads)
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
