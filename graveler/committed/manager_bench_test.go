package committed

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"graveler/graveler"
)

func benchRecords(n int) []graveler.ValueRecord {
	out := make([]graveler.ValueRecord, n)
	for i := range out {
		k := fmt.Sprintf("data/part-%08d.parquet", i)
		out[i] = rec(k, fmt.Sprintf("%016x", rand.Uint64()), "s3://bucket/objects/"+k)
	}
	return out
}

func benchBase(b *testing.B, n int) (*Manager, graveler.StorageNamespace, graveler.MetaRangeID, []graveler.ValueRecord) {
	m, _, ns := newTestManager(b, Config{})
	recs := benchRecords(n)
	id := write(b, m, ns, recs)
	return m, ns, id, recs
}

// BenchmarkApply applies 1k changes onto a 1M-entry base with the default
// range sizes: spread over the whole key space, or within one key region.
func BenchmarkApply(b *testing.B) {
	m, ns, base, recs := benchBase(b, 1_000_000)
	mr, _ := m.loadMetaRange(context.Background(), ns, base)
	b.Logf("base: %d entries in %d ranges", len(recs), len(mr.ranges))
	for _, c := range []struct {
		name string
		pick func(r *rand.Rand) int
	}{
		{"spread", func(r *rand.Rand) int { return r.IntN(len(recs)) }},
		{"clustered", func(r *rand.Rand) int { return 500_000 + r.IntN(5_000) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			idx := map[int]bool{}
			for len(idx) < 1000 {
				idx[c.pick(r)] = true
			}
			var changes []graveler.ValueRecord
			for _, i := range slices.Sorted(func(yield func(int) bool) {
				for i := range idx {
					if !yield(i) {
						return
					}
				}
			}) {
				changes = append(changes, rec(string(recs[i].Key), "changed", "new"))
			}
			ctx := context.Background()
			for b.Loop() {
				if _, _, err := m.Apply(ctx, ns, base, newSliceIter(changes), graveler.ApplyOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkList scans 100k entries with warm caches.
func BenchmarkList(b *testing.B) {
	m, ns, id, _ := benchBase(b, 100_000)
	ctx := context.Background()
	for b.Loop() {
		it, err := m.List(ctx, ns, id)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for it.Next() {
			n++
		}
		it.Close()
		if it.Err() != nil || n != 100_000 {
			b.Fatal(n, it.Err())
		}
	}
}

// BenchmarkGet reads random keys of a 100k-entry tree with warm caches.
func BenchmarkGet(b *testing.B) {
	m, ns, id, recs := benchBase(b, 100_000)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	for b.Loop() {
		if _, err := m.Get(ctx, ns, id, recs[r.IntN(len(recs))].Key); err != nil {
			b.Fatal(err)
		}
	}
}
