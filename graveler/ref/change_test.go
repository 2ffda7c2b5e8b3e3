package ref_test

import (
	"context"
	"testing"

	"graveler/graveler"
	"graveler/keys"
	"graveler/kv"
)

// testChangesAndEffects checks what each write of a ref operation says it
// did (Branch.Change) and which write each operation marks decisive
// (kv.Effect): the revision it reports is that write's version, as a Get
// reads it, not a later write's of the same operation.
func testChangesAndEffects(t *testing.T, newStore newStoreFunc) {
	store := newStore(t)
	e := newEnv(t, store, nil)
	version := func(part, key []byte) int64 {
		t.Helper()
		_, p, err := store.Get(e.ctx, part, key)
		if err != nil {
			t.Fatal(err)
		}
		return p.Version()
	}
	// run runs op with a kv.Revisions and returns its effect and last write.
	run := func(what string, op func(ctx context.Context) error) (effect int64, marked bool, last int64) {
		t.Helper()
		ctx, rec := kv.WithRevisions(e.ctx)
		if err := op(ctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		effect, marked = rec.Effect()
		return effect, marked, rec.Last()
	}
	wantEffect := func(what string, got int64, marked bool, want int64) {
		t.Helper()
		if !marked || got != want {
			t.Fatalf("%s: effect %d (marked %v), want the revision %d of its decisive write", what, got, marked, want)
		}
	}
	branch := func(repo *graveler.RepositoryRecord, id graveler.BranchID) *graveler.Branch {
		t.Helper()
		b, err := e.m.GetBranch(e.ctx, repo, id)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	// A repository's creation: its activation, after its default branch.
	var repo *graveler.RepositoryRecord
	eff, ok, _ := run("CreateRepository", func(ctx context.Context) error {
		var err error
		repo, err = e.m.CreateRepository(ctx, "repo", repoParams(), initialCommit())
		return err
	})
	wantEffect("CreateRepository", eff, ok, version(keys.Graveler(), keys.Repository("repo")))
	part := keys.RepositoryPartition("repo", string(repo.UniqueID))
	if b := branch(repo, "main"); b.Change != graveler.ChangeCreate {
		t.Fatalf("default branch: change %d, want ChangeCreate", b.Change)
	}
	head := branch(repo, "main").CommitID

	// CreateBranch stores ChangeCreate whatever the caller's branch says,
	// and ChangeRestore when it says so.
	eff, ok, _ = run("CreateBranch", func(ctx context.Context) error {
		return e.m.CreateBranch(ctx, repo, "dev", graveler.Branch{CommitID: head, Change: graveler.ChangeCommit})
	})
	wantEffect("CreateBranch", eff, ok, version(part, keys.Branch("dev")))
	if b := branch(repo, "dev"); b.Change != graveler.ChangeCreate {
		t.Fatalf("created branch: change %d, want ChangeCreate", b.Change)
	}
	if err := e.m.CreateBranch(e.ctx, repo, "restored", graveler.Branch{CommitID: head, Change: graveler.ChangeRestore}); err != nil {
		t.Fatal(err)
	}
	if b := branch(repo, "restored"); b.Change != graveler.ChangeRestore {
		t.Fatalf("restored branch: change %d, want ChangeRestore", b.Change)
	}

	// BranchUpdate: f never sees the Change of the version read; a write
	// that sets none is no decisive write and says ChangeNone.
	seal := func(cur *graveler.Branch) (*graveler.Branch, error) {
		if cur.Change != graveler.ChangeNone {
			t.Errorf("f got a branch with change %d, want ChangeNone", cur.Change)
		}
		nb := *cur
		nb.SealedTokens = append([]graveler.StagingToken{cur.StagingToken}, cur.SealedTokens...)
		nb.StagingToken = e.m.NewStagingToken(repo.RepositoryID)
		return &nb, nil
	}
	before := version(part, keys.Branch("dev"))
	eff, ok, last := run("BranchUpdate (ChangeNone)", func(ctx context.Context) error { return e.m.BranchUpdate(ctx, repo, "dev", seal) })
	if ok || last != version(part, keys.Branch("dev")) || last <= before {
		t.Fatalf("a write with ChangeNone: effect %d (marked %v), last %d; want no effect and the branch's new version", eff, ok, last)
	}
	if b := branch(repo, "dev"); b.Change != graveler.ChangeNone {
		t.Fatalf("after a write with ChangeNone: change %d", b.Change)
	}
	eff, ok, _ = run("BranchUpdate (ChangeCommit)", func(ctx context.Context) error {
		return e.m.BranchUpdate(ctx, repo, "dev", func(cur *graveler.Branch) (*graveler.Branch, error) {
			nb := *cur
			nb.SealedTokens, nb.Change = nil, graveler.ChangeCommit
			return &nb, nil
		})
	})
	wantEffect("BranchUpdate (ChangeCommit)", eff, ok, version(part, keys.Branch("dev")))
	if b := branch(repo, "dev"); b.Change != graveler.ChangeCommit {
		t.Fatalf("after a commit's write: change %d", b.Change)
	}
	// The next write is handed ChangeNone although the record says
	// ChangeCommit, and does not inherit it.
	run("BranchUpdate after a commit", func(ctx context.Context) error { return e.m.BranchUpdate(ctx, repo, "dev", seal) })
	if b := branch(repo, "dev"); b.Change != graveler.ChangeNone {
		t.Fatalf("a seal after a commit's write: change %d, want ChangeNone", b.Change)
	}
	eff, ok, _ = run("BranchUpdate (skipped)", func(ctx context.Context) error {
		return e.m.BranchUpdate(ctx, repo, "dev", func(*graveler.Branch) (*graveler.Branch, error) { return nil, graveler.ErrSkipUpdate })
	})
	if ok {
		t.Fatalf("a skipped update marked effect %d", eff)
	}

	// Deletes: the conditional removal, after the tokens were queued.
	before = version(part, keys.Branch("dev"))
	eff, ok, last = run("DeleteBranch", func(ctx context.Context) error { return e.m.DeleteBranch(ctx, repo, "dev") })
	if !ok || eff <= before || eff != last {
		t.Fatalf("DeleteBranch: effect %d (marked %v), last %d; want its removal, after %d", eff, ok, last, before)
	}
	eff, ok, _ = run("CreateTag", func(ctx context.Context) error { return e.m.CreateTag(ctx, repo, "v1", head) })
	wantEffect("CreateTag", eff, ok, version(part, keys.Tag("v1")))
	before = eff
	eff, ok, _ = run("DeleteTag", func(ctx context.Context) error { return e.m.DeleteTag(ctx, repo, "v1") })
	if !ok || eff <= before {
		t.Fatalf("DeleteTag: effect %d (marked %v), want its removal, after %d", eff, ok, before)
	}

	eff, ok, _ = run("CreateBareRepository", func(ctx context.Context) error {
		_, err := e.m.CreateBareRepository(ctx, "bare", repoParams())
		return err
	})
	wantEffect("CreateBareRepository", eff, ok, version(keys.Graveler(), keys.Repository("bare")))

	// A repository's delete: marking it deleting, not removing the record
	// after.
	before = version(keys.Graveler(), keys.Repository("repo"))
	eff, ok, last = run("DeleteRepository", func(ctx context.Context) error { return e.m.DeleteRepository(ctx, "repo") })
	if !ok || eff <= before || eff >= last {
		t.Fatalf("DeleteRepository: effect %d (marked %v), last %d; want the deleting write, after %d and before the removal", eff, ok, last, before)
	}
}
