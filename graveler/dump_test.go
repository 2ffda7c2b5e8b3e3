package graveler_test

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/gravelertest"
	"graveler/graveler/ref"
	"graveler/kv"
)

// addRootCommits stores n commits of no parent with the given generations
// (several commits share one) and a message of msgLen bytes, on 16 writers.
func addRootCommits(t *testing.T, store kv.Store, repo graveler.RepositoryID, n, msgLen int, gen func(i int) int) {
	t.Helper()
	m := ref.New(store, ref.Config{})
	rec, err := m.GetRepository(t.Context(), repo)
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("m", msgLen)
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n && errs[w] == nil; i += 16 {
				_, errs[w] = m.AddCommit(context.Background(), rec, graveler.Commit{
					Committer: "dump", Message: fmt.Sprint(i, pad), MetaRangeID: "mr", Generation: gen(i),
				})
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestDumpRefsInWindows: with a window far smaller than the history, the
// dump still sends every commit once, by generation then id, then the
// branches and tags.
func TestDumpRefsInWindows(t *testing.T) {
	store := etcdkvtest.NewStore(t)
	f := newFixture(t, store, graveler.Config{})
	addRootCommits(t, store, f.repo, 300, 0, func(i int) int { return i%37 + 1 })
	if _, err := f.g.CreateTag(f.ctx, f.repo, "v1", "main"); err != nil {
		t.Fatal(err)
	}
	var want []*graveler.CommitRecord
	for c, err := range f.g.ListCommits(f.ctx, f.repo, graveler.ListCommitsOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, c)
	}
	slices.SortFunc(want, func(a, b *graveler.CommitRecord) int {
		return cmp.Or(cmp.Compare(a.Generation, b.Generation), cmp.Compare(a.CommitID, b.CommitID))
	})
	for _, window := range []int{1, 16, 301, 1000} {
		graveler.SetDumpWindow(t, window)
		var got []graveler.CommitID
		var kinds []string
		for r, err := range f.g.DumpRefs(f.ctx, f.repo) {
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case r.Commit != nil:
				got = append(got, r.Commit.CommitID)
			case r.Branch != nil:
				kinds = append(kinds, "branch "+string(r.Branch.BranchID))
			case r.Tag != nil:
				kinds = append(kinds, "tag "+string(r.Tag.TagID))
			}
		}
		if len(got) != len(want) {
			t.Fatalf("window %d: %d commits dumped, %d stored", window, len(got), len(want))
		}
		for i, c := range want {
			if got[i] != c.CommitID {
				t.Fatalf("window %d: commit %d is %s, want %s (generation %d)", window, i, got[i], c.CommitID, c.Generation)
			}
		}
		if !slices.Equal(kinds, []string{"branch main", "tag v1"}) {
			t.Fatalf("window %d: refs %v", window, kinds)
		}
	}
}

// TestDumpRefsBoundedMemory: dumping 2,000 commits of 32 KiB (64 MiB of
// messages) with a window of 500 holds a window, not the history: the live
// heap halfway through the dump has grown by less than 3/4 of the history.
func TestDumpRefsBoundedMemory(t *testing.T) {
	const n, msgLen, window = 2000, 32 << 10, 500
	store := etcdkvtest.NewStore(t)
	g := gravelertest.New(t, store, gravelertest.Options{})
	ctx := t.Context()
	if _, err := g.CreateRepository(ctx, "big", gravelertest.Namespace(), "main"); err != nil {
		t.Fatal(err)
	}
	addRootCommits(t, store, "big", n, msgLen, func(i int) int { return i%100 + 1 })
	graveler.SetDumpWindow(t, window)

	var before, mid runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	commits := 0
	for r, err := range g.DumpRefs(ctx, "big") {
		if err != nil {
			t.Fatal(err)
		}
		if r.Commit == nil {
			continue
		}
		if commits++; commits == n/2+window/2 {
			runtime.GC()
			runtime.ReadMemStats(&mid)
		}
	}
	if commits != n+1 {
		t.Fatalf("dumped %d commits, want %d", commits, n+1)
	}
	grown := int64(mid.HeapAlloc) - int64(before.HeapAlloc)
	history := int64(n * msgLen)
	t.Logf("live heap grew by %d MiB mid-dump; the history's messages are %d MiB", grown>>20, history>>20)
	if grown > history*3/4 {
		t.Fatalf("live heap grew by %d bytes mid-dump, history is %d: the dump holds the history", grown, history)
	}
}
