package staging_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/staging"
	"graveler/keys"
)

// BenchmarkSet measures staging writes on an embedded etcd (no fsync):
// one Set at a time, Sets from parallel callers, and SetBatch.
func BenchmarkSet(b *testing.B) {
	m := staging.New(etcdkvtest.NewStore(b), staging.Config{})
	ctx := b.Context()
	v := &graveler.Value{Identity: make([]byte, 32), Data: make([]byte, 200)}
	b.Run("serial", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			if err := m.Set(ctx, "bench-serial", graveler.Key(fmt.Sprintf("k%09d", i)), v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(8)
		var workers atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			w, i := workers.Add(1), 0
			for pb.Next() {
				i++
				k := fmt.Sprintf("w%03d-%09d", w, i)
				if err := m.Set(ctx, "bench-parallel", graveler.Key(k), v); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("batch100", func(b *testing.B) {
		recs := make([]*graveler.ValueRecord, 100)
		for i := range recs {
			recs[i] = &graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("k%03d", i)), Value: v}
		}
		for b.Loop() {
			if err := m.SetBatch(ctx, "bench-batch", recs); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
	})
}

// BenchmarkList walks a whole token of 100k entries on an embedded etcd,
// as a commit does, beside one raw scan of the same partition's keys.
//
//	go test ./graveler/staging -run '^$' -bench List -benchtime 3x
func BenchmarkList(b *testing.B) {
	const n = 100_000
	srv := etcdkvtest.NewServer(b)
	store := etcdkvtest.NewStoreOn(b, srv, etcdkv.Config{})
	m := staging.New(store, staging.Config{})
	ctx := b.Context()
	v := &graveler.Value{Identity: make([]byte, 16), Data: make([]byte, 128)}
	recs := make([]*graveler.ValueRecord, 0, 1000)
	for i := 0; i < n; i += 1000 {
		recs = recs[:0]
		for j := i; j < i+1000; j++ {
			recs = append(recs, &graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("data/%012d", j)), Value: v})
		}
		if err := m.SetBatch(ctx, "bench-list", recs); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("staging", func(b *testing.B) {
		for b.Loop() {
			it, err := m.List(ctx, "bench-list")
			if err != nil {
				b.Fatal(err)
			}
			got := 0
			for it.Next() {
				got++
			}
			if err := it.Err(); err != nil || got != n {
				b.Fatalf("listed %d entries, want %d: %v", got, n, err)
			}
			it.Close()
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	})
	b.Run("raw-one-range", func(b *testing.B) {
		for b.Loop() {
			resp, err := srv.Client.Get(ctx, store.RawPrefix(keys.StagingPartition("bench-list")), clientv3.WithPrefix())
			if err != nil || len(resp.Kvs) != n {
				b.Fatalf("raw range: %v", err)
			}
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	})
}
