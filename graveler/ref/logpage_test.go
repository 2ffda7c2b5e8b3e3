package ref_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/ref"
	"graveler/keys"
	"graveler/kv"
)

// commitReads counts the commit records read from a store.
type commitReads struct {
	kv.Store
	n atomic.Int64
}

func (s *commitReads) Get(ctx context.Context, partition, key []byte) ([]byte, kv.Predicate, error) {
	if bytes.HasPrefix(key, []byte(keys.CommitsPrefix)) {
		s.n.Add(1)
	}
	return s.Store.Get(ctx, partition, key)
}

// buildWideHistory adds about n commits: a main line with up to four side
// lines open at once, forked from it, growing and merged back at random
// (seeded), and dates that repeat, so the walk orders by generation, date
// and id and its frontier holds several commits.
func buildWideHistory(t testing.TB, m *ref.Manager, r *graveler.RepositoryRecord, n int) graveler.CommitID {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(18, 4))
	date := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	add := func(msg string, parents ...graveler.CommitID) graveler.CommitID {
		date = date.Add(time.Duration(rng.IntN(2)) * time.Second)
		id, err := m.AddCommit(ctx, r, graveler.Commit{Committer: "log", Message: msg, MetaRangeID: "mr", CreationDate: date, Parents: parents})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	head := add("root")
	var sides []graveler.CommitID
	for i := 1; i < n; i++ {
		msg := fmt.Sprint(i)
		switch x := rng.IntN(10); {
		case x < 2 && len(sides) < 4:
			sides = append(sides, add("fork "+msg, head))
		case x < 5 && len(sides) > 0:
			j := rng.IntN(len(sides))
			sides[j] = add("side "+msg, sides[j])
		case x < 6 && len(sides) > 0:
			j := rng.IntN(len(sides))
			head = add("merge "+msg, head, sides[j])
			sides = slices.Delete(sides, j, j+1)
		default:
			head = add("main "+msg, head)
		}
	}
	return head
}

func collectLog(t testing.TB, m *ref.Manager, r *graveler.RepositoryRecord, from graveler.CommitID, opts graveler.LogOptions) []graveler.CommitID {
	t.Helper()
	var out []graveler.CommitID
	for c, err := range m.Log(context.Background(), r, from, opts) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c.CommitID)
	}
	return out
}

// logPage walks one page of size n, from the start or from resume, and
// returns it with the frontier to resume the next page from.
func logPage(t testing.TB, m *ref.Manager, r *graveler.RepositoryRecord, from graveler.CommitID, opts graveler.LogOptions, resume []graveler.CommitID, n int) (page, pending []graveler.CommitID) {
	t.Helper()
	pos := &graveler.LogPosition{}
	opts.Resume, opts.Position = resume, pos
	for c, err := range m.Log(context.Background(), r, from, opts) {
		if err != nil {
			t.Fatal(err)
		}
		page = append(page, c.CommitID)
		if len(page) == n {
			return page, pos.Pending()
		}
	}
	return page, nil
}

// TestLogResumeFromPending pages a merge-heavy history through
// Position/Resume and checks that the pages, end to end, are exactly the
// uninterrupted walk, for the full log, first parents only and with Since.
func TestLogResumeFromPending(t *testing.T) {
	store := etcdkvtest.NewStore(t)
	m := ref.New(store, ref.Config{})
	ctx := t.Context()
	r, err := m.CreateBareRepository(ctx, "wide", repoParams())
	if err != nil {
		t.Fatal(err)
	}
	head := buildWideHistory(t, m, r, 300)
	since := collectLog(t, m, r, head, graveler.LogOptions{})[150]
	sinceCommit, err := m.GetCommit(ctx, r, since)
	if err != nil {
		t.Fatal(err)
	}
	widest := 0
	for _, opts := range []graveler.LogOptions{{}, {FirstParent: true}, {Since: sinceCommit.CreationDate}} {
		want := collectLog(t, m, r, head, opts)
		for _, n := range []int{1, 7, 50} {
			var got, resume []graveler.CommitID
			for {
				page, pending := logPage(t, m, r, head, opts, resume, n)
				got = append(got, page...)
				widest = max(widest, len(pending))
				if len(pending) == 0 {
					break
				}
				resume = pending
			}
			if !slices.Equal(got, want) {
				t.Fatalf("first_parent=%v since=%v page=%d: %d commits paged, %d walked; differ at %d", opts.FirstParent, !opts.Since.IsZero(), n, len(got), len(want), firstDiff(got, want))
			}
		}
	}
	if widest < 3 {
		t.Fatalf("history too narrow to test resuming a frontier: widest %d", widest)
	}
}

func firstDiff(a, b []graveler.CommitID) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// logPageReads returns the commit reads of page p (from 1) of size n,
// uncached, resuming from the frontier the previous page left.
func logPageReads(t testing.TB, m *ref.Manager, counted *commitReads, r *graveler.RepositoryRecord, head graveler.CommitID, p, n int) (reads int64, pending []graveler.CommitID) {
	var resume []graveler.CommitID
	for i := 1; i <= p; i++ {
		before := counted.n.Load()
		var page []graveler.CommitID
		page, resume = logPage(t, m, r, head, graveler.LogOptions{}, resume, n)
		if len(page) != n {
			t.Fatalf("page %d has %d commits", i, len(page))
		}
		reads = counted.n.Load() - before
	}
	return reads, resume
}

// TestLogPageReadsDoNotGrowWithDepth: a page deep in history reads no more
// commit records than the first page, plus the frontier it resumes from.
func TestLogPageReadsDoNotGrowWithDepth(t *testing.T) {
	counted := &commitReads{Store: etcdkvtest.NewStore(t)}
	m := ref.New(counted, ref.Config{CommitCacheSize: -1})
	r, err := m.CreateBareRepository(t.Context(), "deep", repoParams())
	if err != nil {
		t.Fatal(err)
	}
	head := buildWideHistory(t, m, r, 1200)
	const size = 10
	first, _ := logPageReads(t, m, counted, r, head, 1, size)
	deep, _ := logPageReads(t, m, counted, r, head, 100, size)
	_, frontier := logPageReads(t, m, counted, r, head, 99, size)
	t.Logf("commit reads: page 1 %d, page 100 %d (frontier %d)", first, deep, len(frontier))
	if deep > first+int64(len(frontier)) {
		t.Fatalf("page 100 read %d commits, page 1 %d: a page's work grows with its depth", deep, first)
	}
}

// BenchmarkLogPage reads page 1 and page 100 (10 commits each) of a
// 1200-commit merge-heavy history on etcd, uncached, resuming from the
// frontier of the page before; commit-reads/op is equal for both.
func BenchmarkLogPage(b *testing.B) {
	counted := &commitReads{Store: etcdkvtest.NewStore(b)}
	m := ref.New(counted, ref.Config{CommitCacheSize: -1})
	r, err := m.CreateBareRepository(context.Background(), "bench", repoParams())
	if err != nil {
		b.Fatal(err)
	}
	head := buildWideHistory(b, m, r, 1200)
	const size = 10
	for _, p := range []int{1, 100} {
		b.Run(fmt.Sprintf("page=%d", p), func(b *testing.B) {
			var resume []graveler.CommitID
			if p > 1 {
				_, resume = logPageReads(b, m, counted, r, head, p-1, size)
			}
			start := counted.n.Load()
			for b.Loop() {
				logPage(b, m, r, head, graveler.LogOptions{}, resume, size)
			}
			b.ReportMetric(float64(counted.n.Load()-start)/float64(b.N), "commit-reads/op")
		})
	}
}
