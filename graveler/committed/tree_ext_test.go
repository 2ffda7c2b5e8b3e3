package committed_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/committed/blobtest"
)

// smallTreeConfig makes trees of several levels from a few thousand keys:
// ranges of about 8 keys, inner nodes of about 4 children.
var smallTreeConfig = committed.Config{
	MinRangeSize: 1, MaxRangeSize: 4 << 10, BoundaryMask: 7,
	MinNodeSize: 1, MaxNodeSize: 4 << 10, NodeMask: 3,
	BlockSize: 128,
}

var treeNSSeq atomic.Int64

type treeBackend struct {
	name string
	open func(t *testing.T) (committed.BlobStore, graveler.StorageNamespace)
}

// treeBackends are the stores the tree tests run on: memory, files, and a
// real S3 client against the S3 fake.
func treeBackends() []treeBackend {
	return []treeBackend{
		{"mem", func(t *testing.T) (committed.BlobStore, graveler.StorageNamespace) {
			s := committed.NewBucketStore(committed.BucketConfig{})
			t.Cleanup(func() { s.Close() })
			return s, graveler.StorageNamespace(fmt.Sprintf("mem://tree-%d", treeNSSeq.Add(1)))
		}},
		{"file", func(t *testing.T) (committed.BlobStore, graveler.StorageNamespace) {
			s := committed.NewBucketStore(committed.BucketConfig{})
			t.Cleanup(func() { s.Close() })
			return s, graveler.StorageNamespace("file://" + filepath.ToSlash(filepath.Join(t.TempDir(), "data")))
		}},
		{"s3", func(t *testing.T) (committed.BlobStore, graveler.StorageNamespace) {
			fake := blobtest.StartFakeS3(t, "trees")
			s := committed.NewBucketStore(fake.Config)
			t.Cleanup(func() { s.Close() })
			return s, graveler.StorageNamespace(fmt.Sprintf("s3://trees/t%d", treeNSSeq.Add(1)))
		}},
	}
}

func treeRecords(n int, identity string) []graveler.ValueRecord {
	out := make([]graveler.ValueRecord, n)
	for i := range out {
		k := fmt.Sprintf("tree/%06d", i*2)
		out[i] = graveler.ValueRecord{Key: graveler.Key(k), Value: &graveler.Value{Identity: []byte(identity + k), Data: []byte("data " + k)}}
	}
	return out
}

func mustWrite(t *testing.T, m *committed.Manager, ns graveler.StorageNamespace, recs []graveler.ValueRecord) graveler.MetaRangeID {
	t.Helper()
	id, err := m.WriteMetaRangeByIterator(context.Background(), ns, &recIter{recs: recs})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func mustApply(t *testing.T, m *committed.Manager, ns graveler.StorageNamespace, base graveler.MetaRangeID, changes []graveler.ValueRecord) graveler.MetaRangeID {
	t.Helper()
	id, _, err := m.Apply(context.Background(), ns, base, &recIter{recs: changes}, graveler.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// treeShape returns tree id's objects by level (0: ranges), read from
// the store, each as its parent's entry for it (the root's has only its
// ID), keyed by its ID and where it is stored: a subtree passed through
// keeps both.
func treeShape(t *testing.T, blobs committed.BlobStore, ns graveler.StorageNamespace, id graveler.MetaRangeID) map[int]map[string]committed.RangeDescriptor {
	t.Helper()
	out := map[int]map[string]committed.RangeDescriptor{}
	add := func(level int, d committed.RangeDescriptor) {
		if out[level] == nil {
			out[level] = map[string]committed.RangeDescriptor{}
		}
		out[level][fmt.Sprintf("%s@%s:%d", d.ID, d.Loc.Pack, d.Loc.Offset)] = d
	}
	var walk func(d committed.RangeDescriptor, root bool)
	walk = func(d committed.RangeDescriptor, root bool) {
		var n *committed.TreeNode
		var err error
		if root {
			n, err = committed.ReadTreeNode(context.Background(), blobs, ns, graveler.MetaRangeID(d.ID))
		} else {
			n, err = committed.ReadChildNode(context.Background(), blobs, ns, d)
		}
		if err != nil {
			t.Fatal(err)
		}
		add(n.Level, d)
		for _, c := range n.Children {
			if n.Level == 1 {
				add(0, c)
			} else {
				walk(c, false)
			}
		}
	}
	walk(committed.RangeDescriptor{ID: graveler.RangeID(id)}, true)
	return out
}

// sharedAndFresh counts the objects of level (a treeShape level) that
// base holds too, and those it does not.
func sharedAndFresh(base, level map[string]committed.RangeDescriptor) (shared, fresh int) {
	for n := range level {
		if _, ok := base[n]; ok {
			shared++
		} else {
			fresh++
		}
	}
	return shared, fresh
}

// storedBlob returns the blob holding object d of level (0: a range) and
// the span of its bytes there.
func storedBlob(d committed.RangeDescriptor, level int, size int) (name string, from, to int) {
	if d.Loc.Packed() {
		return committed.PackObjectName(d.Loc.Pack), int(d.Loc.Offset), int(d.Loc.Offset + d.Loc.Length)
	}
	if level == 0 {
		return committed.RangeObjectName(d.ID), 0, size
	}
	return committed.MetaRangeObjectName(graveler.MetaRangeID(d.ID)), 0, size
}

func rootLevel(t *testing.T, blobs committed.BlobStore, ns graveler.StorageNamespace, id graveler.MetaRangeID) int {
	t.Helper()
	n, err := committed.ReadTreeNode(context.Background(), blobs, ns, id)
	if err != nil {
		t.Fatal(err)
	}
	return n.Level
}

// TestTreeSameEntriesSameTree: the same entries give the same tree (root
// ID) however they were written: in bulk, in batches of Apply in any
// order, or by removing and reverting changes.
func TestTreeSameEntriesSameTree(t *testing.T) {
	for _, be := range treeBackends() {
		t.Run(be.name, func(t *testing.T) {
			blobs, ns := be.open(t)
			m := committed.NewManager(blobs, smallTreeConfig)
			recs := treeRecords(3000, "v")
			want := mustWrite(t, m, ns, recs)
			if l := rootLevel(t, blobs, ns, want); l < 4 {
				t.Fatalf("root of level %d, want a tree of at least 4 levels", l)
			}
			r := rand.New(rand.NewPCG(1, 2))
			ways := map[string]func() graveler.MetaRangeID{
				"ascending batches": func() graveler.MetaRangeID {
					var id graveler.MetaRangeID
					for i := 0; i < len(recs); i += 250 {
						id = mustApply(t, m, ns, id, recs[i:min(i+250, len(recs))])
					}
					return id
				},
				"random batches in random order": func() graveler.MetaRangeID {
					batches := make([][]graveler.ValueRecord, 9)
					for _, rc := range recs {
						b := r.IntN(len(batches))
						batches[b] = append(batches[b], rc)
					}
					var id graveler.MetaRangeID
					for _, b := range r.Perm(len(batches)) {
						if len(batches[b]) > 0 {
							id = mustApply(t, m, ns, id, batches[b])
						}
					}
					return id
				},
				"extra keys removed": func() graveler.MetaRangeID {
					var all, extra []graveler.ValueRecord
					for _, rc := range recs {
						all = append(all, rc)
						if r.IntN(4) == 0 {
							k := graveler.Key(string(rc.Key) + "x")
							all = append(all, graveler.ValueRecord{Key: k, Value: &graveler.Value{Identity: []byte("x"), Data: []byte("x")}})
							extra = append(extra, graveler.ValueRecord{Key: k})
						}
					}
					return mustApply(t, m, ns, mustWrite(t, m, ns, all), extra)
				},
				"values changed back": func() graveler.MetaRangeID {
					other := treeRecords(3000, "w")
					var back []graveler.ValueRecord
					for i := range recs {
						if i%3 != 0 {
							other[i] = recs[i]
						} else {
							back = append(back, recs[i])
						}
					}
					return mustApply(t, m, ns, mustWrite(t, m, ns, other), back)
				},
			}
			for name, way := range ways {
				if got := way(); got != want {
					t.Errorf("%s: tree %s, written in bulk %s", name, got, want)
				}
			}
		})
	}
}

// TestTreePassThroughEveryLevel: a one-key change to a big tree writes
// the range it falls in and the nodes above it, and reads no more; every
// other subtree, at every level, is referenced as it was.
func TestTreePassThroughEveryLevel(t *testing.T) {
	for _, be := range treeBackends() {
		t.Run(be.name, func(t *testing.T) {
			blobs, ns := be.open(t)
			ms := &meteredStore{BlobStore: blobs}
			recs := treeRecords(8000, "v")
			base := mustWrite(t, committed.NewManager(ms, smallTreeConfig), ns, recs)
			levels := rootLevel(t, blobs, ns, base)
			if levels < 4 {
				t.Fatalf("root of level %d, want at least 4", levels)
			}
			baseShape := treeShape(t, blobs, ns, base)
			total := 0
			for _, names := range baseShape {
				total += len(names)
			}
			cases := map[string]graveler.ValueRecord{
				"change first": {Key: recs[0].Key, Value: &graveler.Value{Identity: []byte("new"), Data: []byte("x")}},
				"change deep":  {Key: recs[5345].Key, Value: &graveler.Value{Identity: []byte("new"), Data: []byte("x")}},
				"change last":  {Key: recs[len(recs)-1].Key, Value: &graveler.Value{Identity: []byte("new"), Data: []byte("x")}},
				"insert":       {Key: graveler.Key(string(recs[7000].Key) + "a"), Value: &graveler.Value{Identity: []byte("new"), Data: []byte("x")}},
				"delete":       {Key: recs[6000].Key},
				"append":       {Key: graveler.Key("zzz"), Value: &graveler.Value{Identity: []byte("new"), Data: []byte("x")}},
			}
			for name, c := range cases {
				// A cold Manager: every read shows.
				m := committed.NewManager(ms, smallTreeConfig)
				puts, gets := ms.puts.Load(), ms.gets.Load()
				id := mustApply(t, m, ns, base, []graveler.ValueRecord{c})
				wrote, read := int(ms.puts.Load()-puts), int(ms.gets.Load()-gets)
				// The path to the change, and what a shifted boundary adds.
				if wrote > 2*(levels+1) || read > 2*(levels+1) {
					t.Errorf("%s: wrote %d and read %d of %d objects, a tree of %d levels", name, wrote, read, total, levels+1)
				}
				shape := treeShape(t, blobs, ns, id)
				for l := 0; l < levels; l++ {
					shared, fresh := sharedAndFresh(baseShape[l], shape[l])
					// The top levels hold a node or two, all on the path.
					if shared == 0 && len(baseShape[l]) > 2 || fresh > 2 {
						t.Errorf("%s: level %d has %d objects of the base and %d new", name, l, shared, fresh)
					}
				}
			}
		})
	}
}

// TestTreeDiffMergeSkipEqualSubtrees: trees that differ in one range deep
// inside diff by reading only the paths to it, and merge likewise.
func TestTreeDiffMergeSkipEqualSubtrees(t *testing.T) {
	for _, be := range treeBackends() {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			blobs, ns := be.open(t)
			ms := &meteredStore{BlobStore: blobs}
			recs := treeRecords(8000, "v")
			w := committed.NewManager(ms, smallTreeConfig)
			base := mustWrite(t, w, ns, recs)
			levels := rootLevel(t, blobs, ns, base)
			change := func(i int) graveler.ValueRecord {
				return graveler.ValueRecord{Key: recs[i].Key, Value: &graveler.Value{Identity: []byte("changed"), Data: []byte("x")}}
			}
			left := mustApply(t, w, ns, base, []graveler.ValueRecord{change(4321)})
			right := mustApply(t, w, ns, base, []graveler.ValueRecord{change(6789)})

			m := committed.NewManager(ms, smallTreeConfig)
			gets := ms.gets.Load()
			it, err := m.Diff(ctx, ns, base, left)
			if err != nil {
				t.Fatal(err)
			}
			var diffs []graveler.Diff
			for it.Next() {
				diffs = append(diffs, *it.Value())
			}
			if it.Err() != nil || len(diffs) != 1 || !bytes.Equal(diffs[0].Key, recs[4321].Key) || diffs[0].Type != graveler.DiffTypeChanged {
				t.Fatalf("diff: %v, %+v", it.Err(), diffs)
			}
			// Two roots, then both paths down to the range.
			if read := ms.gets.Load() - gets; read > int64(2*(levels+1)) {
				t.Errorf("diff read %d objects, a tree of %d levels", read, levels+1)
			}

			m = committed.NewManager(ms, smallTreeConfig)
			gets = ms.gets.Load()
			merged, sum, err := m.Merge(ctx, ns, right, left, base, graveler.MergeStrategyNone)
			if err != nil {
				t.Fatal(err)
			}
			if sum.Count[graveler.DiffTypeChanged] != 1 {
				t.Errorf("merge summary %v", sum.Count)
			}
			// Three roots; two passes over the diff (conflict check, then
			// apply) and the destination's path, each of at most two paths.
			if read := ms.gets.Load() - gets; read > int64(6*(levels+1)) {
				t.Errorf("merge read %d objects, a tree of %d levels", read, levels+1)
			}
			want := mustApply(t, w, ns, base, []graveler.ValueRecord{change(4321), change(6789)})
			if merged != want {
				t.Errorf("merge gave %s, applying both changes %s", merged, want)
			}
		})
	}
}

// TestTreeCorruptionAtEveryLevel: damage to any one object of a tree, at
// any level, is reported as ErrCorrupt by reads that reach it and by the
// checks that walk the tree.
func TestTreeCorruptionAtEveryLevel(t *testing.T) {
	for _, be := range treeBackends() {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			blobs, ns := be.open(t)
			recs := treeRecords(3000, "v")
			id := mustWrite(t, committed.NewManager(blobs, smallTreeConfig), ns, recs)
			shape := treeShape(t, blobs, ns, id)
			levels := rootLevel(t, blobs, ns, id)
			for l := levels; l >= 0; l-- {
				keys := slices.Sorted(func(yield func(string) bool) {
					for n := range shape[l] {
						if !yield(n) {
							return
						}
					}
				})
				d := shape[l][keys[len(keys)/2]]
				name, _, _ := storedBlob(d, l, 0)
				data, err := blobs.Get(ctx, ns, name)
				if err != nil {
					t.Fatal(err)
				}
				_, from, to := storedBlob(d, l, len(data))
				bad := bytes.Clone(data)
				bad[from+(to-from)/3] ^= 0x10
				if err := blobs.Put(ctx, ns, name, bad); err != nil {
					t.Fatal(err)
				}
				m := committed.NewManager(blobs, smallTreeConfig)
				it, err := m.List(ctx, ns, id)
				if err == nil {
					for it.Next() {
					}
					err = it.Err()
				}
				if !errors.Is(err, committed.ErrCorrupt) {
					t.Errorf("level %d: List: %v, want ErrCorrupt", l, err)
				}
				if l > 0 {
					if err := committed.CheckTreeStored(ctx, blobs, ns, id); !errors.Is(err, committed.ErrCorrupt) {
						t.Errorf("level %d: CheckTreeStored: %v, want ErrCorrupt", l, err)
					}
					if _, err := committed.ReadMetaRange(ctx, blobs, ns, id); !errors.Is(err, committed.ErrCorrupt) {
						t.Errorf("level %d: ReadMetaRange: %v, want ErrCorrupt", l, err)
					}
				} else if _, err := committed.VerifyRange(ctx, blobs, ns, d.ID, d.Loc); !errors.Is(err, committed.ErrCorrupt) {
					t.Errorf("VerifyRange: %v, want ErrCorrupt", err)
				}
				if err := blobs.Put(ctx, ns, name, data); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestDeleteThroughTopChildIdenticalID: deleting every key up to the end
// of one of the root's children leaves the rest of the tree, on its right
// edge, untouched. Apply must still give the tree the shape, and so the
// ID, that writing the remaining entries in bulk gives: passing the last
// subtree through with nothing written before it would put it under a
// taller root.
func TestDeleteThroughTopChildIdenticalID(t *testing.T) {
	ctx := context.Background()
	blobs := committed.NewBucketStore(committed.BucketConfig{})
	defer blobs.Close()
	ns := graveler.StorageNamespace("mem://delete-through-child")
	m := committed.NewManager(blobs, smallTreeConfig)
	recs := treeRecords(3000, "v")
	base := mustWrite(t, m, ns, recs)
	root, err := committed.ReadTreeNode(ctx, blobs, ns, base)
	if err != nil {
		t.Fatal(err)
	}
	if len(root.Children) < 2 {
		t.Fatalf("root of %d children", len(root.Children))
	}
	for j := range len(root.Children) - 1 {
		last := string(root.Children[j].MaxKey)
		var dels, rest []graveler.ValueRecord
		for _, r := range recs {
			if string(r.Key) <= last {
				dels = append(dels, graveler.ValueRecord{Key: r.Key})
			} else {
				rest = append(rest, r)
			}
		}
		got, want := mustApply(t, m, ns, base, dels), mustWrite(t, m, ns, rest)
		if got != want {
			t.Errorf("deleting through child %d: Apply gives %s (level %d), bulk %s (level %d)", j, got, rootLevel(t, blobs, ns, got), want, rootLevel(t, blobs, ns, want))
		}
	}
}
