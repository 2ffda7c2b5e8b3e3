package graveler_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"graveler/graveler"
)

// BenchmarkGroupedReads: N readers Get random keys of one branch (10,000
// entries, committed, as gravelerbench's reads scenario loads them),
// against N goroutines reading the same keys and values straight from the
// same etcd with linearizable gets. ns/op is the inverse of the throughput.
// The graveler sub-benchmarks report "ratio", their throughput over the
// raw sub-benchmark's just before them (goal: >= 1.0 at 16 readers, >= 1.2
// at 64), and "p50x", their median latency over raw's (goal: <= 1.5 at 16).
// "graveler" groups concurrent reads of the branch into one etcd
// transaction; "graveler-ungrouped" sends one per read
// (Config.UngroupedReads).
//
//	go test ./graveler -run '^$' -bench GroupedReads -benchtime 3s -count 3
func BenchmarkGroupedReads(b *testing.B) {
	const entries = 10_000
	env := newBenchEnv(b, graveler.Config{})
	ungrouped := newFixtureRepo(b, env.store, graveler.Config{UngroupedReads: true}, "ungrouped")
	ctx := context.Background()
	for _, f := range []*fixture{env.f, ungrouped} {
		stage(b, f, "main", "r", entries)
		if _, err := f.g.Commit(ctx, f.repo, "main", graveler.CommitParams{Committer: "b", Message: "preload"}); err != nil {
			b.Fatal(err)
		}
	}
	const rawPrefix = "/bench-raw-reads/"
	v := string(append(benchValue(-1, 0).Identity, benchData...))
	runOps(b, 8, entries, func(_, i int) error {
		_, err := env.srv.Client.Put(ctx, rawPrefix+string(benchKey("r", 0, i)), v)
		return err
	})
	for _, n := range []int{16, 64} {
		var rawNs, rawP50 float64
		b.Run(fmt.Sprintf("readers=%d", n), func(b *testing.B) {
			b.Run("raw", func(b *testing.B) {
				b.ResetTimer()
				d, p50 := timedOps(b, n, b.N, func(_, i int) error {
					resp, err := env.srv.Client.Get(ctx, rawPrefix+string(benchKey("r", 0, rand.IntN(entries))))
					if err == nil && len(resp.Kvs) != 1 {
						err = fmt.Errorf("raw get: %d values", len(resp.Kvs))
					}
					return err
				})
				rawNs, rawP50 = float64(d.Nanoseconds())/float64(b.N), p50
			})
			for _, c := range []struct {
				name string
				f    *fixture
			}{{"graveler", env.f}, {"graveler-ungrouped", ungrouped}} {
				b.Run(c.name, func(b *testing.B) {
					b.ResetTimer()
					d, p50 := timedOps(b, n, b.N, func(_, i int) error {
						_, err := c.f.g.Get(ctx, c.f.repo, "main", benchKey("r", 0, rand.IntN(entries)))
						return err
					})
					if ns := float64(d.Nanoseconds()) / float64(b.N); rawNs > 0 && rawP50 > 0 {
						b.ReportMetric(rawNs/ns, "ratio")
						b.ReportMetric(p50/rawP50, "p50x")
					}
				})
			}
		})
	}
}

// timedOps is runOps that also returns the median latency of op, in
// microseconds.
func timedOps(b *testing.B, n, total int, op func(worker, i int) error) (time.Duration, float64) {
	var mu sync.Mutex
	var all []time.Duration
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for w := range n {
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= total {
					return
				}
				t0 := time.Now()
				if err := op(w, i); err != nil {
					if !failed.Swap(true) {
						b.Error(err)
					}
					return
				}
				mine = append(mine, time.Since(t0))
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	if len(all) == 0 {
		return d, 0
	}
	slices.Sort(all)
	return d, float64(all[len(all)/2].Nanoseconds()) / 1e3
}
