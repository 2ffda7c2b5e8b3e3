package committed

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"graveler/graveler"
)

// touchCounter counts Stat and Touch calls by object name.
type touchCounter struct {
	BlobStore
	mu      sync.Mutex
	touched map[string]int
	stats   atomic.Int64
}

func (s *touchCounter) Stat(ctx context.Context, ns graveler.StorageNamespace, name string) (BlobInfo, error) {
	s.stats.Add(1)
	return s.BlobStore.Stat(ctx, ns, name)
}

func (s *touchCounter) Touch(ctx context.Context, ns graveler.StorageNamespace, name string) error {
	s.mu.Lock()
	s.touched[name]++
	s.mu.Unlock()
	return s.BlobStore.Touch(ctx, ns, name)
}

func (s *touchCounter) touches() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.touched {
		out[k] = v
	}
	return out
}

func fileNS(t *testing.T) (graveler.StorageNamespace, string) {
	dir := t.TempDir()
	return graveler.StorageNamespace((&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String()), dir
}

func fileMTime(t *testing.T, dir, name string) time.Time {
	t.Helper()
	info, err := os.Stat(filepath.Join(dir, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return info.ModTime()
}

func setMTime(t *testing.T, dir, name string, at time.Time) {
	t.Helper()
	if err := os.Chtimes(filepath.Join(dir, filepath.FromSlash(name)), at, at); err != nil {
		t.Fatal(err)
	}
}

// TestApplyRefreshesReusedRanges: a range Apply passes through from its
// base without writing it is touched when it is older than half the GC
// grace, left alone when younger, and a missing one fails the write
// instead of giving the new metarange a hole.
func TestApplyRefreshesReusedRanges(t *testing.T) {
	ctx := context.Background()
	ns, dir := fileNS(t)
	blobs := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { blobs.Close() })
	cfg := tinyConfig
	cfg.GCGrace = 6 * time.Hour
	base := write(t, NewManager(blobs, cfg), ns, numbered(400, "v"))
	ranges, err := ReadMetaRange(ctx, blobs, ns, base)
	if err != nil {
		t.Fatal(err)
	}
	if len(ranges) < 10 {
		t.Fatalf("base has %d ranges, want many", len(ranges))
	}
	now := time.Now()
	old, young := now.Add(-10*time.Hour), now.Add(-time.Hour)
	youngName := rangeBlobName(ranges[1].ID)
	for i, r := range ranges {
		at := old
		if i == 1 {
			at = young
		}
		setMTime(t, dir, rangeBlobName(r.ID), at)
	}

	// A restarted gravelerd: nothing remembered about the objects.
	counter := &touchCounter{BlobStore: blobs, touched: map[string]int{}}
	m := NewManager(counter, cfg)
	last := numbered(400, "v")[399]
	changed, _, err := m.Apply(ctx, ns, base, newSliceIter([]graveler.ValueRecord{rec(string(last.Key), "new", "new")}), graveler.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	after, err := ReadMetaRange(ctx, blobs, ns, changed)
	if err != nil {
		t.Fatal(err)
	}
	reused := 0
	for _, r := range after {
		name := rangeBlobName(r.ID)
		mt := fileMTime(t, dir, name)
		switch {
		case name == youngName:
			if !mt.Equal(young) {
				t.Errorf("a range 1h old (grace 6h) was touched: %v -> %v", young, mt)
			}
		case mt.Before(now.Add(-time.Minute)):
			t.Errorf("range %s of the new metarange is still %v old", r.ID, now.Sub(mt).Round(time.Minute))
		}
		for _, b := range ranges {
			if b.ID == r.ID {
				reused++
			}
		}
	}
	if reused < len(ranges)-2 {
		t.Fatalf("only %d of %d base ranges passed through", reused, len(ranges))
	}
	touched := counter.touches()
	if touched[youngName] != 0 || len(touched) < reused-1 {
		t.Errorf("touched %d objects (the young one %d times), want the %d old reused ones", len(touched), touched[youngName], reused-1)
	}

	// The same commit again from this Manager: it knows the ranges are
	// fresh and asks the store nothing.
	stats := counter.stats.Load()
	if _, _, err := m.Apply(ctx, ns, base, newSliceIter([]graveler.ValueRecord{rec(string(last.Key), "newer", "newer")}), graveler.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := counter.stats.Load() - stats; n != 0 {
		t.Errorf("a second Apply over fresh ranges made %d Stats", n)
	}

	// A reused range that is gone fails the write.
	// A blob of the test's own namespace, not a kv record.
	if err := blobs.Delete(ctx, ns, rangeBlobName(ranges[3].ID)); err != nil {
		t.Fatal(err)
	}
	m2 := NewManager(blobs, cfg)
	_, _, err = m2.Apply(ctx, ns, base, newSliceIter([]graveler.ValueRecord{rec(string(last.Key), "third", "third")}), graveler.ApplyOptions{})
	if !errors.Is(err, ErrBlobNotFound) || !strings.Contains(err.Error(), string(ranges[3].ID)) {
		t.Fatalf("Apply over a base whose range is gone = %v, want ErrBlobNotFound naming the range", err)
	}
}

// TestLongApplyRefreshesItsOwnRanges: ranges an Apply wrote more than half
// the grace before its metarange are touched before the metarange is
// written, so a commit that takes long still references only young
// objects.
func TestLongApplyRefreshesItsOwnRanges(t *testing.T) {
	ctx := context.Background()
	ns, _ := fileNS(t)
	blobs := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { blobs.Close() })
	var skew atomic.Int64
	cfg := tinyConfig
	cfg.GCGrace = 6 * time.Hour
	cfg.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	counter := &touchCounter{BlobStore: blobs, touched: map[string]int{}}
	m := NewManager(counter, cfg)
	recs := numbered(400, "v")
	// The writer's clock jumps 4h once half the records are written: the
	// ranges written before look 4h old when the metarange is written.
	it := &hookIter{sliceIter: newSliceIter(recs), at: 200, fn: func() { skew.Store(int64(4 * time.Hour)) }}
	id, err := m.WriteMetaRangeByIterator(ctx, ns, it)
	if err != nil {
		t.Fatal(err)
	}
	ranges, err := ReadMetaRange(ctx, blobs, ns, id)
	if err != nil {
		t.Fatal(err)
	}
	touched := counter.touches()
	early := 0
	for _, r := range ranges {
		if string(r.MaxKey) < string(recs[200].Key) {
			early++
			if touched[rangeBlobName(r.ID)] != 1 {
				t.Errorf("range %s written 4h before its metarange was touched %d times, want 1", r.ID, touched[rangeBlobName(r.ID)])
			}
		} else if touched[rangeBlobName(r.ID)] != 0 {
			t.Errorf("range %s written just before its metarange was touched", r.ID)
		}
	}
	if early < 5 {
		t.Fatalf("only %d ranges written before the clock jumped", early)
	}
}

// hookIter calls fn once, before returning record at.
type hookIter struct {
	*sliceIter
	at   int
	fn   func()
	done bool
}

func (h *hookIter) Next() bool {
	if !h.done && h.i+1 == h.at {
		h.done = true
		h.fn()
	}
	return h.sliceIter.Next()
}
