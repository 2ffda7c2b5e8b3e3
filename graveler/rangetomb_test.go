package graveler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/gravelertest"
	"graveler/graveler/staging"
	"graveler/keys"
	"graveler/kv"
	"graveler/kv/kvtest"
)

// Range tombstones (DeletePrefix) and the read budget of a listing page.

func (f *fixture) deletePrefix(branch, prefix string) {
	f.t.Helper()
	if err := f.g.DeletePrefix(f.ctx, f.repo, graveler.BranchID(branch), graveler.Key(prefix)); err != nil {
		f.t.Fatalf("delete prefix %q on %s: %v", prefix, branch, err)
	}
}

// pages lists ref page by page with ListEntriesPage, as an API client
// does, and returns the rows ("key" or "prefix*") and how many pages it
// took, failing on a page that ends the listing with rows still to come.
func (f *fixture) pages(ref string, opts graveler.ListEntriesOptions) (rows []string, pages, short int) {
	f.t.Helper()
	for {
		page, err := f.g.ListEntriesPage(f.ctx, f.repo, graveler.Ref(ref), opts)
		if err != nil {
			f.t.Fatalf("list %s: %v", ref, err)
		}
		pages++
		for _, r := range page.Rows {
			s := string(r.Key)
			if r.CommonPrefix {
				s += "*"
			}
			rows = append(rows, s)
		}
		if !page.More {
			return rows, pages, short
		}
		if len(page.Rows) < opts.Limit {
			short++
		}
		switch {
		case page.ResumeAfter != nil:
			opts.After, opts.Resume = page.ResumeAfter, true
		case len(page.Rows) > 0:
			opts.After, opts.Resume = page.Rows[len(page.Rows)-1].Key, false
		default:
			f.t.Fatal("a page with more, no rows and nowhere to resume")
		}
	}
}

func (f *fixture) treeKeys(ref string) []string {
	f.t.Helper()
	return f.list(ref, graveler.ListEntriesOptions{Limit: 1000})
}

func wantRows(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s = %q, want %q", what, got, want)
	}
}

// TestDeletePrefixEveryReader: one range tombstone deletes committed keys
// and keys staged before it, for Get, listings with and without a
// delimiter, DiffUncommitted and the commit; a key written after it
// survives everywhere.
func TestDeletePrefixEveryReader(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		f := newFixture(t, store, graveler.Config{})
		for _, k := range []string{"a/1", "a/2", "a/3", "a/sub/4", "ab", "b/1"} {
			f.set("main", k, "c")
		}
		f.commit("main", "base")
		f.set("main", "a/2", "staged")
		f.set("main", "a/6", "staged")
		f.deletePrefix("main", "a/")

		for _, k := range []string{"a/1", "a/2", "a/3", "a/sub/4", "a/6"} {
			f.wantMissing("main", k)
		}
		f.want("main", "ab", "c")
		f.want("main", "b/1", "c")
		f.want("main@", "a/1", "c") // the head is untouched
		wantRows(t, "list", f.treeKeys("main"), "ab", "b/1")
		wantRows(t, "list /", f.list("main", graveler.ListEntriesOptions{Delimiter: graveler.Key("/"), Limit: 1}), "ab", "b/*")
		wantRows(t, "list a/", f.list("main", graveler.ListEntriesOptions{Prefix: graveler.Key("a/"), Limit: 10}))
		wantRows(t, "diff", f.diffUncommitted("main"), "removed a/1", "removed a/2", "removed a/3", "removed a/sub/4")

		// Written after the tombstone: it wins.
		f.set("main", "a/3", "after")
		f.want("main", "a/3", "after")
		wantRows(t, "list after", f.treeKeys("main"), "a/3", "ab", "b/1")
		wantRows(t, "list / after", f.list("main", graveler.ListEntriesOptions{Delimiter: graveler.Key("/"), Limit: 10}), "a/*", "ab", "b/*")
		wantRows(t, "diff after", f.diffUncommitted("main"), "removed a/1", "removed a/2", "changed a/3", "removed a/sub/4")

		c := f.commit("main", "delete a/")
		wantRows(t, "committed", f.treeKeys(string(c)), "a/3", "ab", "b/1")
		f.want(string(c), "a/3", "after")
		wantRows(t, "diff after commit", f.diffUncommitted("main"))
		if _, err := f.g.Commit(f.ctx, f.repo, "main", graveler.CommitParams{Committer: "t", Message: "again"}); !errors.Is(err, graveler.ErrNoChanges) {
			t.Fatalf("commit of a clean branch: %v, want ErrNoChanges", err)
		}
	})
}

// TestDeletePrefixAloneIsAChange: a branch whose only staged change is a
// range tombstone is dirty, and its commit deletes the keys.
func TestDeletePrefixAloneIsAChange(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		f := newFixture(t, store, graveler.Config{})
		f.set("main", "x/1", "c")
		f.set("main", "y", "c")
		f.commit("main", "base")
		f.deletePrefix("main", "x/")
		c := f.commit("main", "delete x/")
		wantRows(t, "committed", f.treeKeys(string(c)), "y")
	})
}

// TestDeletePrefixEmptyDeletesEverything: the empty prefix is allowed and
// deletes every key; keys written after it survive.
func TestDeletePrefixEmptyDeletesEverything(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		f := newFixture(t, store, graveler.Config{})
		f.set("main", "a", "c")
		f.set("main", "\xff\xff", "c")
		f.commit("main", "base")
		f.deletePrefix("main", "")
		wantRows(t, "list", f.treeKeys("main"))
		f.set("main", "b", "after")
		wantRows(t, "list after", f.treeKeys("main"), "b")
		c := f.commit("main", "wipe")
		wantRows(t, "committed", f.treeKeys(string(c)), "b")
	})
}

// TestDeletePrefixLimit: a token holds at most Config.MaxRangeTombstones;
// a tombstone covering earlier ones replaces them; a commit starts a new
// token with room again. Over the limit the error says resource exhausted.
func TestDeletePrefixLimit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		g := gravelertest.New(t, store, gravelertest.Options{Staging: staging.Config{MaxRangeTombstones: 2}})
		f := &fixture{t: t, g: g, ctx: context.Background(), repo: "repo"}
		if _, err := g.CreateRepository(f.ctx, f.repo, gravelertest.Namespace(), "main"); err != nil {
			t.Fatal(err)
		}
		f.deletePrefix("main", "a/b/")
		f.deletePrefix("main", "c/")
		f.deletePrefix("main", "a/") // replaces a/b/
		err := g.DeletePrefix(f.ctx, f.repo, "main", graveler.Key("d/"))
		if !errors.Is(err, graveler.ErrTooManyRangeTombstones) || !errors.Is(err, graveler.ErrResourceExhausted) {
			t.Fatalf("third prefix: %v, want ErrTooManyRangeTombstones", err)
		}
		long := make([]byte, graveler.MaxKeyLen+1)
		if err := g.DeletePrefix(f.ctx, f.repo, "main", long); !errors.Is(err, graveler.ErrInvalidKey) {
			t.Fatalf("over-long prefix: %v, want ErrInvalidKey", err)
		}
		f.set("main", "z", "1")
		f.commit("main", "c")
		f.deletePrefix("main", "d/")
	})
}

// TestDeletePrefixOverSealedToken: while a commit is in flight (its token
// sealed), a range tombstone in the new token hides what the sealed token
// stages, also once that commit has landed it; a key written after it
// survives; the next commit deletes the rest.
func TestDeletePrefixOverSealedToken(t *testing.T) {
	p := newPauseFixture(t, etcdkvtest.NewStore(t), graveler.Config{})
	p.set("main", "a/old", "c")
	p.commit("main", "base")
	p.set("main", "a/1", "sealed")
	hold := p.ps.Pause(kvtest.Before, p.commitHeadUpdate("main"))
	done := async(func() error {
		_, err := p.g.Commit(p.ctx, p.repo, "main", graveler.CommitParams{Committer: "t", Message: "m"})
		return err
	})
	hold.Wait(t, holdTimeout)
	if n := len(p.branch("main").SealedTokens); n != 1 {
		t.Fatalf("%d sealed tokens, want 1", n)
	}
	p.deletePrefix("main", "a/")
	p.set("main", "a/2", "after")
	p.wantMissing("main", "a/1")
	p.wantMissing("main", "a/old")
	p.want("main", "a/2", "after")
	wantRows(t, "list in flight", p.treeKeys("main"), "a/2")
	hold.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	p.want("main@", "a/1", "sealed") // the commit in flight landed it
	p.wantMissing("main", "a/1")
	wantRows(t, "list after commit", p.treeKeys("main"), "a/2")
	wantRows(t, "diff", p.diffUncommitted("main"), "removed a/1", "added a/2", "removed a/old")
	c := p.commit("main", "next")
	wantRows(t, "committed", p.treeKeys(string(c)), "a/2")
}

// rangesOf matches an operation on the range tombstones record of main's
// current staging token.
func (p *pauseFixture) rangesOf(name string) func(kvtest.Op) bool {
	st := p.branch("main").StagingToken
	return func(op kvtest.Op) bool { return op.Is(name, keys.StagingPartition(string(st)), keys.StagingRanges()) }
}

// TestDeletePrefixSetBetweenReadAndWrite: a Set of a key under the prefix
// acknowledged between DeletePrefix's read of the token's tombstones and
// its write is older than the tombstone, so deleted, consistently for
// every reader and the commit.
func TestDeletePrefixSetBetweenReadAndWrite(t *testing.T) {
	p := newPauseFixture(t, etcdkvtest.NewStore(t), graveler.Config{})
	hold := p.ps.Pause(kvtest.After, p.rangesOf("get_many"))
	done := async(func() error { return p.g.DeletePrefix(p.ctx, p.repo, "main", graveler.Key("a/")) })
	hold.Wait(t, holdTimeout)
	p.set("main", "a/1", "between")
	p.want("main", "a/1", "between")
	hold.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	p.wantMissing("main", "a/1")
	wantRows(t, "list", p.treeKeys("main"))
	p.set("main", "b", "1")
	c := p.commit("main", "c")
	wantRows(t, "committed", p.treeKeys(string(c)), "b")
}

// TestDeletePrefixCommitSealsMeanwhile: a commit seals the token between
// DeletePrefix's read and its write; the tombstone lands in the sealed
// token, and the writer's fence writes it again into the new one, so the
// branch shows the prefix deleted, and so does the next commit.
func TestDeletePrefixCommitSealsMeanwhile(t *testing.T) {
	p := newPauseFixture(t, etcdkvtest.NewStore(t), graveler.Config{})
	p.set("main", "a/1", "c")
	p.set("main", "b", "c")
	hold := p.ps.Pause(kvtest.Before, p.rangesOf("setif"))
	done := async(func() error { return p.g.DeletePrefix(p.ctx, p.repo, "main", graveler.Key("a/")) })
	hold.Wait(t, holdTimeout)
	c1 := p.commit("main", "meanwhile")
	hold.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wantRows(t, "commit meanwhile", p.treeKeys(string(c1)), "a/1", "b")
	p.wantMissing("main", "a/1")
	wantRows(t, "list", p.treeKeys("main"), "b")
	c2 := p.commit("main", "after")
	wantRows(t, "committed", p.treeKeys(string(c2)), "b")
}

// TestDeletePrefixCallerGivesUp: a caller whose context ends while its
// write is held before the store sees it is answered with its context's
// error, and the tombstone is never applied.
func TestDeletePrefixCallerGivesUp(t *testing.T) {
	p := newPauseFixture(t, etcdkvtest.NewStore(t), graveler.Config{})
	p.set("main", "a/1", "c")
	hold := p.ps.Pause(kvtest.Before, p.rangesOf("setif"))
	ctx, cancel := context.WithCancel(p.ctx)
	done := async(func() error { return p.g.DeletePrefix(ctx, p.repo, "main", graveler.Key("a/")) })
	hold.Wait(t, holdTimeout)
	cancel()
	hold.Release()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("DeletePrefix = %v, want context.Canceled", err)
	}
	p.want("main", "a/1", "c")
	wantRows(t, "list", p.treeKeys("main"), "a/1")
	wantRows(t, "diff", p.diffUncommitted("main"), "added a/1")
}

// TestResetAfterDeletePrefix: resetting a key or a prefix a range
// tombstone covers discards that delete there, as it would per-key
// deletes, and keeps it elsewhere.
func TestResetAfterDeletePrefix(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		f := newFixture(t, store, graveler.Config{})
		for _, k := range []string{"a/1", "a/2", "a/x/1", "a/x/2"} {
			f.set("main", k, "c")
		}
		f.commit("main", "base")
		f.deletePrefix("main", "a/")
		if err := f.g.Reset(f.ctx, f.repo, "main", graveler.ResetTypeKey, graveler.Key("a/1")); err != nil {
			t.Fatal(err)
		}
		if err := f.g.Reset(f.ctx, f.repo, "main", graveler.ResetTypePrefix, graveler.Key("a/x/")); err != nil {
			t.Fatal(err)
		}
		wantRows(t, "list", f.treeKeys("main"), "a/1", "a/x/1", "a/x/2")
		c := f.commit("main", "c")
		wantRows(t, "committed", f.treeKeys(string(c)), "a/1", "a/x/1", "a/x/2")
	})
}

// TestListPageBudget: a page that meets more tombstones than
// Config.ListPageBudget ends short (even empty) with a place to resume,
// and reading every page yields each live key exactly once, with and
// without a delimiter, also where the tombstones lie inside a common
// prefix that a live key reaches only at its end.
func TestListPageBudget(t *testing.T) {
	const tombstones = 50_000
	f := newFixture(t, etcdkvtest.NewStore(t), graveler.Config{})
	var recs []*graveler.ValueRecord
	var live []string
	add := func(k string, alive bool) {
		r := &graveler.ValueRecord{Key: graveler.Key(k)}
		if alive {
			v := val(k)
			r.Value = &v
			live = append(live, k)
		}
		recs = append(recs, r)
	}
	add("d/a", true)
	for i := range tombstones {
		add(fmt.Sprintf("d/t/%05d", i), false)
		if i%12_345 == 12_344 {
			add(fmt.Sprintf("d/t/%05d-live", i), true)
		}
	}
	add("d/t/zz", true)
	add("d/z", true)
	for i := 0; i < len(recs); i += 1000 {
		if err := f.g.SetBatch(f.ctx, f.repo, "main", recs[i:min(i+1000, len(recs))]); err != nil {
			t.Fatal(err)
		}
	}

	first, err := f.g.ListEntriesPage(f.ctx, f.repo, "main", graveler.ListEntriesOptions{Prefix: graveler.Key("d/t/"), Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	// 12,344 tombstones before the first live key: the page stops at the
	// budget, with no row.
	if !first.More || len(first.Rows) != 0 || first.ResumeAfter == nil {
		t.Fatalf("first page over %d tombstones: %d rows, more %v, resume %q; want an empty page with more", tombstones, len(first.Rows), first.More, first.ResumeAfter)
	}

	rows, pages, short := f.pages("main", graveler.ListEntriesOptions{Limit: 100})
	wantRows(t, "every page", rows, live...)
	if short < tombstones/graveler.DefaultListPageBudget-1 {
		t.Fatalf("%d short pages over %d tombstones (%d pages), want at least %d", short, tombstones, pages, tombstones/graveler.DefaultListPageBudget-1)
	}
	rows, _, _ = f.pages("main", graveler.ListEntriesOptions{Prefix: graveler.Key("d/"), Delimiter: graveler.Key("/"), Limit: 1})
	wantRows(t, "pages with a delimiter", rows, "d/a", "d/t/*", "d/z")
	// Only the very end of the common prefix is live.
	var del []*graveler.ValueRecord
	for _, k := range live {
		if k != "d/t/zz" && k != "d/a" && k != "d/z" {
			del = append(del, &graveler.ValueRecord{Key: graveler.Key(k)})
		}
	}
	if err := f.g.SetBatch(f.ctx, f.repo, "main", del); err != nil {
		t.Fatal(err)
	}
	rows, _, _ = f.pages("main", graveler.ListEntriesOptions{Prefix: graveler.Key("d/"), Delimiter: graveler.Key("/"), Limit: 1})
	wantRows(t, "pages with a delimiter, one live key at the end", rows, "d/a", "d/t/*", "d/z")
	// ListEntries still returns full pages.
	full, more, err := f.g.ListEntries(f.ctx, f.repo, "main", graveler.ListEntriesOptions{Limit: 3})
	if err != nil || more || len(full) != 3 {
		t.Fatalf("ListEntries = %d rows, more %v, %v; want 3 and the end", len(full), more, err)
	}
}

// TestListPageBudgetOverDeletedPrefix: a deleted prefix costs a listing a
// seek, not a read per key: the first page after DeletePrefix of a stretch
// much larger than the budget is full.
func TestListPageBudgetOverDeletedPrefix(t *testing.T) {
	f := newFixture(t, etcdkvtest.NewStore(t), graveler.Config{ListPageBudget: 100})
	var recs []*graveler.ValueRecord
	for i := range 1000 {
		v := val("c")
		recs = append(recs, &graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("p/%04d", i)), Value: &v})
	}
	for _, k := range []string{"a", "q", "r"} {
		v := val("c")
		recs = append(recs, &graveler.ValueRecord{Key: graveler.Key(k), Value: &v})
	}
	if err := f.g.SetBatch(f.ctx, f.repo, "main", recs); err != nil {
		t.Fatal(err)
	}
	f.commit("main", "base")
	f.deletePrefix("main", "p/")
	page, err := f.g.ListEntriesPage(f.ctx, f.repo, "main", graveler.ListEntriesOptions{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range page.Rows {
		got = append(got, string(r.Key))
	}
	wantRows(t, "first page", got, "a", "q", "r")
}

// BenchmarkListFirstPageOverTombstones: the first page (1000 rows) of a
// prefix whose first 50,000 keys are deleted, on etcd: by 50,000 staged
// tombstones with the default page budget and with none (every tombstone
// read, as before pages were bounded), and by one DeletePrefix of 50,000
// committed keys. "live" is the same page with nothing deleted, the
// same-run baseline.
//
//	go test ./graveler -run '^$' -bench ListFirstPageOverTombstones -benchtime 20x
func BenchmarkListFirstPageOverTombstones(b *testing.B) {
	const deleted = 50_000
	store := etcdkvtest.NewStore(b)
	blobs := committed.NewBucketStore(committed.BucketConfig{})
	b.Cleanup(func() { blobs.Close() })
	f := &fixture{t: b, g: gravelertest.New(b, store, gravelertest.Options{Blobs: blobs}), ctx: context.Background(), repo: "bench"}
	if _, err := f.g.CreateRepository(f.ctx, f.repo, gravelertest.Namespace(), "main"); err != nil {
		b.Fatal(err)
	}
	unbounded := gravelertest.New(b, store, gravelertest.Options{Blobs: blobs, Graveler: graveler.Config{ListPageBudget: -1}})
	var head []*graveler.ValueRecord
	for i := range deleted + 1000 {
		v := val("c")
		head = append(head, &graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("p/%06d", i)), Value: &v})
	}
	if _, err := f.commitSorted(f.ctx, head, graveler.CommitParams{Committer: "b", Message: "head"}); err != nil {
		b.Fatal(err)
	}
	for _, br := range []graveler.BranchID{"live", "perkey", "prefix"} {
		if _, err := f.g.CreateBranch(f.ctx, f.repo, br, "main"); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < deleted; i += 1000 {
		var recs []*graveler.ValueRecord
		for j := i; j < i+1000; j++ {
			recs = append(recs, &graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("p/%06d", j))})
		}
		if err := f.g.SetBatch(f.ctx, f.repo, "perkey", recs); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < deleted/1000; i++ {
		f.deletePrefix("prefix", fmt.Sprintf("p/%03d", i))
	}
	for _, c := range []struct {
		name   string
		g      *graveler.Graveler
		branch string
	}{
		{"live", f.g, "live"},
		{"staged-deletes/budget", f.g, "perkey"},
		{"staged-deletes/unbounded", unbounded, "perkey"},
		{"delete-prefix/budget", f.g, "prefix"},
	} {
		b.Run(c.name, func(b *testing.B) {
			records := 0
			for b.Loop() {
				page, err := c.g.ListEntriesPage(f.ctx, f.repo, graveler.Ref(c.branch), graveler.ListEntriesOptions{Prefix: graveler.Key("p/"), Limit: 1000})
				if err != nil {
					b.Fatal(err)
				}
				records = page.RecordsRead
			}
			b.ReportMetric(float64(records), "records/page")
		})
	}
}
