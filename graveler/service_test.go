package graveler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/gravelertest"
	"graveler/graveler/ref"
	"graveler/graveler/staging"
	"graveler/kv"
	"graveler/kv/kvtest"
)

// backends are the kv stores every service test runs on.
var backends = []struct {
	name string
	new  func(t testing.TB) kv.Store
}{
	{"memory", func(t testing.TB) kv.Store { s := kv.NewMemoryStore(); t.Cleanup(func() { s.Close() }); return s }},
	{"etcd", func(t testing.TB) kv.Store { return etcdkvtest.NewStore(t) }},
}

func forEachBackend(t *testing.T, f func(t *testing.T, store kv.Store)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f(t, b.new(t))
		})
	}
}

func val(s string) graveler.Value {
	return graveler.Value{Identity: []byte("id:" + s), Data: []byte(s)}
}

type fixture struct {
	t    testing.TB
	g    *graveler.Graveler
	ctx  context.Context
	repo graveler.RepositoryID
}

func newFixture(t testing.TB, store kv.Store, cfg graveler.Config) *fixture {
	return newFixtureRepo(t, store, cfg, "repo")
}

// newFixtureRepo is newFixture with a repository of its own name, for
// fixtures sharing one store.
func newFixtureRepo(t testing.TB, store kv.Store, cfg graveler.Config, repo graveler.RepositoryID) *fixture {
	g := gravelertest.New(t, store, gravelertest.Options{Graveler: cfg})
	f := &fixture{t: t, g: g, ctx: context.Background(), repo: repo}
	if _, err := g.CreateRepository(f.ctx, f.repo, gravelertest.Namespace(), "main"); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) set(branch, key, v string) {
	f.t.Helper()
	if err := f.g.Set(f.ctx, f.repo, graveler.BranchID(branch), graveler.Key(key), val(v), graveler.SetOptions{}); err != nil {
		f.t.Fatalf("set %s=%s on %s: %v", key, v, branch, err)
	}
}

func (f *fixture) get(ref, key string) (string, error) {
	v, err := f.g.Get(f.ctx, f.repo, graveler.Ref(ref), graveler.Key(key))
	if err != nil {
		return "", err
	}
	return string(v.Data), nil
}

func (f *fixture) want(ref, key, v string) {
	f.t.Helper()
	got, err := f.get(ref, key)
	if err != nil || got != v {
		f.t.Fatalf("get %s at %s = %q, %v; want %q", key, ref, got, err, v)
	}
}

func (f *fixture) wantMissing(ref, key string) {
	f.t.Helper()
	if got, err := f.get(ref, key); !errors.Is(err, graveler.ErrEntryNotFound) {
		f.t.Fatalf("get %s at %s = %q, %v; want not found", key, ref, got, err)
	}
}

func (f *fixture) commit(branch, msg string) graveler.CommitID {
	f.t.Helper()
	id, err := f.g.Commit(f.ctx, f.repo, graveler.BranchID(branch), graveler.CommitParams{Committer: "t", Message: msg})
	if err != nil {
		f.t.Fatalf("commit %s: %v", msg, err)
	}
	return id
}

// list returns every row of a listing, paging with limit, as "key" or
// "prefix*".
func (f *fixture) list(ref string, opts graveler.ListEntriesOptions) []string {
	f.t.Helper()
	var out []string
	for {
		rows, more, err := f.g.ListEntries(f.ctx, f.repo, graveler.Ref(ref), opts)
		if err != nil {
			f.t.Fatalf("list %s: %v", ref, err)
		}
		for _, r := range rows {
			s := string(r.Key)
			if r.CommonPrefix {
				s += "*"
			}
			out = append(out, s)
		}
		if !more {
			return out
		}
		if len(rows) == 0 {
			f.t.Fatal("more with an empty page")
		}
		opts.After = rows[len(rows)-1].Key
	}
}

func (f *fixture) diffUncommitted(branch string) []string {
	f.t.Helper()
	it, err := f.g.DiffUncommitted(f.ctx, f.repo, graveler.BranchID(branch))
	if err != nil {
		f.t.Fatal(err)
	}
	defer it.Close()
	var out []string
	for it.Next() {
		d := it.Value()
		out = append(out, fmt.Sprintf("%s %s", d.Type, d.Key))
	}
	if err := it.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

func TestStagingReadWriteCommit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		f := newFixture(t, store, graveler.Config{})
		f.set("main", "a", "1")
		f.set("main", "b", "1")
		f.want("main", "a", "1")
		f.wantMissing("main@", "a") // committed head has nothing yet
		if got := f.diffUncommitted("main"); !slices.Equal(got, []string{"added a", "added b"}) {
			t.Fatalf("diff uncommitted: %v", got)
		}
		c1 := f.commit("main", "one")
		f.want("main@", "a", "1")
		f.want(string(c1), "b", "1")
		if got := f.diffUncommitted("main"); len(got) != 0 {
			t.Fatalf("diff after commit: %v", got)
		}
		if _, err := f.g.Commit(f.ctx, f.repo, "main", graveler.CommitParams{Message: "empty"}); !errors.Is(err, graveler.ErrNoChanges) {
			t.Fatalf("empty commit: %v", err)
		}
		// Rewriting the same identity is no change.
		f.set("main", "a", "1")
		if _, err := f.g.Commit(f.ctx, f.repo, "main", graveler.CommitParams{Message: "same"}); !errors.Is(err, graveler.ErrNoChanges) {
			t.Fatalf("idempotent rewrite commit: %v", err)
		}
		empty, err := f.g.Commit(f.ctx, f.repo, "main", graveler.CommitParams{Message: "allowed", AllowEmpty: true})
		if err != nil {
			t.Fatalf("allow empty: %v", err)
		}

		// A tombstone hides the committed value, and is itself a change.
		if err := f.g.Delete(f.ctx, f.repo, "main", graveler.Key("a")); err != nil {
			t.Fatal(err)
		}
		f.wantMissing("main", "a")
		f.want("main@", "a", "1")
		if err := f.g.Delete(f.ctx, f.repo, "main", graveler.Key("nope")); !errors.Is(err, graveler.ErrEntryNotFound) {
			t.Fatalf("delete missing: %v", err)
		}
		if got := f.diffUncommitted("main"); !slices.Equal(got, []string{"removed a"}) {
			t.Fatalf("diff with tombstone: %v", got)
		}
		f.set("main", "b", "2")
		c2 := f.commit("main", "two")
		f.wantMissing("main", "a")
		f.want("main", "b", "2")
		f.want(string(c1), "b", "1")

		// IfAbsent.
		err = f.g.Set(f.ctx, f.repo, "main", graveler.Key("b"), val("x"), graveler.SetOptions{IfAbsent: true})
		if !errors.Is(err, graveler.ErrEntryExists) {
			t.Fatalf("if absent on existing: %v", err)
		}
		if err := f.g.Set(f.ctx, f.repo, "main", graveler.Key("a"), val("3"), graveler.SetOptions{IfAbsent: true}); err != nil {
			t.Fatalf("if absent on deleted: %v", err)
		}

		// History.
		var log []graveler.CommitID
		for c, err := range f.g.Log(f.ctx, f.repo, "main", graveler.LogOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			log = append(log, c.CommitID)
		}
		if len(log) != 4 || log[0] != c2 || log[1] != empty || log[2] != c1 {
			t.Fatalf("log %v, want [%s %s %s root]", log, c2, empty, c1)
		}
	})
}

func TestValidation(t *testing.T) {
	f := newFixture(t, kv.NewMemoryStore(), graveler.Config{})
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"empty key", f.g.Set(f.ctx, f.repo, "main", nil, val("x"), graveler.SetOptions{}), graveler.ErrInvalidKey},
		{"long key", f.g.Set(f.ctx, f.repo, "main", make(graveler.Key, graveler.MaxKeyLen+1), val("x"), graveler.SetOptions{}), graveler.ErrInvalidKey},
		{"no identity", f.g.Set(f.ctx, f.repo, "main", graveler.Key("k"), graveler.Value{}, graveler.SetOptions{}), graveler.ErrInvalidValue},
		{"big value", f.g.Set(f.ctx, f.repo, "main", graveler.Key("k"), graveler.Value{Identity: []byte("i"), Data: make([]byte, graveler.MaxValueDataLen+1)}, graveler.SetOptions{}), graveler.ErrValueTooLarge},
		{"bad branch", f.g.Set(f.ctx, f.repo, "bad/branch", graveler.Key("k"), val("x"), graveler.SetOptions{}), graveler.ErrInvalidBranchID},
		{"missing branch", f.g.Set(f.ctx, f.repo, "nope", graveler.Key("k"), val("x"), graveler.SetOptions{}), graveler.ErrBranchNotFound},
		{"missing repo", f.g.Set(f.ctx, "nope", "main", graveler.Key("k"), val("x"), graveler.SetOptions{}), graveler.ErrRepositoryNotFound},
		{"bad ref", func() error { _, err := f.g.Get(f.ctx, f.repo, "main~x", graveler.Key("k")); return err }(), graveler.ErrInvalidRef},
		{"unknown ref", func() error { _, err := f.g.Get(f.ctx, f.repo, "nosuch", graveler.Key("k")); return err }(), graveler.ErrRefNotFound},
		{"zero limit", func() error {
			_, _, err := f.g.ListEntries(f.ctx, f.repo, "main", graveler.ListEntriesOptions{})
			return err
		}(), graveler.ErrInvalidArgument},
		{"bad reset", f.g.Reset(f.ctx, f.repo, "main", graveler.ResetType(9), nil), graveler.ErrInvalidArgument},
		{"reset key without key", f.g.Reset(f.ctx, f.repo, "main", graveler.ResetTypeKey, nil), graveler.ErrInvalidKey},
		{"bad namespace", func() error { _, err := f.g.CreateRepository(f.ctx, "other", "ftp://x", "main"); return err }(), graveler.ErrInvalidStorageNamespace},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.err, c.want)
		}
		if !errors.Is(c.err, graveler.ErrInvalidArgument) && !errors.Is(c.err, graveler.ErrNotFound) {
			t.Errorf("%s: %v is neither invalid argument nor not found", c.name, c.err)
		}
	}
}

func TestListEntries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		f := newFixture(t, store, graveler.Config{})
		for _, k := range []string{"a/1", "a/2", "b/x/1", "b/y", "c", "d/1"} {
			f.set("main", k, k)
		}
		f.commit("main", "base")
		// Staged on top: a new key, an overwrite, a delete, a key under a
		// committed prefix, and binary keys.
		f.set("main", "a/3", "a/3")
		f.set("main", "c", "c2")
		if err := f.g.Delete(f.ctx, f.repo, "main", graveler.Key("d/1")); err != nil {
			t.Fatal(err)
		}
		f.set("main", "\x00zero", "z")
		f.set("main", "\xff\xffhigh", "h")

		all := []string{"\x00zero", "a/1", "a/2", "a/3", "b/x/1", "b/y", "c", "\xff\xffhigh"}
		for _, limit := range []int{1, 2, 3, 100} {
			if got := f.list("main", graveler.ListEntriesOptions{Limit: limit}); !slices.Equal(got, all) {
				t.Fatalf("limit %d: %q", limit, got)
			}
		}
		for _, limit := range []int{1, 100} {
			got := f.list("main", graveler.ListEntriesOptions{Limit: limit, Delimiter: graveler.Key("/")})
			if want := []string{"\x00zero", "a/*", "b/*", "c", "\xff\xffhigh"}; !slices.Equal(got, want) {
				t.Fatalf("delimiter, limit %d: %q", limit, got)
			}
			got = f.list("main", graveler.ListEntriesOptions{Limit: limit, Prefix: graveler.Key("b/"), Delimiter: graveler.Key("/")})
			if want := []string{"b/x/*", "b/y"}; !slices.Equal(got, want) {
				t.Fatalf("prefix b/ with delimiter, limit %d: %q", limit, got)
			}
		}
		// d/ is gone entirely: its only key is deleted.
		if got := f.list("main", graveler.ListEntriesOptions{Limit: 10, Prefix: graveler.Key("d")}); len(got) != 0 {
			t.Fatalf("deleted prefix: %q", got)
		}
		// The committed head still has it; "main@" skips staging.
		if got := f.list("main@", graveler.ListEntriesOptions{Limit: 10, Prefix: graveler.Key("d")}); !slices.Equal(got, []string{"d/1"}) {
			t.Fatalf("committed head: %q", got)
		}
		// After a key that is not there, and after a common prefix.
		if got := f.list("main", graveler.ListEntriesOptions{Limit: 10, After: graveler.Key("a/25")}); got[0] != "a/3" {
			t.Fatalf("after a/25: %q", got)
		}
		if got := f.list("main", graveler.ListEntriesOptions{Limit: 10, After: graveler.Key("a/"), Delimiter: graveler.Key("/")}); got[0] != "b/*" {
			t.Fatalf("after common prefix a/: %q", got)
		}
		// Values come back.
		rows, _, err := f.g.ListEntries(f.ctx, f.repo, "main", graveler.ListEntriesOptions{Limit: 10, Prefix: graveler.Key("c")})
		if err != nil || len(rows) != 1 || string(rows[0].Value.Data) != "c2" {
			t.Fatalf("value in listing: %v %v", rows, err)
		}
	})
}

func TestResets(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		f := newFixture(t, store, graveler.Config{})
		f.set("main", "keep", "1")
		c1 := f.commit("main", "one")
		for _, k := range []string{"r/1", "r/2", "s", "keep"} {
			f.set("main", k, "staged")
		}
		if err := f.g.Reset(f.ctx, f.repo, "main", graveler.ResetTypeKey, graveler.Key("keep")); err != nil {
			t.Fatal(err)
		}
		f.want("main", "keep", "1")
		if err := f.g.Reset(f.ctx, f.repo, "main", graveler.ResetTypePrefix, graveler.Key("r/")); err != nil {
			t.Fatal(err)
		}
		if got := f.list("main", graveler.ListEntriesOptions{Limit: 10}); !slices.Equal(got, []string{"keep", "s"}) {
			t.Fatalf("after partial resets: %q", got)
		}
		// Reset hard: dirty without force; a stale expected head loses.
		c2id := graveler.CommitID("")
		_, err := f.g.ResetHard(f.ctx, f.repo, "main", graveler.Ref(c1), graveler.ResetHardOptions{})
		if !errors.Is(err, graveler.ErrDirtyBranch) {
			t.Fatalf("reset hard dirty: %v", err)
		}
		c2id = f.commit("main", "two")
		_, err = f.g.ResetHard(f.ctx, f.repo, "main", graveler.Ref(c1), graveler.ResetHardOptions{ExpectedCommitID: c1})
		if !errors.Is(err, graveler.ErrBranchHeadMoved) || !errors.Is(err, graveler.ErrConflict) {
			t.Fatalf("reset hard stale etag: %v", err)
		}
		f.set("main", "t", "staged")
		b, err := f.g.ResetHard(f.ctx, f.repo, "main", graveler.Ref(c1), graveler.ResetHardOptions{ExpectedCommitID: c2id, Force: true})
		if err != nil || b.CommitID != c1 {
			t.Fatalf("reset hard force: %v %v", b, err)
		}
		f.wantMissing("main", "t")
		f.wantMissing("main", "s")
		// Reset all.
		f.set("main", "u", "staged")
		if err := f.g.Reset(f.ctx, f.repo, "main", graveler.ResetTypeAll, nil); err != nil {
			t.Fatal(err)
		}
		f.wantMissing("main", "u")
		if got := f.list("main", graveler.ListEntriesOptions{Limit: 10}); !slices.Equal(got, []string{"keep"}) {
			t.Fatalf("after reset all: %q", got)
		}
	})
}

func TestMergeRevertCherryPick(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		f := newFixture(t, store, graveler.Config{})
		f.set("main", "a", "1")
		f.set("main", "b", "1")
		base := f.commit("main", "base")
		if _, err := f.g.CreateBranch(f.ctx, f.repo, "dev", "main"); err != nil {
			t.Fatal(err)
		}
		f.set("dev", "a", "dev")
		f.set("dev", "c", "dev")
		devC := f.commit("dev", "dev work")
		f.set("main", "d", "main")
		mainC := f.commit("main", "main work")

		// Dirty destination refuses.
		f.set("main", "x", "dirty")
		if _, _, err := f.g.Merge(f.ctx, f.repo, "main", "dev", graveler.MergeParams{}); !errors.Is(err, graveler.ErrDirtyBranch) {
			t.Fatalf("merge into dirty: %v", err)
		}
		if err := f.g.Reset(f.ctx, f.repo, "main", graveler.ResetTypeAll, nil); err != nil {
			t.Fatal(err)
		}
		m, _, err := f.g.Merge(f.ctx, f.repo, "main", "dev", graveler.MergeParams{})
		if err != nil {
			t.Fatal(err)
		}
		mc, err := f.g.GetCommit(f.ctx, f.repo, graveler.Ref(m))
		if err != nil || !slices.Equal(mc.Parents, []graveler.CommitID{mainC, devC}) || mc.Message != "Merge 'dev' into 'main'" {
			t.Fatalf("merge commit %+v %v", mc, err)
		}
		f.want("main", "a", "dev")
		f.want("main", "d", "main")
		if _, _, err := f.g.Merge(f.ctx, f.repo, "main", "dev", graveler.MergeParams{}); !errors.Is(err, graveler.ErrNothingToMerge) || !errors.Is(err, graveler.ErrNoChanges) {
			t.Fatalf("merge again: %v", err)
		}

		// Conflict: both sides change b.
		f.set("main", "b", "main-side")
		f.commit("main", "main b")
		f.set("dev", "b", "dev-side")
		f.commit("dev", "dev b")
		_, _, err = f.g.Merge(f.ctx, f.repo, "main", "dev", graveler.MergeParams{})
		conflict, ok := errors.AsType[*graveler.MergeConflictError](err)
		if !ok || !errors.Is(err, graveler.ErrMergeConflict) || len(conflict.Keys) != 1 || string(conflict.Keys[0]) != "b" {
			t.Fatalf("conflict: %v", err)
		}
		if _, _, err := f.g.Merge(f.ctx, f.repo, "main", "dev", graveler.MergeParams{Strategy: graveler.MergeStrategySourceWins}); err != nil {
			t.Fatal(err)
		}
		f.want("main", "b", "dev-side")

		// Revert the dev work on main; cherry-pick it back.
		if _, err := f.g.Revert(f.ctx, f.repo, "main", graveler.Ref(devC), 0, graveler.CommitParams{}); err != nil {
			t.Fatal(err)
		}
		f.want("main", "a", "1")
		f.wantMissing("main", "c")
		if _, err := f.g.CherryPick(f.ctx, f.repo, "main", graveler.Ref(devC), 1, graveler.CommitParams{}); err != nil {
			t.Fatal(err)
		}
		f.want("main", "a", "dev")
		f.want("main", "c", "dev")
		if _, err := f.g.Revert(f.ctx, f.repo, "main", graveler.Ref(m), 0, graveler.CommitParams{}); !errors.Is(err, graveler.ErrRevertMergeNoParent) {
			t.Fatalf("revert merge without parent: %v", err)
		}
		if _, err := f.g.Revert(f.ctx, f.repo, "main", graveler.Ref(m), 3, graveler.CommitParams{}); !errors.Is(err, graveler.ErrInvalidParentNumber) {
			t.Fatalf("revert merge parent 3: %v", err)
		}
		if _, err := f.g.Revert(f.ctx, f.repo, "main", graveler.Ref(base)+"~1", 0, graveler.CommitParams{}); !errors.Is(err, graveler.ErrInvalidArgument) {
			t.Fatalf("revert root commit: %v", err)
		}
		// Diff between refs skips staging.
		it, err := f.g.Diff(f.ctx, f.repo, graveler.Ref(base), "dev")
		if err != nil {
			t.Fatal(err)
		}
		var diffs []string
		for it.Next() {
			diffs = append(diffs, fmt.Sprintf("%s %s", it.Value().Type, it.Value().Key))
		}
		it.Close()
		if !slices.Equal(diffs, []string{"changed a", "changed b", "added c"}) {
			t.Fatalf("diff: %v", diffs)
		}
	})
}

func TestDumpRestore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		blobs := committed.NewBucketStore(committed.BucketConfig{})
		t.Cleanup(func() { blobs.Close() })
		f := &fixture{t: t, g: gravelertest.New(t, store, gravelertest.Options{Blobs: blobs}), ctx: context.Background(), repo: "repo"}
		if _, err := f.g.CreateRepository(f.ctx, f.repo, gravelertest.Namespace(), "main"); err != nil {
			t.Fatal(err)
		}
		f.set("main", "a", "1")
		f.commit("main", "one")
		if _, err := f.g.CreateBranch(f.ctx, f.repo, "dev", "main"); err != nil {
			t.Fatal(err)
		}
		f.set("dev", "b", "2")
		f.commit("dev", "two")
		// A merge commit, so that the dump holds a commit of two parents.
		if _, _, err := f.g.Merge(f.ctx, f.repo, "main", "dev", graveler.MergeParams{NoFastForward: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.g.CreateTag(f.ctx, f.repo, "v1", "main~1"); err != nil {
			t.Fatal(err)
		}
		var recs []*graveler.RefsRecord
		seen := map[graveler.CommitID]bool{}
		for r, err := range f.g.DumpRefs(f.ctx, f.repo) {
			if err != nil {
				t.Fatal(err)
			}
			if r.Commit != nil {
				for _, p := range r.Commit.Parents {
					if !seen[p] {
						t.Fatalf("commit %s dumped before its parent %s", r.Commit.CommitID, p)
					}
				}
				seen[r.Commit.CommitID] = true
			}
			recs = append(recs, r)
		}
		if len(recs) != 4+2+1 {
			t.Fatalf("dumped %d records", len(recs))
		}
		repo, err := f.g.GetRepository(f.ctx, f.repo)
		if err != nil {
			t.Fatal(err)
		}
		// The namespace is the live repository's: a restore goes to a copy.
		if _, err := f.g.CreateBareRepository(f.ctx, "copy", repo.StorageNamespace, "main"); !errors.Is(err, graveler.ErrNamespaceInUse) {
			t.Fatalf("bare repository on a namespace in use: %v", err)
		}
		copyNS := gravelertest.Namespace()
		err = blobs.List(f.ctx, repo.StorageNamespace, "", func(page []committed.BlobInfo) error {
			for _, b := range page {
				data, err := blobs.Get(f.ctx, repo.StorageNamespace, b.Name)
				if err != nil {
					return err
				}
				if err := blobs.Put(f.ctx, copyNS, b.Name, data); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.g.CreateBareRepository(f.ctx, "copy", copyNS, "main"); err != nil {
			t.Fatal(err)
		}
		seq := func(yield func(*graveler.RefsRecord, error) bool) {
			for _, r := range recs {
				if !yield(r, nil) {
					return
				}
			}
		}
		if err := f.g.RestoreRefs(f.ctx, "copy", seq); err != nil {
			t.Fatal(err)
		}
		if err := f.g.RestoreRefs(f.ctx, "copy", seq); !errors.Is(err, graveler.ErrNotBareRepository) {
			t.Fatalf("restore twice: %v", err)
		}
		if err := f.g.RestoreRefs(f.ctx, f.repo, seq); !errors.Is(err, graveler.ErrNotBareRepository) {
			t.Fatalf("restore into a live repository: %v", err)
		}
		for _, ref := range []string{"main", "dev", "v1"} {
			a, err1 := f.g.GetCommit(f.ctx, f.repo, graveler.Ref(ref))
			b, err2 := f.g.GetCommit(f.ctx, "copy", graveler.Ref(ref))
			if err1 != nil || err2 != nil || a.CommitID != b.CommitID {
				t.Fatalf("%s: %v %v / %v %v", ref, a, err1, b, err2)
			}
		}
		v, err := f.g.Get(f.ctx, "copy", "main", graveler.Key("b"))
		if err != nil || string(v.Data) != "2" {
			t.Fatalf("read restored: %v %v", v, err)
		}
		// A tampered commit is refused.
		bad := *recs[1].Commit.Commit
		bad.Message = "tampered"
		if _, err := f.g.CreateBareRepository(f.ctx, "copy2", gravelertest.Namespace(), "main"); err != nil {
			t.Fatal(err)
		}
		err = f.g.RestoreRefs(f.ctx, "copy2", func(yield func(*graveler.RefsRecord, error) bool) {
			yield(&graveler.RefsRecord{Commit: &graveler.CommitRecord{CommitID: recs[1].Commit.CommitID, Commit: &bad}}, nil)
		})
		if !errors.Is(err, graveler.ErrInvalidArgument) && !errors.Is(err, graveler.ErrNotFound) {
			t.Fatalf("tampered restore: %v", err)
		}
		// A commit after a branch is refused: the collector would keep
		// only what the commits before the branch reference.
		reordered := []*graveler.RefsRecord{
			recs[0],
			{Branch: &graveler.BranchRecord{BranchID: "early", Branch: &graveler.Branch{CommitID: recs[0].Commit.CommitID}}},
			recs[1],
		}
		if _, err := f.g.CreateBareRepository(f.ctx, "copy3", gravelertest.Namespace(), "main"); err != nil {
			t.Fatal(err)
		}
		err = f.g.RestoreRefs(f.ctx, "copy3", func(yield func(*graveler.RefsRecord, error) bool) {
			for _, r := range reordered {
				if !yield(r, nil) {
					return
				}
			}
		})
		if !errors.Is(err, graveler.ErrInvalidArgument) || !strings.Contains(err.Error(), "after a branch or tag") {
			t.Fatalf("restore with a commit after a branch: %v, want ErrInvalidArgument", err)
		}
	})
}

func TestDeletedRepositoryInvisible(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		f := newFixture(t, store, graveler.Config{})
		f.set("main", "a", "1")
		f.commit("main", "one")
		if err := f.g.DeleteRepository(f.ctx, f.repo); err != nil {
			t.Fatal(err)
		}
		if _, err := f.get("main", "a"); !errors.Is(err, graveler.ErrRepositoryNotFound) {
			t.Fatalf("read deleted: %v", err)
		}
		if err := f.g.Set(f.ctx, f.repo, "main", graveler.Key("a"), val("2"), graveler.SetOptions{}); !errors.Is(err, graveler.ErrRepositoryNotFound) {
			t.Fatalf("write deleted: %v", err)
		}
		// Same name, new incarnation: empty, and the old branch cache
		// entry (same repository and branch names) is not reused.
		if _, err := f.g.CreateRepository(f.ctx, f.repo, gravelertest.Namespace(), "main"); err != nil {
			t.Fatal(err)
		}
		f.wantMissing("main", "a")
		f.set("main", "b", "new")
		f.want("main", "b", "new")
	})
}

// TestFailedCommitLeavesSealedTokensReadable injects a failure into the
// last step of a commit: the staged entries stay visible (in a sealed
// token), and the next commit absorbs them.
func TestFailedCommitLeavesSealedTokensReadable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		fs := kvtest.NewFaultStore(store)
		f := newFixture(t, fs, graveler.Config{BranchCacheTTL: -1})
		f.set("main", "a", "1")
		// Count a commit's ops, then fail the head update: the one before
		// the last (the last queues the consumed token for the cleaner).
		f.set("main", "probe", "1")
		fs.Reset()
		f.commit("main", "probe")
		ops := fs.Ops()
		f.set("main", "b", "2")
		fs.Reset()
		fs.FailAt(ops-1, kvtest.FaultError)
		if _, err := f.g.Commit(f.ctx, f.repo, "main", graveler.CommitParams{Message: "fails"}); err == nil {
			t.Fatal("commit with a failed head update succeeded")
		}
		fs.Reset()
		br, err := f.g.GetBranch(f.ctx, f.repo, "main")
		if err != nil || len(br.SealedTokens) != 1 {
			t.Fatalf("branch after failed commit: %+v %v", br, err)
		}
		f.want("main", "b", "2")
		f.set("main", "c", "3")
		if got := f.list("main", graveler.ListEntriesOptions{Limit: 10}); !slices.Equal(got, []string{"a", "b", "c", "probe"}) {
			t.Fatalf("listing over a sealed token: %q", got)
		}
		f.commit("main", "absorbs")
		br, _ = f.g.GetBranch(f.ctx, f.repo, "main")
		if len(br.SealedTokens) != 0 {
			t.Fatalf("sealed tokens left: %v", br.SealedTokens)
		}
		f.want("main@", "b", "2")
		f.want("main@", "c", "3")
	})
}

// failingCommitted fails Apply while fail is set, as a commit meets an
// unreachable blob store after it sealed its token.
type failingCommitted struct {
	graveler.CommittedManager
	fail atomic.Bool
}

func (f *failingCommitted) Apply(ctx context.Context, ns graveler.StorageNamespace, base graveler.MetaRangeID, changes graveler.ValueIterator, opts graveler.ApplyOptions) (graveler.MetaRangeID, graveler.DiffSummary, error) {
	if f.fail.Load() {
		return "", graveler.DiffSummary{}, errors.New("injected: blob store unreachable")
	}
	return f.CommittedManager.Apply(ctx, ns, base, changes, opts)
}

// TestSealedTokensBounded fails many commits in a row after they seal; the
// list of sealed tokens stops growing one past MaxSealedTokens (a commit
// at the bound still seals), the entries stay readable, and one commit
// then absorbs them all.
func TestSealedTokensBounded(t *testing.T) {
	store := kv.NewMemoryStore()
	blobs := committed.NewBucketStore(committed.BucketConfig{})
	defer blobs.Close()
	fc := &failingCommitted{CommittedManager: committed.NewManager(blobs, committed.Config{})}
	const maxSealed = 3
	g := graveler.New(ref.New(store, ref.Config{}), staging.New(store, staging.Config{}), fc, graveler.Config{MaxSealedTokens: maxSealed})
	f := &fixture{t: t, g: g, ctx: context.Background(), repo: "repo"}
	if _, err := g.CreateRepository(f.ctx, f.repo, gravelertest.Namespace(), "main"); err != nil {
		t.Fatal(err)
	}
	fc.fail.Store(true)
	for i := range 6 {
		f.set("main", fmt.Sprintf("k%d", i), "v")
		if _, err := g.Commit(f.ctx, f.repo, "main", graveler.CommitParams{Message: "fails"}); err == nil {
			t.Fatal("commit succeeded with a failing blob store")
		}
		br, err := g.GetBranch(f.ctx, f.repo, "main")
		if err != nil || len(br.SealedTokens) != min(i+1, maxSealed+1) {
			t.Fatalf("after %d failed commits: %+v %v", i+1, br, err)
		}
	}
	if got := f.list("main", graveler.ListEntriesOptions{Limit: 100}); len(got) != 6 {
		t.Fatalf("staged view over sealed tokens: %q", got)
	}
	fc.fail.Store(false)
	f.set("main", "last", "v")
	f.commit("main", "absorbs all")
	br, _ := g.GetBranch(f.ctx, f.repo, "main")
	if len(br.SealedTokens) != 0 {
		t.Fatalf("sealed tokens left: %v", br.SealedTokens)
	}
	if got := f.list("main@", graveler.ListEntriesOptions{Limit: 100}); len(got) != 7 {
		t.Fatalf("committed %q", got)
	}
}

// TestWriteAfterDeleteOnAnotherReplica: a replica whose caches still hold
// the repository and branch must refuse, not acknowledge, a write made
// after another replica deleted the repository.
func TestWriteAfterDeleteOnAnotherReplica(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		f := newFixture(t, store, graveler.Config{BranchCacheTTL: time.Hour})
		other := gravelertest.New(t, store, gravelertest.Options{})
		f.set("main", "a", "1") // warms f's repository and branch caches
		if err := other.DeleteRepository(f.ctx, f.repo); err != nil {
			t.Fatal(err)
		}
		err := f.g.Set(f.ctx, f.repo, "main", graveler.Key("b"), val("2"), graveler.SetOptions{})
		if !errors.Is(err, graveler.ErrRepositoryNotFound) {
			t.Fatalf("write after delete on another replica: %v", err)
		}
		if _, err := other.CreateRepository(f.ctx, f.repo, gravelertest.Namespace(), "main"); err != nil {
			t.Fatal(err)
		}
		f.set("main", "c", "3") // the new incarnation takes writes
		if _, err := other.Get(f.ctx, f.repo, "main", graveler.Key("c")); err != nil {
			t.Fatalf("write landed in the old incarnation: %v", err)
		}
	})
}

// TestPacedCommit: a commit paced by CommitReadRate commits the same
// entries, and one too slow for its context fails like any other commit
// after sealing: its entries stay readable and the next commit takes them.
func TestPacedCommit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		f := newFixture(t, store, graveler.Config{CommitReadRate: 1e6})
		for i := range 300 {
			f.set("main", fmt.Sprintf("k%03d", i), fmt.Sprint(i))
		}
		f.commit("main", "paced")
		if got := f.list("main@", graveler.ListEntriesOptions{Limit: 1000}); len(got) != 300 {
			t.Fatalf("paced commit holds %d entries, want 300", len(got))
		}

		slow := newFixtureRepo(t, store, graveler.Config{CommitReadRate: 5}, "slow")
		for i := range 20 {
			slow.set("main", fmt.Sprintf("k%03d", i), fmt.Sprint(i))
		}
		ctx, cancel := context.WithTimeout(slow.ctx, 300*time.Millisecond)
		defer cancel()
		if _, err := slow.g.Commit(ctx, slow.repo, "main", graveler.CommitParams{Message: "too slow"}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a commit paced past its deadline: %v", err)
		}
		slow.want("main", "k019", "19")
		ctx, cancel = context.WithTimeout(slow.ctx, 300*time.Millisecond)
		defer cancel()
		// Another replica, unpaced, on the same stores.
		blobs := committed.NewBucketStore(committed.BucketConfig{})
		t.Cleanup(func() { blobs.Close() })
		unpaced := &fixture{t: t, ctx: slow.ctx, repo: "unpaced",
			g: gravelertest.New(t, store, gravelertest.Options{Blobs: blobs})}
		if _, err := unpaced.g.CreateRepository(unpaced.ctx, unpaced.repo, gravelertest.Namespace(), "main"); err != nil {
			t.Fatal(err)
		}
		slowToo := &fixture{t: t, ctx: slow.ctx, repo: unpaced.repo,
			g: gravelertest.New(t, store, gravelertest.Options{Blobs: blobs, Graveler: graveler.Config{CommitReadRate: 5}})}
		for i := range 20 {
			slowToo.set("main", fmt.Sprintf("k%03d", i), fmt.Sprint(i))
		}
		if _, err := slowToo.g.Commit(ctx, slowToo.repo, "main", graveler.CommitParams{Message: "too slow"}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a commit paced past its deadline: %v", err)
		}
		unpaced.commit("main", "unpaced")
		for i := range 20 {
			unpaced.want("main@", fmt.Sprintf("k%03d", i), fmt.Sprint(i))
		}
	})
}

// readsOnlyStore offers kv.MultiGetter but not kv.SetReader.
type readsOnlyStore struct{ kv.Store }

func (s readsOnlyStore) GetMany(ctx context.Context, reads []kv.KeyRef) ([]kv.Entry, error) {
	return s.Store.(kv.MultiGetter).GetMany(ctx, reads)
}

// TestStoreWithOnlyOneFencedAbility: with reads folded but writes not,
// writes take the separate fence and reads the folded one.
func TestStoreWithOnlyOneFencedAbility(t *testing.T) {
	f := newFixture(t, readsOnlyStore{kv.NewMemoryStore()}, graveler.Config{})
	if f.g.FencedWrites() {
		t.Fatal("fenced writes on a store without SetAndRead")
	}
	f.set("main", "a", "1")
	f.want("main", "a", "1")
	f.commit("main", "c")
	f.want("main@", "a", "1")
}

// TestMergeCrissCross: main and dev merge each other's first commits (X1
// sets k=1 on main, Y1 sets o on dev), then dev sets k back to 0. Merging
// dev into main has two best common ancestors, X1 and Y1, with different
// trees: a three-way merge over Y1 alone would keep main's k=1 and drop
// dev's change, over X1 alone take it, and which one a walk meets first
// depends on the commits' order. The merge takes as its base the merge
// of the two (as git's recursive merge does), in either order: dev's
// k=0 lands. When the two ancestors conflict with each other, the merge
// is refused with ErrAmbiguousMergeBase and main does not move.
func TestMergeCrissCross(t *testing.T) {
	for _, devFirst := range []bool{false, true} {
		for _, conflicting := range []bool{false, true} {
			t.Run(fmt.Sprintf("dev-first-%v/conflicting-%v", devFirst, conflicting), func(t *testing.T) {
				f := newFixture(t, kv.NewMemoryStore(), graveler.Config{})
				f.set("main", "k", "0")
				f.commit("main", "A")
				if _, err := f.g.CreateBranch(f.ctx, f.repo, "dev", "main"); err != nil {
					t.Fatal(err)
				}
				var x1, y1 graveler.CommitID
				commitX := func() { f.set("main", "k", "1"); x1 = f.commit("main", "X1") }
				commitY := func() {
					f.set("dev", "o", "1")
					if conflicting {
						f.set("dev", "k", "2") // X1 and Y1 disagree on k
					}
					y1 = f.commit("dev", "Y1")
				}
				if devFirst {
					commitY()
					commitX()
				} else {
					commitX()
					commitY()
				}
				strategy := graveler.MergeParams{}
				if conflicting {
					// Each side keeps its own k when merging the other.
					strategy.Strategy = graveler.MergeStrategyDestWins
				}
				if _, _, err := f.g.Merge(f.ctx, f.repo, "main", graveler.Ref(y1), strategy); err != nil {
					t.Fatal(err)
				}
				if _, _, err := f.g.Merge(f.ctx, f.repo, "dev", graveler.Ref(x1), strategy); err != nil {
					t.Fatal(err)
				}
				f.set("dev", "k", "0")
				f.commit("dev", "k back to 0")
				head, err := f.g.GetBranch(f.ctx, f.repo, "main")
				if err != nil {
					t.Fatal(err)
				}
				_, _, err = f.g.Merge(f.ctx, f.repo, "main", "dev", graveler.MergeParams{})
				if conflicting {
					if !errors.Is(err, graveler.ErrAmbiguousMergeBase) {
						t.Fatalf("criss-cross merge over conflicting ancestors: %v, want ErrAmbiguousMergeBase", err)
					}
					if after, _ := f.g.GetBranch(f.ctx, f.repo, "main"); after.CommitID != head.CommitID {
						t.Fatal("the refused merge moved main")
					}
					return
				}
				if err != nil {
					t.Fatalf("criss-cross merge: %v", err)
				}
				f.want("main", "k", "0")
				f.want("main", "o", "1")
			})
		}
	}
}

// TestBranchAndTagNamesDoNotClash: a ref names a branch before a tag of
// the same name, so a branch named like a tag would hide it from every
// read: creating either where the other's name exists is refused.
func TestBranchAndTagNamesDoNotClash(t *testing.T) {
	f := newFixture(t, kv.NewMemoryStore(), graveler.Config{})
	f.set("main", "k", "release")
	f.commit("main", "release")
	if _, err := f.g.CreateTag(f.ctx, f.repo, "v1", "main"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.g.CreateBranch(f.ctx, f.repo, "v1", "main"); !errors.Is(err, graveler.ErrAlreadyExists) {
		t.Fatalf("branch named like a tag: %v, want ErrAlreadyExists", err)
	}
	if _, err := f.g.CreateBranch(f.ctx, f.repo, "dev", "main"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.g.CreateTag(f.ctx, f.repo, "dev", "main"); !errors.Is(err, graveler.ErrAlreadyExists) {
		t.Fatalf("tag named like a branch: %v, want ErrAlreadyExists", err)
	}
	f.set("main", "k", "later")
	f.commit("main", "later")
	f.want("v1", "k", "release")
}
