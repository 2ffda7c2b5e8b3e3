package committed

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"graveler/graveler"
)

// TestPackedAndUnpackedTreesShareIDs: where objects are stored is no part
// of any ID, so the same entries make the same tree packed or not, and a
// tree of either kind is read, changed and diffed through the other.
func TestPackedAndUnpackedTreesShareIDs(t *testing.T) {
	ctx := context.Background()
	cfg := multiLevelConfig()
	un := cfg
	un.Unpacked = true
	packedM, store, ns := newTestManager(t, cfg)
	unpackedM := NewManager(store, un)
	recs := numbered(400, "v")
	packed, unpacked := write(t, packedM, ns, recs), write(t, unpackedM, ns, recs)
	if packed != unpacked {
		t.Fatalf("the same entries: %s packed, %s unpacked", packed, unpacked)
	}
	// The root now names the packs of the last write: the unpacked one.
	root, err := ReadTreeNode(ctx, store, ns, packed)
	if err != nil || root.Children[0].Loc.Packed() {
		t.Fatalf("root %+v, %v: want the unpacked write's root", root, err)
	}
	changed := rec(string(recs[123].Key), "new", "x")
	want := append([]graveler.ValueRecord(nil), recs...)
	want[123] = changed
	// Packed changes onto an unpacked base, and back.
	mixed, _, err := packedM.Apply(ctx, ns, unpacked, newSliceIter([]graveler.ValueRecord{changed}), graveler.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sameRecords(collect(t, mustList(t, NewManager(store, un), ns, mixed)), want); err != nil {
		t.Fatal(err)
	}
	if err := CheckTreeStored(ctx, store, ns, mixed); err != nil {
		t.Fatal(err)
	}
	again, _, err := unpackedM.Apply(ctx, ns, mixed, newSliceIter([]graveler.ValueRecord{recs[123]}), graveler.ApplyOptions{})
	if err != nil || again != packed {
		t.Fatalf("reverting the change gave %s, %v; want the original %s", again, err, packed)
	}
	d, err := NewManager(store, cfg).Diff(ctx, ns, packed, mixed)
	if err != nil {
		t.Fatal(err)
	}
	if diffs := collectDiff(t, d); len(diffs) != 1 || string(diffs[0].Key) != string(changed.Key) {
		t.Fatalf("diff %+v", diffs)
	}
}

// TestStaleRootReadAgain: a root cached (in a Manager and in a
// CachedBlobStore) before its namespace was emptied and the same entries
// written again names packs that are gone. A read that meets the hole
// reads the root again from the store and goes on; a write over it fails
// once and then succeeds.
func TestStaleRootReadAgain(t *testing.T) {
	ctx := context.Background()
	inner := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { inner.Close() })
	cached, err := NewCachedBlobStore(inner, CacheConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ns := testNS()
	cfg := multiLevelConfig()
	recs := numbered(400, "v")
	id := write(t, NewManager(inner, cfg), ns, recs)
	// Readers that read one key: the root and the path to it are cached,
	// in memory and on disk; the rest is read when wanted.
	reader, getter, writer := NewManager(cached, cfg), NewManager(cached, cfg), NewManager(cached, cfg)
	for _, m := range []*Manager{reader, getter, writer} {
		if _, err := m.Get(ctx, ns, id, recs[0].Key); err != nil {
			t.Fatal(err)
		}
	}

	// The namespace emptied (a repository deleted) and the same entries
	// written to it again (another repository on it).
	emptyNamespace(t, inner, ns)
	if again := write(t, NewManager(inner, cfg), ns, recs); again != id {
		t.Fatalf("the same entries made %s, then %s", id, again)
	}

	last := recs[len(recs)-1]
	if v, err := getter.Get(ctx, ns, id, last.Key); err != nil || string(v.Identity) != string(last.Identity) {
		t.Fatalf("Get through a stale root: %v, %v", v, err)
	}
	if err := sameRecords(collect(t, mustList(t, reader, ns, id)), recs); err != nil {
		t.Fatalf("List through a stale root: %v", err)
	}
	if !reader.nodesHold(ns, id) {
		t.Fatal("the reader dropped the root")
	}
	// A fresh Manager over the disk cache, which the Get above brought up
	// to date.
	if err := sameRecords(collect(t, mustList(t, NewManager(cached, cfg), ns, id)), recs); err != nil {
		t.Fatal(err)
	}
	change := []graveler.ValueRecord{rec(string(last.Key), "new", "x")}
	_, _, err = writer.Apply(ctx, ns, id, newSliceIter(change), graveler.ApplyOptions{})
	if !errors.Is(err, graveler.ErrUnavailable) || errors.Is(err, ErrBlobNotFound) {
		t.Fatalf("Apply over a stale root = %v, want a retryable refusal once", err)
	}
	if _, _, err := writer.Apply(ctx, ns, id, newSliceIter(change), graveler.ApplyOptions{}); err != nil {
		t.Fatalf("Apply again: %v", err)
	}
}

// TestPackIndexListsEveryObject: a pack's index lists each object it
// holds, and ReadPackIndex refuses a damaged footer or index.
func TestPackIndexListsEveryObject(t *testing.T) {
	ctx := context.Background()
	cfg := multiLevelConfig()
	m, store, ns := newTestManager(t, cfg)
	id := write(t, m, ns, numbered(400, "v"))
	want := map[string]ObjectKind{}
	var pack string
	if err := TreeObjects(ctx, store, ns, id, func(o TreeObject) error {
		if o.Blob != o.Name() {
			want[o.ID] = o.Kind
			pack = strings.TrimPrefix(o.Blob, packsPrefix)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	st, err := store.Stat(ctx, ns, packsPrefix+pack)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := ReadPackIndex(ctx, store, ns, pack, st.Size)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ObjectKind{}
	for _, o := range objs {
		got[o.ID] = o.Kind
		if o.Blob != packsPrefix+pack {
			t.Fatalf("object %+v of pack %s", o, pack)
		}
	}
	if len(want) < 10 || len(got) != len(want) {
		t.Fatalf("the index lists %d objects, the tree names %d in the pack", len(got), len(want))
	}
	for id, k := range want {
		if got[id] != k {
			t.Fatalf("object %s: index says %v, tree %v", id, got[id], k)
		}
	}
	data, err := store.Get(ctx, ns, packsPrefix+pack)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{len(data) - 1, len(data) - packFooterLen - 2} {
		bad := append([]byte(nil), data...)
		bad[at] ^= 0x20
		if err := store.Put(ctx, ns, packsPrefix+pack, bad); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadPackIndex(ctx, store, ns, pack, int64(len(bad))); !errors.Is(err, ErrCorrupt) {
			t.Errorf("a byte flipped at %d of %d: %v, want ErrCorrupt", at, len(bad), err)
		}
	}
	if _, err := ReadPackIndex(ctx, store, ns, "not-a-pack", 100); !errors.Is(err, ErrInvalidID) {
		t.Errorf("a malformed pack name: %v", err)
	}
}

// TestLocationsTrailerDamage: a node's locations trailer is checked: a
// damaged one is ErrCorrupt, not a wrong place to read.
func TestLocationsTrailerDamage(t *testing.T) {
	ctx := context.Background()
	m, store, ns := newTestManager(t, multiLevelConfig())
	id := write(t, m, ns, numbered(400, "v"))
	name := metaRangeBlobName(id)
	data, body, trailer := storedRoot(t, store, ns, id)
	for _, at := range []int{len(body), len(body) + len(trailer)/2, len(data) - 6, len(data) - 1} {
		bad := append([]byte(nil), data...)
		bad[at] ^= 0x08
		if err := store.Put(ctx, ns, name, bad); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadTreeNode(ctx, store, ns, id); !errors.Is(err, ErrCorrupt) {
			t.Errorf("a byte flipped at %d (trailer from %d): %v, want ErrCorrupt", at, len(body), err)
		}
		if _, err := NewManager(store, multiLevelConfig()).Get(ctx, ns, id, graveler.Key("key-000001")); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Get through a root flipped at %d: %v, want ErrCorrupt", at, err)
		}
	}
}

// nodesHold reports whether m keeps root id in memory.
func (m *Manager) nodesHold(ns graveler.StorageNamespace, id graveler.MetaRangeID) bool {
	_, ok := m.nodes.get(rangeCacheKey(ns, string(id)))
	return ok
}

// TestLocationsTrailerHugeLength: a trailer (outside the node's ID,
// guarded by its checksum only) that places a child at a huge length is
// refused as ErrCorrupt, and a length within the bound but past the
// pack's end is refused without allocating it: a damaged reference costs
// an error, never a panic or the memory it claims.
func TestLocationsTrailerHugeLength(t *testing.T) {
	for _, length := range []int64{1 << 62, 512 << 20} {
		for _, backend := range []string{"mem", "file"} {
			t.Run(fmt.Sprintf("%s/%d", backend, length), func(t *testing.T) {
				ctx := context.Background()
				store := NewBucketStore(BucketConfig{})
				t.Cleanup(func() { store.Close() })
				ns := testNS()
				if backend == "file" {
					ns, _ = fileNS(t)
				}
				m := NewManager(store, multiLevelConfig())
				recs := numbered(400, "v")
				id := write(t, m, ns, recs)
				name := metaRangeBlobName(id)
				_, body, trailer := storedRoot(t, store, ns, id)
				n, err := decodeNode(body)
				if err != nil {
					t.Fatal(err)
				}
				if err := applyLocations(trailer, n.children); err != nil {
					t.Fatal(err)
				}
				n.children[0].Loc.Length = length
				bad := appendLocations(append([]byte(nil), body...), n.children)
				if err := store.Put(ctx, ns, name, bad); err != nil {
					t.Fatal(err)
				}
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				_, err = NewManager(store, multiLevelConfig()).Get(ctx, ns, id, recs[0].Key)
				runtime.ReadMemStats(&after)
				if !errors.Is(err, ErrCorrupt) {
					t.Errorf("Get through a child placed at length %d: %v, want ErrCorrupt", length, err)
				}
				if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
					t.Errorf("Get allocated %d MiB for a damaged length", grew>>20)
				}
				if root, err := ReadTreeNode(ctx, store, ns, id); err == nil {
					if _, err := ReadChildNode(ctx, store, ns, root.Children[0]); !errors.Is(err, ErrCorrupt) {
						t.Errorf("ReadChildNode: %v, want ErrCorrupt", err)
					}
				} else if !errors.Is(err, ErrCorrupt) {
					t.Errorf("ReadTreeNode: %v, want ErrCorrupt", err)
				}
			})
		}
	}
}

// TestStaleRootWriteByItsWriter: as TestStaleRootReadAgain, with the write
// over the stale root made by the Manager that wrote the tree first (one
// gravelerd): it remembers the stale root's packs as fresh, having
// written them, so only the check of the base root as stored stops it
// from handing out a tree that names packs that are gone. It fails once,
// retryably, and the next write succeeds.
func TestStaleRootWriteByItsWriter(t *testing.T) {
	inner := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { inner.Close() })
	ns := testNS()
	m, cfg, recs, id := heldTree(t, inner, ns)
	emptyNamespace(t, inner, ns)
	if again := write(t, NewManager(inner, cfg), ns, recs); again != id {
		t.Fatalf("the same entries made %s, then %s", id, again)
	}
	applyOverStaleRoot(t, m, inner, ns, id, recs, false)
}

// heldTree writes a tree of several levels to ns through a Manager that
// then holds its root (a Get read it), as a server does, and returns them
// with the Config and the records.
func heldTree(t *testing.T, store BlobStore, ns graveler.StorageNamespace) (*Manager, Config, []graveler.ValueRecord, graveler.MetaRangeID) {
	t.Helper()
	cfg := multiLevelConfig()
	recs := numbered(400, "v")
	m := NewManager(store, cfg)
	id := write(t, m, ns, recs)
	if _, err := m.Get(context.Background(), ns, id, recs[len(recs)-1].Key); err != nil {
		t.Fatal(err)
	}
	return m, cfg, recs, id
}

// applyOverStaleRoot changes the last of recs through m onto base id,
// whose root m holds stale, and requires that no tree with a hole is
// handed out: the write fails once, retryably, and the next one gives a
// whole tree; with mayPass, a first write that succeeds must give a
// whole tree.
func applyOverStaleRoot(t *testing.T, m *Manager, store BlobStore, ns graveler.StorageNamespace, id graveler.MetaRangeID, recs []graveler.ValueRecord, mayPass bool) {
	t.Helper()
	ctx := context.Background()
	change := []graveler.ValueRecord{rec(string(recs[len(recs)-1].Key), "new", "x")}
	nid, _, err := m.Apply(ctx, ns, id, newSliceIter(change), graveler.ApplyOptions{})
	if err == nil {
		err = CheckTreeStored(ctx, store, ns, nid)
		if err != nil || !mayPass {
			t.Fatalf("Apply over a stale root handed out %s: %v", nid, err)
		}
		return
	}
	if !errors.Is(err, graveler.ErrUnavailable) {
		t.Fatalf("Apply over a stale root = %v, want a retryable refusal", err)
	}
	nid, _, err = m.Apply(ctx, ns, id, newSliceIter(change), graveler.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckTreeStored(ctx, store, ns, nid); err != nil {
		t.Fatalf("the write after the refusal: %v", err)
	}
}

// storedRoot returns root id's bytes as stored and their split into the
// node and its locations trailer, which it must have.
func storedRoot(t *testing.T, store BlobStore, ns graveler.StorageNamespace, id graveler.MetaRangeID) (data, body, trailer []byte) {
	t.Helper()
	data, err := store.Get(context.Background(), ns, metaRangeBlobName(id))
	if err != nil {
		t.Fatal(err)
	}
	body, trailer, err = splitLocations(data)
	if err != nil || trailer == nil {
		t.Fatalf("root without a trailer: %v", err)
	}
	return data, body, trailer
}

// FuzzPackFormats runs the parsers of stored nodes, locations trailers,
// pack footers and indexes on arbitrary bytes: an error or a result
// within the input, never a panic or a place outside it.
//
//	go test ./graveler/committed -run '^$' -fuzz FuzzPackFormats -fuzztime 60s
func FuzzPackFormats(f *testing.F) {
	children := []RangeDescriptor{
		{MinKey: []byte("a"), MaxKey: []byte("b"), ID: graveler.RangeID(strings.Repeat("0", 63) + "1"), Count: 1, EstimatedSize: 10,
			Loc: Location{Pack: "0123456789abcdef0123456789abcdef", Offset: 5, Length: 7}},
		{MinKey: []byte("c"), MaxKey: []byte("d"), ID: graveler.RangeID(strings.Repeat("0", 63) + "2"), Count: 1, EstimatedSize: 10},
	}
	data, _, _ := encodeNode(1, children, DefaultBlockSize)
	f.Add(data, uint8(2))
	p := &packBuilder{id: "0123456789abcdef0123456789abcdef"}
	p.add(string(children[0].ID), false, []byte("hello"))
	p.add(string(children[1].ID), true, []byte("world!"))
	f.Add(p.finish(), uint8(2))
	f.Fuzz(func(t *testing.T, b []byte, nchild uint8) {
		_, _ = decodeStoredNode(b, strings.Repeat("0", 64))
		if node, trailer, err := splitLocations(b); err == nil && len(node)+len(trailer) > len(b) {
			t.Fatalf("split of %d bytes into %d and %d", len(b), len(node), len(trailer))
		}
		cs := make([]RangeDescriptor, int(nchild)%64)
		if err := applyLocations(b, cs); err == nil {
			for _, c := range cs {
				if c.Loc.Packed() && (c.Loc.Offset < 0 || c.Loc.Length <= 0 || c.Loc.Length > maxStoredObject) {
					t.Fatalf("location %+v", c.Loc)
				}
			}
		}
		if len(b) >= packFooterLen {
			if off, n, err := parsePackFooter(b[len(b)-packFooterLen:], int64(len(b))); err == nil {
				if off < 0 || n < 0 || off+n > int64(len(b)) {
					t.Fatalf("index at %d+%d of %d bytes", off, n, len(b))
				}
				if entries, err := parsePackIndex(b[off:off+n], off); err == nil {
					for _, e := range entries {
						if e.offset < 0 || e.length <= 0 || e.offset+e.length > off {
							t.Fatalf("index entry %+v past the objects (%d bytes)", e, off)
						}
					}
				}
			}
		}
	})
}

// emptyNamespace deletes every blob of ns, as the reclaim of a deleted
// repository does.
func emptyNamespace(t *testing.T, store BlobStore, ns graveler.StorageNamespace) {
	t.Helper()
	ctx := context.Background()
	if err := store.List(ctx, ns, "", func(page []BlobInfo) error {
		for _, o := range page {
			if err := store.Delete(ctx, ns, o.Name); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
