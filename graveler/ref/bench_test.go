package ref_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"graveler/graveler"
	"graveler/graveler/ref"
	"graveler/kv"
)

// buildHistory adds n commits: a main line where every 10th commit merges
// a side line that forked 5 commits earlier, so the log's frontier holds
// more than one commit at times.
func buildHistory(b *testing.B, m *ref.Manager, r *graveler.RepositoryRecord, n int) graveler.CommitID {
	ctx := context.Background()
	date := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	add := func(msg string, parents ...graveler.CommitID) graveler.CommitID {
		date = date.Add(time.Second)
		id, err := m.AddCommit(ctx, r, graveler.Commit{Committer: "bench", Message: msg, MetaRangeID: "mr", CreationDate: date, Parents: parents})
		if err != nil {
			b.Fatal(err)
		}
		return id
	}
	var mainLine []graveler.CommitID
	head := add("root")
	mainLine = append(mainLine, head)
	side := graveler.CommitID("")
	for i := 1; len(mainLine)+countSide(i) < n; i++ {
		switch {
		case i%10 == 5:
			side = add(fmt.Sprintf("side-%d", i), head)
		case i%10 == 0 && side != "":
			head = add(fmt.Sprintf("merge-%d", i), head, side)
			side = ""
		default:
			head = add(fmt.Sprintf("main-%d", i), head)
		}
		mainLine = append(mainLine, head)
	}
	return head
}

func countSide(i int) int { return i / 10 }

func logBench(b *testing.B, n, walk int) {
	store := kv.NewMemoryStore()
	defer store.Close()
	m := ref.New(store, ref.Config{})
	ctx := context.Background()
	r, err := m.CreateBareRepository(ctx, "bench", repoParams())
	if err != nil {
		b.Fatal(err)
	}
	head := buildHistory(b, m, r, n)

	// Live heap in the middle of a walk, after a GC: what the walk holds.
	var before, mid runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	seen := 0
	for _, err := range m.Log(ctx, r, head, graveler.LogOptions{}) {
		if err != nil {
			b.Fatal(err)
		}
		if seen++; seen == min(walk, n)*9/10 {
			runtime.GC()
			runtime.ReadMemStats(&mid)
		}
	}
	liveB := float64(int64(mid.HeapAlloc) - int64(before.HeapAlloc))

	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		seen := 0
		for _, err := range m.Log(ctx, r, head, graveler.LogOptions{}) {
			if err != nil {
				b.Fatal(err)
			}
			if seen++; seen == walk {
				break
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(min(walk, n)), "ns/commit")
	b.ReportMetric(liveB, "live-B")
}

// BenchmarkLog walks the whole history (all) and its newest 1000 commits
// (first1000) of a 1k- and a 10k-commit history. Memory independent of
// history length shows as equal B/op for first1000, B/op proportional to
// the commits walked for all, and equal live-B (heap held mid-walk).
func BenchmarkLog(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("history=%d/all", n), func(b *testing.B) { logBench(b, n, n) })
		b.Run(fmt.Sprintf("history=%d/first1000", n), func(b *testing.B) { logBench(b, n, 1000) })
	}
}
