package committed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"graveler/graveler"
)

// v1FixtureDir holds a tree written by the one-level format (version 1: one
// metarange of ranges), kept to prove such trees stay readable.
const v1FixtureDir = "testdata/v1tree"

// v1FixtureRecords are the entries of the v1 fixture tree.
func v1FixtureRecords() []graveler.ValueRecord {
	out := make([]graveler.ValueRecord, 300)
	for i := range out {
		k := fmt.Sprintf("v1/key-%05d", i*3)
		out[i] = rec(k, fmt.Sprintf("id-%05d", i), "data of "+k)
	}
	return out
}

// The fixture was written by the version 1 writer (the one-level format
// of the previous release: WriteMetaRangeByIterator with tinyConfig over
// v1FixtureRecords, each stored object copied to v1FixtureDir). The
// current writer cannot write it again.

// loadV1Fixture copies the fixture into a fresh namespace of store and
// returns it and the tree's root.
func loadV1Fixture(t testing.TB, store BlobStore) (graveler.StorageNamespace, graveler.MetaRangeID) {
	t.Helper()
	ns := testNS()
	root, err := os.ReadFile(filepath.Join(v1FixtureDir, "ROOT"))
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(v1FixtureDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "ROOT" {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(v1FixtureDir, p)
		return store.Put(context.Background(), ns, filepath.ToSlash(rel), data)
	})
	if err != nil {
		t.Fatal(err)
	}
	return ns, graveler.MetaRangeID(strings.TrimSpace(string(root)))
}

// TestReadV1Tree: a tree written by the one-level format (a version 1
// metarange of ranges) reads as a tree whose root is at level 1: listing,
// lookups, the checks, and writing onto it, whose result is the tree the
// current format makes of the same entries.
func TestReadV1Tree(t *testing.T) {
	ctx := context.Background()
	store := NewBucketStore(BucketConfig{})
	defer store.Close()
	ns, root := loadV1Fixture(t, store)
	recs := v1FixtureRecords()
	for _, cfg := range []Config{tinyConfig, multiLevelConfig(), {}} {
		m := NewManager(store, cfg)
		if err := sameRecords(collect(t, mustList(t, m, ns, root)), recs); err != nil {
			t.Fatalf("List: %v", err)
		}
		for _, i := range []int{0, 1, 150, 299} {
			v, err := m.Get(ctx, ns, root, recs[i].Key)
			if err != nil || !bytes.Equal(v.Identity, recs[i].Identity) {
				t.Fatalf("Get(%q) = %v, %v", recs[i].Key, v, err)
			}
		}
		if _, err := m.Get(ctx, ns, root, graveler.Key("v1/key-00001")); !errors.Is(err, graveler.ErrEntryNotFound) {
			t.Fatalf("Get of a missing key: %v", err)
		}
		// The same entries in the current format: no differences.
		current := write(t, m, ns, recs)
		if current == root {
			t.Fatal("the current format wrote the version 1 tree")
		}
		d, err := m.Diff(ctx, ns, root, current)
		if err != nil {
			t.Fatal(err)
		}
		if diffs := collectDiff(t, d); len(diffs) != 0 {
			t.Fatalf("%d differences between a v1 tree and the same entries", len(diffs))
		}
		// A change onto the v1 tree gives a tree of the current format
		// with the change in it.
		changed := rec(string(recs[100].Key), "new", "new")
		id, _, err := m.Apply(ctx, ns, root, newSliceIter([]graveler.ValueRecord{changed}), graveler.ApplyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := append([]graveler.ValueRecord(nil), recs...)
		want[100] = changed
		if err := sameRecords(collect(t, mustList(t, m, ns, id)), want); err != nil {
			t.Fatalf("List after Apply: %v", err)
		}
		n, err := ReadTreeNode(ctx, store, ns, id)
		if err != nil {
			t.Fatal(err)
		}
		if n.Level < 1 {
			t.Fatalf("level %d", n.Level)
		}
	}
	ranges, err := ReadMetaRange(ctx, store, ns, root)
	if err != nil || len(ranges) < 10 {
		t.Fatalf("ReadMetaRange: %d ranges, %v", len(ranges), err)
	}
	for _, r := range ranges {
		s, err := VerifyRange(ctx, store, ns, r.ID, r.Loc)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Matches(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := CheckTreeStored(ctx, store, ns, root); err != nil {
		t.Fatal(err)
	}
	n, err := ReadTreeNode(ctx, store, ns, root)
	if err != nil || n.Level != 1 {
		t.Fatalf("v1 root: %+v, %v", n, err)
	}
}

func mustList(t *testing.T, m *Manager, ns graveler.StorageNamespace, id graveler.MetaRangeID) graveler.ValueIterator {
	t.Helper()
	it, err := m.List(context.Background(), ns, id)
	if err != nil {
		t.Fatal(err)
	}
	return it
}
