package committed

import (
	"context"
	"fmt"
	"testing"
	"time"

	"graveler/graveler"
)

// TestFreshnessGenerations: the newest entries, up to two generations,
// are remembered with their times; filling the newer generation forgets
// the older one whole, except the entries read from it meanwhile.
func TestFreshnessGenerations(t *testing.T) {
	f := newFreshness(4)
	at := time.Unix(1000, 0)
	key := func(i int) []byte { return fmt.Appendf(nil, "ns\x00ranges/%d", i) }
	remembered := func(i int) bool {
		_, ok := f.getBytes(key(i))
		return ok
	}
	for i := range 8 {
		f.set(string(key(i)), at.Add(time.Duration(i)*time.Second))
	}
	// Generations {0..3} and {4..7}; newest first, so no read moves one.
	for i := 7; i >= 4; i-- {
		got, ok := f.getBytes(key(i))
		if !ok || !got.Equal(at.Add(time.Duration(i)*time.Second)) {
			t.Fatalf("entry %d: %v %v, want remembered with its time", i, got, ok)
		}
	}
	f.set(string(key(8)), at) // {4..7} becomes the older generation
	for i := range 4 {
		if remembered(i) {
			t.Fatalf("entry %d remembered past two generations", i)
		}
	}
	if !remembered(4) { // moves 4 to the newer generation
		t.Fatal("entry 4 forgotten too early")
	}
	for i := 9; i < 12; i++ {
		f.set(string(key(i)), at)
	}
	for _, i := range []int{5, 6, 7} {
		if remembered(i) {
			t.Fatalf("entry %d remembered past two generations", i)
		}
	}
	for _, i := range []int{11, 10, 9, 8, 4} {
		if !remembered(i) {
			t.Fatalf("entry %d forgotten, want remembered", i)
		}
	}
	if remembered(100) {
		t.Fatal("a key never set is remembered")
	}
	if n := f.len(); n > 8 {
		t.Fatalf("%d entries held, want at most two generations of 4", n)
	}
}

// BenchmarkRefreshKnownFresh times refresh's check of the children a
// commit of 1,000 random keys into 10M entries names (about 88,000,
// passed through from the base, all known fresh): work a commit does
// while its first sync runs, after its root is written.
func BenchmarkRefreshKnownFresh(b *testing.B) {
	const n = 88_000
	m := NewManager(NewBucketStore(BucketConfig{}), Config{})
	ns := graveler.StorageNamespace("file:///data/repo")
	now := m.cfg.Now()
	var refs refList
	for i := range n {
		r := objectRef{node: i%90 == 0, id: fmt.Sprintf("%064x", i)}
		refs.add(r)
		m.fresh.set(rangeCacheKey(ns, r.name()), now)
	}
	ctx := context.Background()
	for b.Loop() {
		if err := m.refresh(ctx, ns, &refs, false); err != nil {
			b.Fatal(err)
		}
	}
}
