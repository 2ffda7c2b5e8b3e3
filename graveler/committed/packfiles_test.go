package committed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"graveler/graveler"
)

// TestPackFilesDeleteRace: a GetRange concurrent with a Delete
// through the store may leave the deleted file open in packFiles, and
// every later GetRange serves the deleted object.
func TestPackFilesDeleteRace(t *testing.T) {
	ctx := context.Background()
	s := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { s.Close() })
	ns, _ := fileNS(t)
	data := bytes.Repeat([]byte("x"), 4096)
	served := 0
	const n = 1500
	for i := range n {
		name := fmt.Sprintf("packs/d%d", i)
		if err := s.Put(ctx, ns, name, data); err != nil {
			t.Fatal(err)
		}
		duringGetRange(t, s, ns, name, func() error { return s.Delete(ctx, ns, name) })
		if _, err := s.GetRange(ctx, ns, name, 0, 10); !errors.Is(err, ErrBlobNotFound) {
			if served == 0 {
				t.Errorf("iteration %d: GetRange after Delete returned = %v, want ErrBlobNotFound", i, err)
			}
			served++
		}
	}
	t.Logf("%d of %d deleted objects still served by GetRange", served, n)
}

// TestPackFilesPutRace: a GetRange concurrent with a Put replacing
// the object may leave the replaced file open, and later GetRanges serve
// the old bytes.
func TestPackFilesPutRace(t *testing.T) {
	ctx := context.Background()
	s := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { s.Close() })
	ns, _ := fileNS(t)
	v1, v2 := bytes.Repeat([]byte("1"), 4096), bytes.Repeat([]byte("2"), 4096)
	stale := 0
	const n = 1500
	for i := range n {
		name := fmt.Sprintf("packs/r%d", i)
		if err := s.Put(ctx, ns, name, v1); err != nil {
			t.Fatal(err)
		}
		duringGetRange(t, s, ns, name, func() error { return s.Put(ctx, ns, name, v2) })
		got, err := s.GetRange(ctx, ns, name, 0, 10)
		if err != nil || !bytes.Equal(got, v2[:10]) {
			if stale == 0 {
				t.Errorf("iteration %d: GetRange after Put = %q, %v; want %q", i, got, err, v2[:10])
			}
			stale++
		}
	}
	t.Logf("%d of %d replaced objects read as before", stale, n)
}

// duringGetRange runs op while a GetRange of name is under way, and
// returns once both are done.
func duringGetRange(t *testing.T, s BlobStore, ns graveler.StorageNamespace, name string, op func() error) {
	t.Helper()
	var wg sync.WaitGroup
	start := make(chan struct{})
	wg.Go(func() {
		<-start
		_, _ = s.GetRange(context.Background(), ns, name, 0, 10)
	})
	close(start)
	err := op()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
}

// TestPackFilesCloseRace: a GetRange concurrent with Close may open
// a pack file after closeAll; it stays open in a closed store for good.
func TestPackFilesCloseRace(t *testing.T) {
	ctx := context.Background()
	ns, _ := fileNS(t)
	leaked := 0
	const n = 500
	for range n {
		s := NewBucketStore(BucketConfig{}).(*blobBucketStore)
		if err := s.Put(ctx, ns, "packs/c", bytes.Repeat([]byte("c"), 64)); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, _ = s.GetRange(ctx, ns, "packs/c", 0, 10)
		}()
		close(start)
		s.Close()
		wg.Wait()
		s.packs.mu.Lock()
		if s.packs.order.Len() > 0 {
			leaked++
		}
		s.packs.mu.Unlock()
	}
	if leaked > 0 {
		t.Errorf("%d of %d closed stores still hold an open pack file", leaked, n)
	}
}

// TestApplyBaseRootGone: a write onto a base whose root is no longer stored
// fails as a missing tree does (graveler.ErrMetaRangeNotFound), though the
// root was held in memory.
func TestApplyBaseRootGone(t *testing.T) {
	ctx := context.Background()
	store := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { store.Close() })
	ns := testNS()
	m := NewManager(store, multiLevelConfig())
	recs := numbered(400, "v")
	id := write(t, m, ns, recs)
	if _, err := m.Get(ctx, ns, id, recs[0].Key); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(ctx, ns, metaRangeBlobName(id)); err != nil {
		t.Fatal(err)
	}
	_, _, err := m.Apply(ctx, ns, id, newSliceIter([]graveler.ValueRecord{rec("key-000001", "new", "x")}), graveler.ApplyOptions{})
	t.Logf("Apply onto a base whose root is gone: %v (ErrMetaRangeNotFound %v, ErrBlobNotFound %v)", err,
		errors.Is(err, graveler.ErrMetaRangeNotFound), errors.Is(err, ErrBlobNotFound))
	if !errors.Is(err, graveler.ErrMetaRangeNotFound) {
		t.Errorf("want ErrMetaRangeNotFound, as loadRoot gives for a missing root")
	}
}

// TestStaleRootFileOtherProcess is TestStaleRootWriteByItsWriter on a
// file:// namespace emptied by
// another process (the writer's store keeps the old packs open).
func TestStaleRootFileOtherProcess(t *testing.T) {
	inner := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { inner.Close() })
	ns, dir := fileNS(t)
	m, cfg, recs, id := heldTree(t, inner, ns)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if err := os.RemoveAll(dir + "/" + e.Name()); err != nil {
			t.Fatal(err)
		}
	}
	other := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { other.Close() })
	if again := write(t, NewManager(other, cfg), ns, recs); again != id {
		t.Fatalf("the same entries made %s, then %s", id, again)
	}
	applyOverStaleRoot(t, m, inner, ns, id, recs, true)
}
