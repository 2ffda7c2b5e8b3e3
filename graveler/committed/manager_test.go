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

	"graveler/graveler"
)

// countingStore counts Get calls per object name prefix, to prove which
// objects an operation read.
type countingStore struct {
	BlobStore
	rangeGets atomic.Int64
	metaGets  atomic.Int64
}

func (s *countingStore) Get(ctx context.Context, ns graveler.StorageNamespace, name string) ([]byte, error) {
	switch {
	case strings.HasPrefix(name, rangesPrefix):
		s.rangeGets.Add(1)
	case strings.HasPrefix(name, metarangesPrefix):
		s.metaGets.Add(1)
	}
	return s.BlobStore.Get(ctx, ns, name)
}

// GetRange counts an object read from a pack by what its bytes are: a
// range (leaf format) or an inner node.
func (s *countingStore) GetRange(ctx context.Context, ns graveler.StorageNamespace, name string, offset, length int64) ([]byte, error) {
	data, err := s.BlobStore.GetRange(ctx, ns, name, offset, length)
	if err == nil && strings.HasPrefix(name, packsPrefix) {
		body, _, _ := splitLocations(data)
		if f, perr := parseRange(body); perr == nil && f.version == leafVersion {
			s.rangeGets.Add(1)
		} else {
			s.metaGets.Add(1)
		}
	}
	return data, err
}

// tinyConfig makes ranges of about 8 keys so small tests span many ranges.
// Cut by the masks alone: tests built on it count on shapes the masks
// make (a root of level 1 over 200 keys, say).
var tinyConfig = Config{MinRangeSize: 1, MaxRangeSize: 4 << 10, BoundaryMask: 7, BlockSize: 128, RangeRamp: -1, NodeRamp: -1}

var nsCounter atomic.Int64

func testNS() graveler.StorageNamespace {
	return graveler.StorageNamespace(fmt.Sprintf("mem://committed-test-%d", nsCounter.Add(1)))
}

func newTestManager(t testing.TB, cfg Config) (*Manager, *countingStore, graveler.StorageNamespace) {
	t.Helper()
	store := &countingStore{BlobStore: NewBucketStore(BucketConfig{})}
	t.Cleanup(func() { store.Close() })
	return NewManager(store, cfg), store, testNS()
}

// sliceIter is a ValueIterator over records sorted by the caller.
type sliceIter struct {
	recs []graveler.ValueRecord
	i    int
}

func newSliceIter(recs []graveler.ValueRecord) *sliceIter { return &sliceIter{recs: recs, i: -1} }

func (it *sliceIter) Next() bool {
	if it.i < len(it.recs) {
		it.i++
	}
	return it.i < len(it.recs)
}
func (it *sliceIter) Value() *graveler.ValueRecord { return &it.recs[it.i] }
func (it *sliceIter) SeekGE(key graveler.Key) {
	it.i = lowerBound(it.recs, key) - 1
}
func (it *sliceIter) Err() error { return nil }
func (it *sliceIter) Close()     {}

func lowerBound(recs []graveler.ValueRecord, key graveler.Key) int {
	i, _ := slices.BinarySearchFunc(recs, key, func(r graveler.ValueRecord, k graveler.Key) int { return bytes.Compare(r.Key, k) })
	return i
}

func rec(key, identity, data string) graveler.ValueRecord {
	return graveler.ValueRecord{Key: graveler.Key(key), Value: &graveler.Value{Identity: []byte(identity), Data: []byte(data)}}
}

func tomb(key string) graveler.ValueRecord { return graveler.ValueRecord{Key: graveler.Key(key)} }

// model is a sorted map of key → value, the reference the tests compare with.
type model map[string]graveler.Value

func (m model) records() []graveler.ValueRecord {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]graveler.ValueRecord, len(keys))
	for i, k := range keys {
		v := m[k]
		out[i] = graveler.ValueRecord{Key: graveler.Key(k), Value: &v}
	}
	return out
}

func (m model) clone() model {
	c := model{}
	for k, v := range m {
		c[k] = v
	}
	return c
}

func collect(t testing.TB, it graveler.ValueIterator) []graveler.ValueRecord {
	t.Helper()
	defer it.Close()
	var out []graveler.ValueRecord
	for it.Next() {
		r := it.Value()
		out = append(out, graveler.ValueRecord{Key: r.Key.Copy(), Value: &graveler.Value{Identity: bytes.Clone(r.Identity), Data: bytes.Clone(r.Data)}})
	}
	if err := it.Err(); err != nil {
		t.Fatalf("iterate: %v", err)
	}
	return out
}

func collectDiff(t testing.TB, it graveler.DiffIterator) []graveler.Diff {
	t.Helper()
	defer it.Close()
	var out []graveler.Diff
	for it.Next() {
		out = append(out, *it.Value())
	}
	if err := it.Err(); err != nil {
		t.Fatalf("diff: %v", err)
	}
	return out
}

func sameRecords(a, b []graveler.ValueRecord) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d records, want %d", len(a), len(b))
	}
	for i := range a {
		if !bytes.Equal(a[i].Key, b[i].Key) || !bytes.Equal(a[i].Identity, b[i].Identity) || !bytes.Equal(a[i].Data, b[i].Data) {
			return fmt.Errorf("record %d: %q=%q/%q, want %q=%q/%q", i, a[i].Key, a[i].Identity, a[i].Data, b[i].Key, b[i].Identity, b[i].Data)
		}
	}
	return nil
}

func write(t testing.TB, m *Manager, ns graveler.StorageNamespace, recs []graveler.ValueRecord) graveler.MetaRangeID {
	t.Helper()
	id, err := m.WriteMetaRangeByIterator(context.Background(), ns, newSliceIter(recs))
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	return id
}

func numbered(n int, identity string) []graveler.ValueRecord {
	out := make([]graveler.ValueRecord, n)
	for i := range out {
		out[i] = rec(fmt.Sprintf("key-%06d", i), identity+fmt.Sprint(i), "data-"+fmt.Sprint(i))
	}
	return out
}

func TestEmptyTree(t *testing.T) {
	ctx := context.Background()
	m, store, ns := newTestManager(t, tinyConfig)
	if _, err := m.Get(ctx, ns, "", graveler.Key("a")); !errors.Is(err, graveler.ErrEntryNotFound) {
		t.Fatalf("Get on empty tree: %v", err)
	}
	it, err := m.List(ctx, ns, "")
	if err != nil {
		t.Fatal(err)
	}
	it.SeekGE(graveler.Key("a"))
	if got := collect(t, it); len(got) != 0 {
		t.Fatalf("List on empty tree: %d records", len(got))
	}
	if ok, err := m.Exists(ctx, ns, ""); err != nil || !ok {
		t.Fatalf("Exists(\"\") = %v, %v", ok, err)
	}
	if id := write(t, m, ns, nil); id != "" {
		t.Fatalf("writing nothing gave %q", id)
	}
	d, err := m.Diff(ctx, ns, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := collectDiff(t, d); len(got) != 0 {
		t.Fatalf("Diff(\"\", \"\") = %v", got)
	}
	if _, _, err := m.Apply(ctx, ns, "", newSliceIter([]graveler.ValueRecord{tomb("x")}), graveler.ApplyOptions{}); !errors.Is(err, graveler.ErrNoChanges) {
		t.Fatalf("Apply of a tombstone to the empty tree: %v", err)
	}
	if id, _, err := m.Apply(ctx, ns, "", newSliceIter(nil), graveler.ApplyOptions{AllowEmpty: true}); err != nil || id != "" {
		t.Fatalf("empty Apply with AllowEmpty = %q, %v", id, err)
	}

	full := write(t, m, ns, numbered(50, "v"))
	d, err = m.Diff(ctx, ns, "", full)
	if err != nil {
		t.Fatal(err)
	}
	if got := collectDiff(t, d); len(got) != 50 || got[0].Type != graveler.DiffTypeAdded {
		t.Fatalf("Diff(\"\", full): %d diffs", len(got))
	}
	d, err = m.Diff(ctx, ns, full, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := collectDiff(t, d); len(got) != 50 || got[49].Type != graveler.DiffTypeRemoved || got[49].Value != nil {
		t.Fatalf("Diff(full, \"\"): %d diffs", len(got))
	}
	// Deleting everything gives the empty tree back.
	var dels []graveler.ValueRecord
	for _, r := range numbered(50, "v") {
		dels = append(dels, tomb(string(r.Key)))
	}
	id, sum, err := m.Apply(ctx, ns, full, newSliceIter(dels), graveler.ApplyOptions{})
	if err != nil || id != "" || sum.Count[graveler.DiffTypeRemoved] != 50 {
		t.Fatalf("delete all = %q, %v, %v", id, sum, err)
	}
	// The empty tree is never fetched; the written root once for its
	// first use (a root is not cached as written: until a commit names
	// it, another writer may replace it) and once more when a write over
	// it checks it is the one stored (checkBase).
	if store.metaGets.Load() != 2 {
		t.Fatalf("metaranges fetched %d times, want 2 (the written root, then its check)", store.metaGets.Load())
	}
}

func TestGetListSeek(t *testing.T) {
	ctx := context.Background()
	m, _, ns := newTestManager(t, tinyConfig)
	recs := numbered(300, "v")
	id := write(t, m, ns, recs)
	mr, err := m.loadMetaRange(ctx, ns, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(mr.ranges) < 10 {
		t.Fatalf("only %d ranges for 300 keys under tiny ranges", len(mr.ranges))
	}
	for _, i := range []int{0, 1, 7, 150, 299} {
		v, err := m.Get(ctx, ns, id, recs[i].Key)
		if err != nil || !bytes.Equal(v.Identity, recs[i].Identity) || !bytes.Equal(v.Data, recs[i].Data) {
			t.Fatalf("Get %s = %v, %v", recs[i].Key, v, err)
		}
	}
	for _, k := range []string{"a", "key-", "key-000000x", "key-000300", "zzz"} {
		if _, err := m.Get(ctx, ns, id, graveler.Key(k)); !errors.Is(err, graveler.ErrEntryNotFound) {
			t.Fatalf("Get %s: %v", k, err)
		}
	}
	it, err := m.List(ctx, ns, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameRecords(collect(t, it), recs); err != nil {
		t.Fatal(err)
	}
	// SeekGE to every range edge and between keys, forwards and backwards.
	it, err = m.List(ctx, ns, id)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	seek := func(key string, want int) {
		t.Helper()
		it.SeekGE(graveler.Key(key))
		if want == len(recs) {
			if it.Next() {
				t.Fatalf("SeekGE(%q) then Next = %q, want end", key, it.Value().Key)
			}
			return
		}
		if !it.Next() || !bytes.Equal(it.Value().Key, recs[want].Key) {
			t.Fatalf("SeekGE(%q) then Next: %v, want %q", key, it.Value(), recs[want].Key)
		}
		if want+1 < len(recs) && (!it.Next() || !bytes.Equal(it.Value().Key, recs[want+1].Key)) {
			t.Fatalf("after SeekGE(%q) second Next: %v", key, it.Value())
		}
	}
	seek("", 0)
	seek("a", 0)
	seek("zzz", 300)
	seek("key-000299", 299)
	seek("key-000299x", 300)
	seek("key-000000", 0)
	for _, r := range mr.ranges {
		var lo, hi int
		fmt.Sscanf(string(r.MinKey), "key-%d", &lo)
		fmt.Sscanf(string(r.MaxKey), "key-%d", &hi)
		seek(string(r.MinKey), lo)
		seek(string(r.MaxKey), hi)
		seek(string(r.MaxKey)+"\x00", hi+1)
		seek(string(r.MinKey[:len(r.MinKey)-1]), lo/10*10)
	}
	seek("key-000100", 100)
	seek("key-000050", 50)
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestErrors(t *testing.T) {
	ctx := context.Background()
	m, store, ns := newTestManager(t, tinyConfig)
	missing := graveler.MetaRangeID(contentID([]byte("nothing")))
	if _, err := m.Get(ctx, ns, missing, graveler.Key("a")); !errors.Is(err, graveler.ErrMetaRangeNotFound) {
		t.Fatalf("Get on a missing metarange: %v", err)
	}
	if _, err := m.List(ctx, ns, missing); !errors.Is(err, graveler.ErrMetaRangeNotFound) {
		t.Fatalf("List: %v", err)
	}
	if _, err := m.Diff(ctx, ns, "", missing); !errors.Is(err, graveler.ErrMetaRangeNotFound) {
		t.Fatalf("Diff: %v", err)
	}
	if _, _, err := m.Apply(ctx, ns, missing, newSliceIter(nil), graveler.ApplyOptions{}); !errors.Is(err, graveler.ErrMetaRangeNotFound) {
		t.Fatalf("Apply: %v", err)
	}
	if _, _, err := m.Merge(ctx, ns, "", missing, "", graveler.MergeStrategyNone); !errors.Is(err, graveler.ErrMetaRangeNotFound) {
		t.Fatalf("Merge: %v", err)
	}
	if ok, err := m.Exists(ctx, ns, missing); err != nil || ok {
		t.Fatalf("Exists(missing) = %v, %v", ok, err)
	}
	for _, bad := range []graveler.MetaRangeID{"../x", "ABCDEF", graveler.MetaRangeID(strings.Repeat("A", 64)), "abc"} {
		if _, err := m.Get(ctx, ns, bad, graveler.Key("a")); !errors.Is(err, graveler.ErrInvalidArgument) {
			t.Fatalf("Get(%q): %v", bad, err)
		}
		if _, err := m.Exists(ctx, ns, bad); !errors.Is(err, graveler.ErrInvalidArgument) {
			t.Fatalf("Exists(%q): %v", bad, err)
		}
	}
	bad := [][]graveler.ValueRecord{
		{rec("a", "1", ""), tomb("b")},
		{rec("b", "1", ""), rec("a", "1", "")},
		{rec("a", "1", ""), rec("a", "2", "")},
		{rec("", "1", "")},
	}
	for i, recs := range bad {
		if _, err := m.WriteMetaRangeByIterator(ctx, ns, newSliceIter(recs)); !errors.Is(err, graveler.ErrInvalidArgument) {
			t.Fatalf("bad input %d: %v", i, err)
		}
		if i == 0 {
			continue
		}
		if _, _, err := m.Apply(ctx, ns, "", newSliceIter(recs), graveler.ApplyOptions{}); !errors.Is(err, graveler.ErrInvalidArgument) {
			t.Fatalf("bad changes %d: %v", i, err)
		}
	}

	// A damaged stored metarange or range is reported as corrupt.
	id := write(t, m, ns, numbered(40, "v"))
	mr, _ := m.loadMetaRange(ctx, ns, id)
	fresh := NewManager(store, tinyConfig)
	storedFlip(t, store, ns, mr.ranges[1], 1)
	if _, err := fresh.Get(ctx, ns, id, mr.ranges[1].MaxKey); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get through a damaged range: %v", err)
	}
	it, _ := fresh.List(ctx, ns, id)
	for it.Next() {
	}
	if !errors.Is(it.Err(), ErrCorrupt) {
		t.Fatalf("List through a damaged range: %v", it.Err())
	}
	data, _ := store.Get(ctx, ns, metaRangeBlobName(id))
	data[len(data)/2] ^= 0x40
	store.Put(ctx, ns, metaRangeBlobName(id), data)
	if _, err := NewManager(store, tinyConfig).List(ctx, ns, id); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("List of a damaged metarange: %v", err)
	}
}

func TestConcurrentReads(t *testing.T) {
	ctx := context.Background()
	m, _, ns := newTestManager(t, Config{MinRangeSize: 1, BoundaryMask: 15, BlockSize: 256, RangeCacheBytes: 4 << 10, NodeCacheBytes: 1 << 10, MinNodeSize: 1, NodeMask: 3})
	recs := numbered(500, "v")
	ids := []graveler.MetaRangeID{write(t, m, ns, recs), write(t, m, ns, recs[:250]), write(t, m, ns, recs[100:])}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				id := ids[(g+i)%len(ids)]
				k := recs[(g*37+i*11)%len(recs)].Key
				_, err := m.Get(ctx, ns, id, k)
				if err != nil && !errors.Is(err, graveler.ErrEntryNotFound) {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Readers that ask for one range at once read it from the store once,
// including one whose cache lookup missed just before another reader's
// load finished (the load adds to the cache, then leaves m.loading).
func TestConcurrentRangeLoadsReadOnce(t *testing.T) {
	ctx := context.Background()
	m, store, ns := newTestManager(t, tinyConfig)
	baseID := write(t, m, ns, numbered(200, "v"))
	root, err := m.loadNode(ctx, ns, baseID, Location{})
	if err != nil {
		t.Fatal(err)
	}
	if root.level != 1 {
		t.Fatalf("root at level %d", root.level)
	}
	for round := range 300 {
		cold := NewManager(store, tinyConfig)
		d := root.children[round%len(root.children)]
		before := store.rangeGets.Load()
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if _, err := cold.loadRange(ctx, ns, &d); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if n := store.rangeGets.Load() - before; n != 1 {
			t.Fatalf("round %d: %d reads of one range", round, n)
		}
	}
}

// TestKeyFillingANodeAlone: a key so long that its entry fills an inner
// node alone would cut every level after one child, without end; the
// write fails with ErrInvalidArgument instead of building levels forever.
func TestKeyFillingANodeAlone(t *testing.T) {
	blobs := NewBucketStore(BucketConfig{})
	defer blobs.Close()
	m := NewManager(blobs, Config{})
	key := graveler.Key(strings.Repeat("k", DefaultMaxNodeSize/2))
	_, err := m.WriteMetaRangeByIterator(context.Background(), "mem://long-key", newSliceIter([]graveler.ValueRecord{{Key: key, Value: &graveler.Value{Identity: []byte("i"), Data: []byte("d")}}}))
	if !errors.Is(err, graveler.ErrInvalidArgument) {
		t.Fatalf("a key of %d bytes: %v, want ErrInvalidArgument", len(key), err)
	}
}
