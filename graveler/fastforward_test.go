package graveler_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"graveler/graveler"
	"graveler/keys"
	"graveler/kv"
	"graveler/kv/kvtest"
)

// ffSetup gives main one commit and dev one more on top of it: main's
// head is an ancestor of dev's.
func ffSetup(t *testing.T, p *pauseFixture) (mainHead, devHead graveler.CommitID) {
	t.Helper()
	p.set("main", "a", "1")
	mainHead = p.commit("main", "a")
	if _, err := p.g.CreateBranch(p.ctx, p.repo, "dev", "main"); err != nil {
		t.Fatal(err)
	}
	p.set("dev", "d", "dev")
	return mainHead, p.commit("dev", "dev work")
}

func (p *pauseFixture) merge(ctx context.Context, params graveler.MergeParams) (graveler.CommitID, bool, error) {
	return p.g.Merge(ctx, p.repo, "main", "dev", params)
}

// firstParents is the first-parent history of ref, newest first.
func (p *pauseFixture) firstParents(ref string) []graveler.CommitID {
	p.t.Helper()
	var out []graveler.CommitID
	for c, err := range p.g.Log(p.ctx, p.repo, graveler.Ref(ref), graveler.LogOptions{FirstParent: true}) {
		if err != nil {
			p.t.Fatal(err)
		}
		out = append(out, c.CommitID)
	}
	return out
}

// TestMergeFastForward: a merge into a clean branch whose head is an
// ancestor of the source moves the branch to the source's commit, in one
// branch write that says ChangeMerge and is the merge's revision; not
// with NoFastForward, not with staged changes; and a source that is the
// head or behind it is still nothing to merge.
func TestMergeFastForward(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		t.Run("fast-forward", func(t *testing.T) {
			p := newPauseFixture(t, store, graveler.Config{})
			mainHead, devHead := ffSetup(t, p)
			ctx, rev := kv.WithRevisions(p.ctx)
			id, ff, err := p.merge(ctx, graveler.MergeParams{})
			if err != nil || !ff || id != devHead {
				t.Fatalf("merge of a descendant: %s, fast-forward %v, %v; want %s fast-forwarded", id, ff, err, devHead)
			}
			b := p.branch("main")
			if b.CommitID != devHead || b.Change != graveler.ChangeMerge {
				t.Fatalf("main after a fast-forward: head %s, change %d", b.CommitID, b.Change)
			}
			if h := p.firstParents("main"); len(h) != 3 || h[0] != devHead || h[1] != mainHead {
				t.Fatalf("history after a fast-forward %v: a commit was written", h)
			}
			_, pred, err := p.inner.Get(p.ctx, p.part, keys.Branch("main"))
			if r, ok := rev.Effect(); err != nil || !ok || r != pred.Version() {
				t.Fatalf("merge revision %d (marked %v), the branch write's %d (%v)", r, ok, pred.Version(), err)
			}
			p.want("main", "d", "dev")
			// Now the heads are equal: nothing to merge, as before.
			if _, _, err := p.merge(p.ctx, graveler.MergeParams{}); !errors.Is(err, graveler.ErrNothingToMerge) {
				t.Fatalf("merge of the head itself: %v", err)
			}
		})
		t.Run("no-ff", func(t *testing.T) {
			p := newPauseFixture(t, store, graveler.Config{})
			mainHead, devHead := ffSetup(t, p)
			id, ff, err := p.merge(p.ctx, graveler.MergeParams{NoFastForward: true})
			if err != nil || ff {
				t.Fatalf("merge with NoFastForward: %s, fast-forward %v, %v", id, ff, err)
			}
			c, err := p.g.GetCommit(p.ctx, p.repo, graveler.Ref(id))
			if err != nil || !slices.Equal(c.Parents, []graveler.CommitID{mainHead, devHead}) {
				t.Fatalf("merge commit %+v, %v; want parents %s %s", c, err, mainHead, devHead)
			}
			if b := p.branch("main"); b.CommitID != id || b.Change != graveler.ChangeMerge {
				t.Fatalf("main after the merge: head %s, change %d", b.CommitID, b.Change)
			}
		})
		t.Run("staged-changes", func(t *testing.T) {
			p := newPauseFixture(t, store, graveler.Config{})
			mainHead, _ := ffSetup(t, p)
			p.set("main", "x", "dirty")
			if _, _, err := p.merge(p.ctx, graveler.MergeParams{}); !errors.Is(err, graveler.ErrDirtyBranch) {
				t.Fatalf("fast-forward of a dirty branch: %v", err)
			}
			p.wantHead(mainHead)
			// Staged in a sealed token (a commit that failed part way)
			// counts too.
			hold, commit, _ := p.holdCommit("main")
			if _, _, err := p.merge(p.ctx, graveler.MergeParams{}); !errors.Is(err, graveler.ErrDirtyBranch) {
				t.Fatalf("fast-forward of a branch whose changes are sealed: %v", err)
			}
			p.wantHead(mainHead)
			p.release(hold, commit)
		})
		t.Run("source-behind", func(t *testing.T) {
			p := newPauseFixture(t, store, graveler.Config{})
			mainHead, _ := ffSetup(t, p)
			if _, err := p.g.ResetHard(p.ctx, p.repo, "dev", graveler.Ref(mainHead)+"~1", graveler.ResetHardOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := p.merge(p.ctx, graveler.MergeParams{}); !errors.Is(err, graveler.ErrNothingToMerge) {
				t.Fatalf("merge of an ancestor of the head: %v", err)
			}
			p.wantHead(mainHead)
		})
	})
}

// TestInterleaveMergeFastForward: a fast-forward checked that main is
// clean and its head an ancestor of dev, and is held before its
// compare-and-swap of main.
//   - A commit on main lands meanwhile: the fast-forward fails with
//     ErrBranchHeadMoved, as a merge commit's head update does, and the
//     commit stays.
//   - A commit of main had sealed its token and is held before its head
//     update when the fast-forward lands: the fast-forward keeps the
//     sealed token, and the commit, released, rebases onto dev's commit.
//   - Its caller gives up while it is held before the store: main never
//     moves, not even later; held after, it moved.
func TestInterleaveMergeFastForward(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		t.Run("commit-lands-first", func(t *testing.T) {
			p := newPauseFixture(t, store, graveler.Config{})
			ffSetup(t, p)
			var cz graveler.CommitID
			err := p.race(p.branchOp("setif", "main"), func(ctx context.Context) error {
				_, _, err := p.merge(ctx, graveler.MergeParams{})
				return err
			}, func() { cz = p.commitMeanwhile() })
			if !errors.Is(err, graveler.ErrBranchHeadMoved) {
				t.Fatalf("fast-forward over a head that moved: %v", err)
			}
			p.wantHead(cz)
			p.want("main", "z", "1")
			p.wantMissing("main", "d")
		})
		t.Run("commit-in-flight", func(t *testing.T) {
			p := newPauseFixture(t, store, graveler.Config{})
			_, devHead := ffSetup(t, p)
			// Nothing staged when the merge checks; a write and a commit
			// that seals it come after the check, before the head update.
			var hold *kvtest.PausePoint
			var commit <-chan error
			var commitID *graveler.CommitID
			err := p.race(p.branchOp("setif", "main"), func(ctx context.Context) error {
				_, _, err := p.merge(ctx, graveler.MergeParams{})
				return err
			}, func() {
				p.set("main", "w", "1")
				hold, commit, commitID = p.holdCommit("main")
			})
			if err != nil {
				t.Fatalf("fast-forward while a commit is in flight: %v", err)
			}
			if b := p.branch("main"); b.CommitID != devHead || len(b.SealedTokens) != 1 {
				t.Fatalf("after the fast-forward: head %s, sealed %v; want %s with the commit's token", b.CommitID, b.SealedTokens, devHead)
			}
			p.release(hold, commit)
			if h := p.firstParents("main"); len(h) < 2 || h[0] != *commitID || h[1] != devHead {
				t.Fatalf("history %v: want the commit %s on top of %s", h, *commitID, devHead)
			}
			p.want("main@", "w", "1")
			p.want("main@", "d", "dev")
		})
		for _, tc := range []struct {
			name    string
			when    kvtest.When
			applied bool
		}{{"gives-up-held-before", kvtest.Before, false}, {"gives-up-held-after", kvtest.After, true}} {
			t.Run(tc.name, func(t *testing.T) {
				p := newPauseFixture(t, store, graveler.Config{})
				mainHead, devHead := ffSetup(t, p)
				var id graveler.CommitID
				err := p.giveUp(tc.when, p.branchOp("setif", "main"), func(ctx context.Context) error {
					var err error
					id, _, err = p.merge(ctx, graveler.MergeParams{})
					return err
				})
				if tc.applied {
					if err != nil || id != devHead {
						t.Fatalf("fast-forward applied: %s, %v", id, err)
					}
					p.wantHead(devHead)
					return
				}
				if err == nil {
					t.Fatal("a fast-forward never sent succeeded")
				}
				p.wantHead(mainHead)
				// Nothing moves later: the next commit goes on the old head.
				cz := p.commitMeanwhile()
				if h := p.firstParents("main"); len(h) < 2 || h[0] != cz || h[1] != mainHead {
					t.Fatalf("history after a fast-forward given up %v: want %s on %s", h, cz, mainHead)
				}
				p.wantMissing("main", "d")
			})
		}
	})
}

// TestBranchChanges: each operation's branch write says what it did, a
// commit's seal says nothing (ChangeNone), and a reset of a key writes no
// branch record.
func TestBranchChanges(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		p := newPauseFixture(t, store, graveler.Config{})
		want := func(what, branch string, change graveler.BranchChange) {
			t.Helper()
			if b := p.branch(branch); b.Change != change {
				t.Fatalf("%s: branch %s says change %d, want %d", what, branch, b.Change, change)
			}
		}
		want("CreateRepository", "main", graveler.ChangeCreate)
		p.set("main", "a", "1")
		hold, commit, _ := p.holdCommit("main")
		if b := p.branch("main"); len(b.SealedTokens) != 1 || b.Change != graveler.ChangeNone {
			t.Fatalf("a commit's seal: sealed %v, change %d; want ChangeNone", b.SealedTokens, b.Change)
		}
		p.release(hold, commit)
		want("Commit", "main", graveler.ChangeCommit)
		c1 := p.head("main")

		if _, err := p.g.CreateBranch(p.ctx, p.repo, "dev", "main"); err != nil {
			t.Fatal(err)
		}
		want("CreateBranch", "dev", graveler.ChangeCreate)
		p.set("dev", "d", "1")
		devC := p.commit("dev", "dev")
		if _, _, err := p.merge(p.ctx, graveler.MergeParams{}); err != nil {
			t.Fatal(err)
		}
		want("Merge (fast-forward)", "main", graveler.ChangeMerge)
		if _, err := p.g.Revert(p.ctx, p.repo, "main", graveler.Ref(devC), 0, graveler.CommitParams{}); err != nil {
			t.Fatal(err)
		}
		want("Revert", "main", graveler.ChangeRevert)
		if _, err := p.g.CherryPick(p.ctx, p.repo, "main", graveler.Ref(devC), 0, graveler.CommitParams{}); err != nil {
			t.Fatal(err)
		}
		want("CherryPick", "main", graveler.ChangeCherryPick)
		if _, err := p.g.ResetHard(p.ctx, p.repo, "main", graveler.Ref(c1), graveler.ResetHardOptions{}); err != nil {
			t.Fatal(err)
		}
		want("ResetHard", "main", graveler.ChangeResetHard)

		// A reset of a key writes staged entries only.
		p.set("main", "k", "staged")
		_, before, err := p.inner.Get(p.ctx, p.part, keys.Branch("main"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, rev := kv.WithRevisions(p.ctx)
		if err := p.g.Reset(ctx, p.repo, "main", graveler.ResetTypeKey, graveler.Key("k")); err != nil {
			t.Fatal(err)
		}
		if _, after, _ := p.inner.Get(p.ctx, p.part, keys.Branch("main")); after != before {
			t.Fatalf("a reset of a key wrote the branch record: %v -> %v", before, after)
		}
		if _, ok := rev.Effect(); ok || rev.Last() <= before.Version() {
			t.Fatalf("a reset of a key: effect marked %v, last write %d; want no effect, a write after %v", ok, rev.Last(), before)
		}
		p.wantMissing("main", "k")

		// A reset of everything, with something staged or not, is one
		// branch write that says so.
		p.set("main", "k", "staged")
		if err := p.g.Reset(p.ctx, p.repo, "main", graveler.ResetTypeAll, nil); err != nil {
			t.Fatal(err)
		}
		want("Reset (all)", "main", graveler.ChangeReset)
		p.set("dev", "x", "1")
		p.commit("dev", "x")
		want("Commit", "dev", graveler.ChangeCommit)
		ctx, rev = kv.WithRevisions(p.ctx)
		if err := p.g.Reset(ctx, p.repo, "dev", graveler.ResetTypeAll, nil); err != nil {
			t.Fatal(err)
		}
		want("Reset (all) of a clean branch", "dev", graveler.ChangeReset)
		_, pred, err := p.inner.Get(p.ctx, p.part, keys.Branch("dev"))
		if r, ok := rev.Effect(); err != nil || !ok || r != pred.Version() {
			t.Fatalf("reset revision %d (marked %v), the branch write's %v (%v)", r, ok, pred, err)
		}
	})
}
