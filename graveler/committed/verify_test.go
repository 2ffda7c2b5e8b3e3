package committed

import (
	"context"
	"errors"
	"testing"

	"graveler/graveler"
)

// verifyFixture writes 200 records in tiny ranges and returns the store,
// the namespace, the metarange and its ranges.
func verifyFixture(t *testing.T) (*countingStore, graveler.StorageNamespace, graveler.MetaRangeID, []RangeDescriptor) {
	t.Helper()
	return verifyFixtureWith(t, tinyConfig)
}

func verifyFixtureWith(t *testing.T, cfg Config) (*countingStore, graveler.StorageNamespace, graveler.MetaRangeID, []RangeDescriptor) {
	t.Helper()
	m, store, ns := newTestManager(t, cfg)
	id := write(t, m, ns, numbered(200, "v"))
	ranges, err := ReadMetaRange(context.Background(), store, ns, id)
	if err != nil {
		t.Fatalf("ReadMetaRange: %v", err)
	}
	if len(ranges) < 3 {
		t.Fatalf("fixture has %d ranges, want several", len(ranges))
	}
	return store, ns, id, ranges
}

func TestVerifyIntactObjects(t *testing.T) {
	ctx := context.Background()
	store, ns, _, ranges := verifyFixture(t)
	total := 0
	for _, d := range ranges {
		ok, err := RangeExists(ctx, store, ns, d.ID, d.Loc)
		if err != nil || !ok {
			t.Fatalf("RangeExists(%s) = %v, %v", d.ID, ok, err)
		}
		s, err := VerifyRange(ctx, store, ns, d.ID, d.Loc)
		if err != nil {
			t.Fatalf("VerifyRange(%s): %v", d.ID, err)
		}
		if err := s.Matches(d); err != nil {
			t.Fatalf("intact range does not match its entry: %v", err)
		}
		total += s.Count
	}
	if total != 200 {
		t.Fatalf("ranges hold %d records, want 200", total)
	}
	if got, err := ReadMetaRange(ctx, store, ns, ""); err != nil || got != nil {
		t.Fatalf("empty tree: %v, %v", got, err)
	}
}

// layouts are the two ways a tree's objects are stored: in packs (the
// default) and each on its own.
var layouts = []struct {
	name string
	cfg  func(Config) Config
}{
	{"packed", func(c Config) Config { return c }},
	{"unpacked", func(c Config) Config { c.Unpacked = true; return c }},
}

// storedFlip flips a byte in the middle of the object d names, in its
// pack or its own blob, returning the blob it changed.
func storedFlip(t *testing.T, store BlobStore, ns graveler.StorageNamespace, d RangeDescriptor, parent int) string {
	t.Helper()
	ctx := context.Background()
	name := d.blobName(parent)
	data, err := store.Get(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	at := int64(len(data) / 2)
	if d.Loc.Packed() {
		at = d.Loc.Offset + d.Loc.Length/2
	}
	data[at] ^= 0xff
	if err := store.Put(ctx, ns, name, data); err != nil {
		t.Fatal(err)
	}
	return name
}

func TestVerifyMissingObjects(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := context.Background()
			store, ns, id, ranges := verifyFixtureWith(t, l.cfg(tinyConfig))
			gone := ranges[1]
			if err := store.Delete(ctx, ns, gone.blobName(1)); err != nil {
				t.Fatal(err)
			}
			if ok, err := RangeExists(ctx, store, ns, gone.ID, gone.Loc); err != nil || ok {
				t.Fatalf("RangeExists(deleted) = %v, %v", ok, err)
			}
			if _, err := VerifyRange(ctx, store, ns, gone.ID, gone.Loc); !errors.Is(err, ErrBlobNotFound) {
				t.Fatalf("VerifyRange(deleted) = %v, want ErrBlobNotFound", err)
			}
			if err := CheckTreeStored(ctx, store, ns, id); !errors.Is(err, ErrBlobNotFound) || errors.Is(err, graveler.ErrMetaRangeNotFound) {
				t.Fatalf("CheckTreeStored(hole) = %v, want ErrBlobNotFound only", err)
			}
			if err := store.Delete(ctx, ns, metaRangeBlobName(id)); err != nil {
				t.Fatal(err)
			}
			_, err := ReadMetaRange(ctx, store, ns, id)
			if !errors.Is(err, graveler.ErrMetaRangeNotFound) || !errors.Is(err, ErrBlobNotFound) {
				t.Fatalf("ReadMetaRange(deleted) = %v, want ErrMetaRangeNotFound and ErrBlobNotFound", err)
			}
		})
	}
}

func TestVerifyDamagedObjects(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			ctx := context.Background()
			store, ns, id, ranges := verifyFixtureWith(t, l.cfg(tinyConfig))

			// A flipped byte: the content no longer hashes to its ID.
			storedFlip(t, store, ns, ranges[0], 1)
			if _, err := VerifyRange(ctx, store, ns, ranges[0].ID, ranges[0].Loc); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("VerifyRange(flipped byte) = %v, want ErrCorrupt", err)
			}
			// Existence alone does not see it.
			if ok, err := RangeExists(ctx, store, ns, ranges[0].ID, ranges[0].Loc); err != nil || !ok {
				t.Fatalf("RangeExists(damaged) = %v, %v", ok, err)
			}

			mname := metaRangeBlobName(id)
			mdata, err := store.Get(ctx, ns, mname)
			if err != nil {
				t.Fatal(err)
			}
			mdata[0] ^= 0xff
			if err := store.Put(ctx, ns, mname, mdata); err != nil {
				t.Fatal(err)
			}
			if _, err := ReadMetaRange(ctx, store, ns, id); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("ReadMetaRange(flipped byte) = %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestVerifyUnsortedRange stores a range whose name is its true hash but
// whose keys are out of order: only walking the records finds it.
func TestVerifyUnsortedRange(t *testing.T) {
	ctx := context.Background()
	_, store, ns := newTestManager(t, tinyConfig)
	b := newRangeBuilder(DefaultBlockSize, nil)
	b.add([]byte("b"), []byte("i1"), nil)
	b.add([]byte("a"), []byte("i2"), nil)
	data := b.finish()
	id := graveler.RangeID(contentID(data))
	if err := store.Put(ctx, ns, rangeBlobName(id), data); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyRange(ctx, store, ns, id, Location{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("VerifyRange(unsorted) = %v, want ErrCorrupt", err)
	}
}

// TestVerifyRangeOutsideBounds: an intact range named by a metarange entry
// whose bounds do not cover it.
func TestVerifyRangeOutsideBounds(t *testing.T) {
	ctx := context.Background()
	store, ns, _, ranges := verifyFixture(t)
	d := ranges[1]
	s, err := VerifyRange(ctx, store, ns, d.ID, d.Loc)
	if err != nil {
		t.Fatal(err)
	}
	narrower := d
	narrower.MaxKey = append(graveler.Key(nil), d.MinKey...)
	shifted := d
	shifted.MinKey = append(append(graveler.Key(nil), d.MinKey...), 0)
	miscounted := d
	miscounted.Count++
	for name, bad := range map[string]RangeDescriptor{"narrower": narrower, "shifted": shifted, "miscounted": miscounted} {
		if err := s.Matches(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s entry: Matches = %v, want ErrCorrupt", name, err)
		}
	}

	// The same through a stored metarange that decodes but lies.
	lying := []RangeDescriptor{narrower}
	mdata := encodeMetaRange(lying, DefaultBlockSize)
	mid := graveler.MetaRangeID(contentID(mdata))
	if err := store.Put(ctx, ns, metaRangeBlobName(mid), mdata); err != nil {
		t.Fatal(err)
	}
	got, err := ReadMetaRange(ctx, store, ns, mid)
	if err != nil || len(got) != 1 {
		t.Fatalf("ReadMetaRange(lying) = %v, %v", got, err)
	}
	if err := s.Matches(got[0]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("range under a lying entry: Matches = %v, want ErrCorrupt", err)
	}
}

func TestVerifyInvalidIDs(t *testing.T) {
	ctx := context.Background()
	_, store, ns := newTestManager(t, tinyConfig)
	if _, err := ReadMetaRange(ctx, store, ns, "../x"); !errors.Is(err, ErrInvalidID) {
		t.Errorf("ReadMetaRange(bad id) = %v", err)
	}
	if _, err := RangeExists(ctx, store, ns, "ABC", Location{}); !errors.Is(err, ErrInvalidID) {
		t.Errorf("RangeExists(bad id) = %v", err)
	}
	if _, err := VerifyRange(ctx, store, ns, "", Location{}); !errors.Is(err, ErrInvalidID) {
		t.Errorf("VerifyRange(bad id) = %v", err)
	}
}
