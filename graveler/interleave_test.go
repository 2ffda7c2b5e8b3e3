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

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/gravelertest"
	"graveler/graveler/staging"
	"graveler/keys"
	"graveler/kv"
	"graveler/kv/kvtest"
)

// Interleaving tests: each compare-and-swap or queued path of the service
// is held by a kvtest.PauseStore between its read and its write while the
// racing operation runs, then released, and the invariant is checked; and
// each is held once more while its caller gives up (held before the store
// sees the operation: never applied later; held after: applied, and the
// state consistent).

const holdTimeout = 20 * time.Second

// pauseFixture is a service on a PauseStore.
type pauseFixture struct {
	*fixture
	ps    *kvtest.PauseStore
	inner kv.Store
	part  []byte // the repository's partition
}

// pauseRepos names each pause fixture's repository, as fixtures of one
// backend share its store.
var pauseRepos atomic.Int64

func newPauseFixture(t *testing.T, store kv.Store, cfg graveler.Config) *pauseFixture {
	t.Helper()
	ps := kvtest.NewPauseStore(store)
	f := newFixtureRepo(t, ps, cfg, graveler.RepositoryID(fmt.Sprintf("paused-%d", pauseRepos.Add(1))))
	rec, err := f.g.GetRepository(f.ctx, f.repo)
	if err != nil {
		t.Fatal(err)
	}
	return &pauseFixture{fixture: f, ps: ps, inner: store, part: keys.RepositoryPartition(string(f.repo), string(rec.UniqueID))}
}

// branchOp matches operation name on a branch's record.
func (p *pauseFixture) branchOp(name, branch string) func(kvtest.Op) bool {
	return func(op kvtest.Op) bool { return op.Is(name, p.part, keys.Branch(branch)) }
}

// branchDelete matches the removal of a branch's record, plain or
// conditional.
func (p *pauseFixture) branchDelete(branch string) func(kvtest.Op) bool {
	return kvtest.OpOn(p.part, keys.Branch(branch), "delete", "deleteif")
}

// stagedWrite matches a staged write of key into token st, by either
// writer fence (one round trip, or a plain set then a branch read).
func stagedWrite(st graveler.StagingToken, key string) func(kvtest.Op) bool {
	return func(op kvtest.Op) bool {
		return (op.Name == "set_and_read" || op.Name == "set") && op.Is(op.Name, keys.StagingPartition(string(st)), keys.Entry([]byte(key)))
	}
}

// commitHeadUpdate matches a commit's head update on branch: the second
// compare-and-swap of the branch record from when it is armed, the first
// being the seal.
func (p *pauseFixture) commitHeadUpdate(branch string) func(kvtest.Op) bool {
	return kvtest.Nth(2, p.branchOp("setif", branch))
}

func (p *pauseFixture) branch(name string) *graveler.Branch {
	p.t.Helper()
	b, err := p.g.GetBranch(p.ctx, p.repo, graveler.BranchID(name))
	if err != nil {
		p.t.Fatal(err)
	}
	return b.Branch
}

func (p *pauseFixture) head(name string) graveler.CommitID { return p.branch(name).CommitID }

// commitMeanwhile moves main's head: it writes z=1 and commits it.
func (p *pauseFixture) commitMeanwhile() graveler.CommitID {
	p.t.Helper()
	p.set("main", "z", "1")
	return p.commit("main", "meanwhile")
}

func (p *pauseFixture) wantHead(want graveler.CommitID) {
	p.t.Helper()
	if h := p.head("main"); h != want {
		p.t.Fatalf("head %s, want the commit %s", h, want)
	}
}

func async(f func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return done
}

func await(t testing.TB, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(holdTimeout):
		t.Fatal("an operation did not return")
		return nil
	}
}

func (p *pauseFixture) commitAsync(ctx context.Context, branch string) (<-chan error, *graveler.CommitID) {
	var id graveler.CommitID
	return async(func() error {
		var err error
		id, err = p.g.Commit(ctx, p.repo, graveler.BranchID(branch), graveler.CommitParams{Committer: "t", Message: "async"})
		return err
	}), &id
}

func (p *pauseFixture) reset(ctx context.Context, typ graveler.ResetType, key string) error {
	return p.g.Reset(ctx, p.repo, "main", typ, graveler.Key(key))
}

// wantQueued checks that a staging token was handed to the cleaner.
func (p *pauseFixture) wantQueued(st graveler.StagingToken) {
	p.t.Helper()
	if _, _, err := p.inner.Get(p.ctx, keys.Deleted(), keys.DeletedToken(string(st))); err != nil {
		p.t.Fatalf("token %s not queued for the cleaner: %v", st, err)
	}
}

// stageOverBase commits key=old on main for each key and stages key=new
// over it.
func (p *pauseFixture) stageOverBase(keys ...string) {
	p.t.Helper()
	for _, k := range keys {
		p.set("main", k, "old")
	}
	p.commit("main", "base")
	for _, k := range keys {
		p.set("main", k, "new")
	}
}

// holdCommit starts a commit of branch and holds it before its head
// update (its token sealed, its staged values read). It returns the pause
// point, the commit's result and, once that is in, its id.
func (p *pauseFixture) holdCommit(branch string) (*kvtest.PausePoint, <-chan error, *graveler.CommitID) {
	p.t.Helper()
	hold := p.ps.Pause(kvtest.Before, p.commitHeadUpdate(branch))
	done, id := p.commitAsync(p.ctx, branch)
	hold.Wait(p.t, holdTimeout)
	return hold, done, id
}

// release lets hold go and waits for done, which must succeed.
func (p *pauseFixture) release(hold *kvtest.PausePoint, done <-chan error) {
	p.t.Helper()
	hold.Release()
	if err := await(p.t, done); err != nil {
		p.t.Fatal(err)
	}
}

// race runs op with the operation match selects held before the store,
// runs racer meanwhile, and returns op's error.
func (p *pauseFixture) race(match func(kvtest.Op) bool, op func(ctx context.Context) error, racer func()) error {
	p.t.Helper()
	return kvtest.Interleave(p.t, p.ctx, p.ps, kvtest.Race, match, op, racer)
}

// giveUp runs op with the operation match selects held at when, its
// caller giving up while it is held, and returns op's error.
func (p *pauseFixture) giveUp(when kvtest.When, match func(kvtest.Op) bool, op func(ctx context.Context) error) error {
	p.t.Helper()
	m := kvtest.CancelBefore
	if when == kvtest.After {
		m = kvtest.CancelAfter
	}
	return kvtest.Interleave(p.t, p.ctx, p.ps, m, match, op, nil)
}

// TestInterleaveResetDuringCommit: a commit has sealed the staging token
// and read the staged values, and is held before its head update. A reset
// of a key and of a prefix acknowledged meanwhile must stay in force when
// the commit lands, and after the next commit: the values it discarded
// never come back.
func TestInterleaveResetDuringCommit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		for _, m := range fenceModes {
			t.Run(m.name, func(t *testing.T) {
				p := newPauseFixture(t, store, m.cfg)
				p.set("main", "k", "old")
				p.set("main", "p/1", "old")
				p.commit("main", "base")
				for _, k := range []string{"k", "p/1", "p/2", "q"} {
					p.set("main", k, "new")
				}
				hold, commit, _ := p.holdCommit("main")
				if err := p.reset(p.ctx, graveler.ResetTypeKey, "k"); err != nil {
					t.Fatal(err)
				}
				if err := p.reset(p.ctx, graveler.ResetTypePrefix, "p/"); err != nil {
					t.Fatal(err)
				}
				check := func(ref string) {
					t.Helper()
					p.want(ref, "k", "old")
					p.want(ref, "p/1", "old")
					p.wantMissing(ref, "p/2")
					p.want(ref, "q", "new")
				}
				check("main")
				p.release(hold, commit)
				check("main")
				p.commit("main", "next")
				check("main")
				check("main@")
			})
		}
	})
}

// TestInterleaveResetDropRacesSeal: a reset finds no commit in flight and
// is held just before it drops the key from the staging token (a prefix:
// before it writes its reset range, which the seal then refuses); a commit
// then seals that token and reads it, and is held before its head update.
// The reset, released, must leave the sealed token as the commit read it
// (its drop is refused by the seal marker), notice the seal (its token is
// no longer the staging token) and make its discard outlive the commit.
func TestInterleaveResetDropRacesSeal(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		for _, tc := range []struct {
			name string
			typ  graveler.ResetType
			key  string
		}{{"key", graveler.ResetTypeKey, "k"}, {"prefix", graveler.ResetTypePrefix, "k"}} {
			t.Run(tc.name, func(t *testing.T) {
				p := newPauseFixture(t, store, graveler.Config{})
				p.stageOverBase("k")
				st := p.branch("main").StagingToken
				// A key's reset writes a reset record over its entry; a
				// prefix's writes one reset range into the token's range
				// record.
				drop := stagedWrite(st, "k")
				if tc.typ == graveler.ResetTypePrefix {
					drop = kvtest.OpOn(keys.StagingPartition(string(st)), keys.StagingRanges(), "setif")
				}
				var hold *kvtest.PausePoint
				var commit <-chan error
				err := p.race(drop, func(ctx context.Context) error { return p.reset(ctx, tc.typ, tc.key) }, func() {
					hold, commit, _ = p.holdCommit("main")
				})
				if err != nil {
					t.Fatal(err)
				}
				// The sealed token is as the commit read it: the drop (or
				// the reset range) released after the seal changed nothing.
				if v, err := staging.New(p.inner, staging.Config{}).Get(p.ctx, st, graveler.Key("k")); err != nil || string(v.Data) != "new" {
					t.Fatalf("the reset changed the entry in the sealed token: %+v, %v", v, err)
				} else if _, _, err := p.inner.Get(p.ctx, keys.StagingPartition(string(st)), keys.StagingRanges()); !errors.Is(err, kv.ErrNotFound) {
					t.Fatalf("the sealed token took a range record: %v", err)
				}
				p.want("main", "k", "old")
				p.release(hold, commit)
				p.want("main", "k", "old")
				p.commit("main", "next")
				p.want("main", "k", "old")
				p.want("main@", "k", "old")
			})
		}
	})
}

// overridePublish matches a reset's publication of its override token:
// the compare-and-swap of main's record (armed while nothing else writes
// it, or while a commit is held past its own).
func (p *pauseFixture) overridePublish() func(kvtest.Op) bool {
	return p.branchOp("setif", "main")
}

// queuedHolding reports whether a token queued for the cleaner stages key
// as value: the override token a reset dropped.
func (p *pauseFixture) queuedHolding(key, value string) bool {
	p.t.Helper()
	st := staging.New(p.inner, staging.Config{})
	for e, err := range p.inner.Scan(p.ctx, keys.Deleted(), kv.ScanOptions{Start: keys.DeletedToken("")}) {
		if err != nil {
			p.t.Fatal(err)
		}
		tok, err := keys.ParseDeletedToken(e.Key)
		if err != nil {
			break
		}
		if v, err := st.Get(p.ctx, graveler.StagingToken(tok), graveler.Key(key)); err == nil && v != nil && string(v.Data) == value {
			return true
		}
	}
	return false
}

// TestInterleaveResetOverrideRacesCommit: with a commit in flight, a reset
// writes its override token and is held before publishing it; the commit
// lands meanwhile, with the discarded value in its tree. The publication
// must find the branch moved and drop the token: the value is committed
// now, no longer staged, so the reset, which takes effect after the
// commit, has nothing left to discard, and the key shows the commit's
// value (a reset that restored the older one after reads had seen the
// commit's would not be linearizable).
func TestInterleaveResetOverrideRacesCommit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		p := newPauseFixture(t, store, graveler.Config{})
		p.stageOverBase("k")
		hold, commit, _ := p.holdCommit("main")
		reset := func(ctx context.Context) error { return p.reset(ctx, graveler.ResetTypeKey, "k") }
		err := p.race(p.overridePublish(), reset, func() {
			p.release(hold, commit)
			p.want("main@", "k", "new") // the commit took the value
			p.want("main", "k", "new")
		})
		if err != nil {
			t.Fatal(err)
		}
		p.want("main", "k", "new")
		if b := p.branch("main"); len(b.OverrideTokens) != 0 || len(b.SealedTokens) != 0 {
			t.Fatalf("branch after the reset: %+v, want no sealed or override token", b)
		}
		if !p.queuedHolding("k", "old") {
			t.Fatal("the unpublished override token was not handed to the cleaner")
		}
	})
}

// TestInterleaveResetGivesUp: a reset whose override token's publication
// is held, and whose caller gives up meanwhile. Held before the store:
// the token is never published, not later either, the reset fails, and
// the commit in flight lands the staged value. Held after: the token is
// published, and the discard stays in force through the commit in flight
// and the next one.
func TestInterleaveResetGivesUp(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		for _, tc := range []struct {
			name string
			when kvtest.When
			want string
		}{{"held-before", kvtest.Before, "new"}, {"held-after", kvtest.After, "old"}} {
			t.Run(tc.name, func(t *testing.T) {
				p := newPauseFixture(t, store, graveler.Config{})
				p.stageOverBase("k")
				hold, commit, _ := p.holdCommit("main")
				reset := func(ctx context.Context) error { return p.reset(ctx, graveler.ResetTypeKey, "k") }
				err := p.giveUp(tc.when, p.overridePublish(), reset)
				if tc.when == kvtest.Before && err == nil {
					t.Fatal("a reset whose override token was never published succeeded")
				}
				p.release(hold, commit)
				p.want("main", "k", tc.want)
				if b := p.branch("main"); (len(b.OverrideTokens) == 1) != (tc.when == kvtest.After) {
					t.Fatalf("override tokens after the commit: %q", b.OverrideTokens)
				}
				if tc.when == kvtest.After {
					p.commit("main", "next")
				}
				p.want("main@", "k", tc.want)
			})
		}
	})
}

// TestInterleaveCommitVsCommit: commit 1 sealed its token and is held
// before its head update; commit 2 seals the next token and lands,
// consuming both. Commit 1 then finds the head moved and rebases onto it:
// both commits are in the first-parent history and every write is in the
// head. If commit 1's caller gives up while it is held before the store,
// its head update never lands and the next commit takes its writes; held
// after, it landed.
func TestInterleaveCommitVsCommit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		t.Run("race", func(t *testing.T) {
			p := newPauseFixture(t, store, graveler.Config{})
			p.set("main", "a", "1")
			hold, c1, id1 := p.holdCommit("main")
			p.set("main", "b", "2")
			id2 := p.commit("main", "second")
			p.release(hold, c1)
			var history []graveler.CommitID
			for c, err := range p.g.Log(p.ctx, p.repo, "main", graveler.LogOptions{FirstParent: true}) {
				if err != nil {
					t.Fatal(err)
				}
				history = append(history, c.CommitID)
			}
			if len(history) < 3 || history[0] != *id1 || history[1] != id2 {
				t.Fatalf("first-parent history %v, want %s then %s on top", history, *id1, id2)
			}
			p.want("main@", "a", "1")
			p.want("main@", "b", "2")
		})
		for _, tc := range []struct {
			name    string
			when    kvtest.When
			applied bool
		}{{"gives-up-held-before", kvtest.Before, false}, {"gives-up-held-after", kvtest.After, true}} {
			t.Run(tc.name, func(t *testing.T) {
				p := newPauseFixture(t, store, graveler.Config{})
				p.set("main", "a", "1")
				before := p.head("main")
				var id1 graveler.CommitID
				err := p.giveUp(tc.when, p.commitHeadUpdate("main"), func(ctx context.Context) error {
					var err error
					id1, err = p.g.Commit(ctx, p.repo, "main", graveler.CommitParams{Committer: "t", Message: "async"})
					return err
				})
				switch head := p.head("main"); {
				case tc.applied && (err != nil || head != id1):
					t.Fatalf("head update applied: commit %s, %v; head %s", id1, err, head)
				case !tc.applied && (err == nil || head != before):
					t.Fatalf("head update never sent: commit %s, %v; head %s, was %s", id1, err, head, before)
				}
				p.want("main", "a", "1")
				if !tc.applied {
					p.commit("main", "absorbs")
				}
				p.want("main@", "a", "1")
			})
		}
	})
}

// TestInterleaveCommitVsDeleteBranch: a branch delete held before its
// conditional delete while a commit seals a new staging token (into which
// a write lands): the delete must not remove the newer record without
// handing its tokens to the cleaner. And a commit held before its head
// update while the branch is deleted: it fails, and every token of the
// branch is queued.
func TestInterleaveCommitVsDeleteBranch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		t.Run("delete-held", func(t *testing.T) {
			p := newPauseFixture(t, store, graveler.Config{})
			if _, err := p.g.CreateBranch(p.ctx, p.repo, "dev", "main"); err != nil {
				t.Fatal(err)
			}
			p.set("dev", "x", "1")
			del := p.ps.Pause(kvtest.Before, p.branchDelete("dev"))
			deleted := async(func() error { return p.g.DeleteBranch(p.ctx, p.repo, "dev") })
			del.Wait(t, holdTimeout)
			p.commit("dev", "meanwhile")
			p.set("dev", "y", "1")
			st := p.branch("dev").StagingToken
			p.release(del, deleted)
			if _, err := p.g.GetBranch(p.ctx, p.repo, "dev"); !errors.Is(err, graveler.ErrBranchNotFound) {
				t.Fatalf("branch after delete: %v", err)
			}
			p.wantQueued(st)
		})
		t.Run("commit-held", func(t *testing.T) {
			p := newPauseFixture(t, store, graveler.Config{})
			if _, err := p.g.CreateBranch(p.ctx, p.repo, "dev", "main"); err != nil {
				t.Fatal(err)
			}
			p.set("dev", "x", "1")
			hold, commit, _ := p.holdCommit("dev")
			b := p.branch("dev")
			if err := p.g.DeleteBranch(p.ctx, p.repo, "dev"); err != nil {
				t.Fatal(err)
			}
			hold.Release()
			if err := await(t, commit); !errors.Is(err, graveler.ErrBranchNotFound) {
				t.Fatalf("commit of a branch deleted meanwhile: %v", err)
			}
			for _, st := range append([]graveler.StagingToken{b.StagingToken}, b.SealedTokens...) {
				p.wantQueued(st)
			}
		})
	})
}

// TestInterleaveDeleteBranchGivesUp: a branch delete whose caller gives
// up while its conditional delete is held: before the store, the branch
// stays; after, it is gone and its tokens are queued for the cleaner.
func TestInterleaveDeleteBranchGivesUp(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		for _, tc := range []struct {
			name    string
			when    kvtest.When
			applied bool
		}{{"held-before", kvtest.Before, false}, {"held-after", kvtest.After, true}} {
			t.Run(tc.name, func(t *testing.T) {
				p := newPauseFixture(t, store, graveler.Config{})
				if _, err := p.g.CreateBranch(p.ctx, p.repo, "dev", "main"); err != nil {
					t.Fatal(err)
				}
				p.set("dev", "x", "1")
				st := p.branch("dev").StagingToken
				err := p.giveUp(tc.when, p.branchDelete("dev"), func(ctx context.Context) error {
					return p.g.DeleteBranch(ctx, p.repo, "dev")
				})
				if !tc.applied {
					if err == nil {
						t.Fatal("a branch delete never sent succeeded")
					}
					p.want("dev", "x", "1")
					return
				}
				if _, err := p.g.GetBranch(p.ctx, p.repo, "dev"); !errors.Is(err, graveler.ErrBranchNotFound) {
					t.Fatalf("branch after a delete applied: %v", err)
				}
				p.wantQueued(st)
			})
		}
	})
}

// TestInterleaveResetAllVsCommit: a commit sealed the staging token and is
// held before its head update when a reset of everything replaces the
// branch's tokens. The commit, released, finds its tokens gone and lands
// nothing of them: the discarded values never come back. A reset whose
// caller gives up while its compare-and-swap is held before the store is
// never applied; held after, it was.
func TestInterleaveResetAllVsCommit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		t.Run("race", func(t *testing.T) {
			p := newPauseFixture(t, store, graveler.Config{})
			p.stageOverBase("k")
			hold, commit, _ := p.holdCommit("main")
			if err := p.reset(p.ctx, graveler.ResetTypeAll, ""); err != nil {
				t.Fatal(err)
			}
			p.want("main", "k", "old")
			p.release(hold, commit)
			p.want("main", "k", "old")
			p.want("main@", "k", "old")
		})
		for _, tc := range []struct {
			name string
			when kvtest.When
			want string
		}{{"gives-up-held-before", kvtest.Before, "new"}, {"gives-up-held-after", kvtest.After, "old"}} {
			t.Run(tc.name, func(t *testing.T) {
				p := newPauseFixture(t, store, graveler.Config{})
				p.stageOverBase("k")
				reset := func(ctx context.Context) error { return p.reset(ctx, graveler.ResetTypeAll, "") }
				if err := p.giveUp(tc.when, p.branchOp("setif", "main"), reset); tc.when == kvtest.Before && err == nil {
					t.Fatal("a reset never sent succeeded")
				}
				p.want("main", "k", tc.want)
			})
		}
	})
}

// TestInterleaveWriterVsSeal: a write read the branch and is held before
// it reaches the staging token; a commit seals that token, commits it and
// the cleaner drops it. Released, the write lands in the dropped token.
// The fenced write reads the branch with it, sees that the token was not
// the branch's when it applied, and writes again into the new one:
// acknowledged, visible, and in the next commit. A write whose fence is
// read apart cannot tell this from a write that applied before the seal
// and whose token was dropped before its fence ran (writing that one
// again would undo newer writes, TestRetiredWriteNotRepeated): it answers
// graveler.ErrAmbiguous, writes nothing more, and the caller's retry
// lands. If its caller gives up
// while it is held before the store, it is never applied; held after, it
// was applied and is visible.
func TestInterleaveWriterVsSeal(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		for _, m := range fenceModes {
			t.Run(m.name, func(t *testing.T) {
				p := newPauseFixture(t, store, m.cfg)
				p.set("main", "other", "1")
				st := p.branch("main").StagingToken
				hold := p.ps.Pause(kvtest.Before, stagedWrite(st, "w"))
				write := async(func() error {
					return p.g.Set(p.ctx, p.repo, "main", graveler.Key("w"), val("1"), graveler.SetOptions{})
				})
				hold.Wait(t, holdTimeout)
				p.commit("main", "seals the token")
				if err := staging.New(p.inner, staging.Config{}).Drop(p.ctx, st); err != nil {
					t.Fatal(err)
				}
				if m.cfg.SeparateFenceRead {
					hold.Release()
					if err := await(t, write); !errors.Is(err, graveler.ErrAmbiguous) {
						t.Fatalf("write into a dropped token, fence read apart: %v, want graveler.ErrAmbiguous", err)
					}
					p.wantMissing("main", "w")
					p.set("main", "w", "1") // the caller's retry
				} else {
					p.release(hold, write)
				}
				p.want("main", "w", "1")
				p.commit("main", "next")
				p.want("main@", "w", "1")
			})
			for _, tc := range []struct {
				name    string
				when    kvtest.When
				applied bool
			}{{"gives-up-held-before", kvtest.Before, false}, {"gives-up-held-after", kvtest.After, true}} {
				t.Run(m.name+"/"+tc.name, func(t *testing.T) {
					p := newPauseFixture(t, store, m.cfg)
					st := p.branch("main").StagingToken
					err := p.giveUp(tc.when, stagedWrite(st, "w"), func(ctx context.Context) error {
						return p.g.Set(ctx, p.repo, "main", graveler.Key("w"), val("1"), graveler.SetOptions{})
					})
					if !tc.applied {
						if err == nil {
							t.Fatal("a write never sent was acknowledged")
						}
						p.set("main", "later", "1")
						p.wantMissing("main", "w")
						p.commit("main", "next")
						p.wantMissing("main@", "w")
						return
					}
					p.want("main", "w", "1")
				})
			}
		}
	})
}

// TestInterleaveWriterVsSealedToken: a write read the branch and is held
// before it reaches the staging token; a commit seals that token, reads
// it and is held before its head update. Released, the write must not
// land in the sealed token (the seal marker refuses it): readers do not
// see it while it is unacknowledged, the commit does not carry it, and it
// is visible once its retry into the new token lands. If its caller gives
// up while that retry is held, it is never applied anywhere. Every kind
// of staged write is checked: Set (both fences), SetBatch, DeletePrefix.
func TestInterleaveWriterVsSealedToken(t *testing.T) {
	rangesWrite := func(st graveler.StagingToken) func(kvtest.Op) bool {
		return func(op kvtest.Op) bool {
			return op.Is("setif", keys.StagingPartition(string(st)), keys.StagingRanges())
		}
	}
	writes := []struct {
		name  string
		held  func(st graveler.StagingToken) func(kvtest.Op) bool
		do    func(ctx context.Context, p *pauseFixture) error
		old   string // w's value before the write ("": missing)
		after string // and after it
	}{
		{"set", func(st graveler.StagingToken) func(kvtest.Op) bool { return stagedWrite(st, "w") },
			func(ctx context.Context, p *pauseFixture) error {
				return p.g.Set(ctx, p.repo, "main", graveler.Key("w"), val("1"), graveler.SetOptions{})
			}, "", "1"},
		{"set-batch", func(st graveler.StagingToken) func(kvtest.Op) bool { return stagedWrite(st, "w") },
			func(ctx context.Context, p *pauseFixture) error {
				return p.g.SetBatch(ctx, p.repo, "main", []*graveler.ValueRecord{{Key: graveler.Key("w"), Value: func() *graveler.Value { v := val("1"); return &v }()}})
			}, "", "1"},
		{"delete-prefix", rangesWrite,
			func(ctx context.Context, p *pauseFixture) error {
				return p.g.DeletePrefix(ctx, p.repo, "main", graveler.Key("w"))
			}, "0", ""},
	}
	wantW := func(p *pauseFixture, ref, v string) {
		p.t.Helper()
		if v == "" {
			p.wantMissing(ref, "w")
		} else {
			p.want(ref, "w", v)
		}
	}
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		for _, m := range fenceModes {
			for _, w := range writes {
				for _, giveUp := range []bool{false, true} {
					name := m.name + "/" + w.name
					if giveUp {
						name += "/gives-up-before-retry"
					}
					t.Run(name, func(t *testing.T) {
						p := newPauseFixture(t, store, m.cfg)
						if w.old != "" {
							p.set("main", "w", w.old)
							p.commit("main", "base")
						}
						p.set("main", "other", "1")
						st := p.branch("main").StagingToken
						hold := p.ps.Pause(kvtest.Before, w.held(st))
						wctx, cancel := context.WithCancel(p.ctx)
						defer cancel()
						write := async(func() error { return w.do(wctx, p) })
						hold.Wait(t, holdTimeout)
						commitHold, commitDone, _ := p.holdCommit("main")
						st2 := p.branch("main").StagingToken
						retry := p.ps.Pause(kvtest.Before, w.held(st2))
						hold.Release()
						retry.Wait(t, holdTimeout)
						// The first attempt reached the store after the seal.
						for e, err := range p.inner.Scan(p.ctx, keys.StagingPartition(string(st)), kv.ScanOptions{}) {
							if err != nil {
								t.Fatal(err)
							}
							if string(e.Key) != string(keys.Entry([]byte("other"))) && string(e.Key) != keys.StagingSealedKey {
								t.Fatalf("the sealed token took a write after its seal: key %q", e.Key)
							}
						}
						wantW(p, "main", w.old)
						p.release(commitHold, commitDone)
						wantW(p, "main", w.old)
						wantW(p, "main@", w.old)
						if giveUp {
							cancel()
							retry.Release()
							if err := await(t, write); err == nil {
								t.Fatal("a write whose retry was never sent was acknowledged")
							}
							wantW(p, "main", w.old)
							p.set("main", "later", "1")
							p.commit("main", "next")
							wantW(p, "main@", w.old)
							return
						}
						retry.Release()
						if err := await(t, write); err != nil {
							t.Fatal(err)
						}
						wantW(p, "main", w.after)
						p.commit("main", "next")
						wantW(p, "main@", w.after)
					})
				}
			}
		}
	})
}

// TestInterleaveMoveHeadVsCommit: merge, revert and cherry-pick check that
// the branch is clean, write their commit, then move the head from the one
// they read. A write and a commit landing in between move the head first:
// the operation fails with ErrBranchHeadMoved and the commit stays. If the
// caller gives up while the head update is held before the store, the
// head never moves; held after, it moved.
func TestInterleaveMoveHeadVsCommit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		setup := func(t *testing.T) (*pauseFixture, graveler.CommitID, graveler.CommitID) {
			p := newPauseFixture(t, store, graveler.Config{})
			p.set("main", "a", "1")
			c1 := p.commit("main", "a")
			if _, err := p.g.CreateBranch(p.ctx, p.repo, "dev", "main"); err != nil {
				t.Fatal(err)
			}
			p.set("dev", "d", "dev")
			devC := p.commit("dev", "dev work")
			return p, c1, devC
		}
		ops := []struct {
			name string
			run  func(ctx context.Context, p *pauseFixture, c1, devC graveler.CommitID) (graveler.CommitID, error)
		}{
			{"merge", func(ctx context.Context, p *pauseFixture, _, _ graveler.CommitID) (graveler.CommitID, error) {
				id, _, err := p.g.Merge(ctx, p.repo, "main", "dev", graveler.MergeParams{NoFastForward: true})
				return id, err
			}},
			{"revert", func(ctx context.Context, p *pauseFixture, c1, _ graveler.CommitID) (graveler.CommitID, error) {
				return p.g.Revert(ctx, p.repo, "main", graveler.Ref(c1), 0, graveler.CommitParams{})
			}},
			{"cherry-pick", func(ctx context.Context, p *pauseFixture, _, devC graveler.CommitID) (graveler.CommitID, error) {
				return p.g.CherryPick(ctx, p.repo, "main", graveler.Ref(devC), 0, graveler.CommitParams{})
			}},
		}
		for _, op := range ops {
			t.Run(op.name, func(t *testing.T) {
				p, c1, devC := setup(t)
				var id graveler.CommitID
				var cz graveler.CommitID
				err := p.race(p.branchOp("setif", "main"), func(ctx context.Context) error {
					var err error
					id, err = op.run(ctx, p, c1, devC)
					return err
				}, func() { cz = p.commitMeanwhile() })
				if !errors.Is(err, graveler.ErrBranchHeadMoved) {
					t.Fatalf("%s over a head that moved: %s, %v", op.name, id, err)
				}
				p.wantHead(cz)
				p.want("main@", "z", "1")
				p.want("main@", "a", "1")
			})
		}
		// The merge found main clean; before its head update, a write, a
		// commit of it (held before its own head update) and a reset of
		// the key with that commit in flight (an override token over the
		// unmoved head). The merge must not move the head under the
		// override token: it is refused as over a dirty branch.
		t.Run("merge/reset-override-meanwhile", func(t *testing.T) {
			p, c1, devC := setup(t)
			var hold *kvtest.PausePoint
			var commit <-chan error
			err := p.race(p.branchOp("setif", "main"), func(ctx context.Context) error {
				_, err := ops[0].run(ctx, p, c1, devC)
				return err
			}, func() {
				p.set("main", "k", "new")
				hold, commit, _ = p.holdCommit("main")
				if err := p.reset(p.ctx, graveler.ResetTypeKey, "k"); err != nil {
					t.Fatal(err)
				}
			})
			if !errors.Is(err, graveler.ErrDirtyBranch) {
				t.Fatalf("merge over an override token: %v, want ErrDirtyBranch", err)
			}
			p.release(hold, commit)
			p.wantMissing("main", "k")
			p.wantMissing("main", "d")
		})
		for _, tc := range []struct {
			name    string
			when    kvtest.When
			applied bool
		}{{"gives-up-held-before", kvtest.Before, false}, {"gives-up-held-after", kvtest.After, true}} {
			t.Run("merge/"+tc.name, func(t *testing.T) {
				p, c1, devC := setup(t)
				before := p.head("main")
				var id graveler.CommitID
				err := p.giveUp(tc.when, p.branchOp("setif", "main"), func(ctx context.Context) error {
					var err error
					id, err = ops[0].run(ctx, p, c1, devC)
					return err
				})
				switch head := p.head("main"); {
				case tc.applied && (err != nil || head != id):
					t.Fatalf("head update applied: merge %s, %v; head %s", id, err, head)
				case !tc.applied && (err == nil || head != before):
					t.Fatalf("head update never sent: merge %s, %v; head %s, was %s", id, err, head, before)
				}
				if tc.applied {
					p.want("main", "d", "dev")
				} else {
					p.wantMissing("main", "d")
				}
			})
		}
	})
}

// TestInterleaveResetHardVsCommit: ResetHard with an expected head is held
// before its compare-and-swap while a commit moves the head: it fails with
// ErrBranchHeadMoved and the commit stays. Giving up while held before
// the store leaves the branch as it was; held after, the reset applied.
func TestInterleaveResetHardVsCommit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		setup := func(t *testing.T) (*pauseFixture, graveler.CommitID, graveler.CommitID) {
			p := newPauseFixture(t, store, graveler.Config{})
			c0 := p.head("main")
			p.set("main", "a", "1")
			return p, c0, p.commit("main", "a")
		}
		t.Run("race", func(t *testing.T) {
			p, c0, c1 := setup(t)
			var cz graveler.CommitID
			err := p.race(p.branchOp("setif", "main"), func(ctx context.Context) error {
				_, err := p.g.ResetHard(ctx, p.repo, "main", graveler.Ref(c0), graveler.ResetHardOptions{ExpectedCommitID: c1, Force: true})
				return err
			}, func() { cz = p.commitMeanwhile() })
			if !errors.Is(err, graveler.ErrBranchHeadMoved) {
				t.Fatalf("reset hard over a head that moved: %v", err)
			}
			p.wantHead(cz)
			p.want("main", "z", "1")
		})
		for _, tc := range []struct {
			name    string
			when    kvtest.When
			applied bool
		}{{"gives-up-held-before", kvtest.Before, false}, {"gives-up-held-after", kvtest.After, true}} {
			t.Run(tc.name, func(t *testing.T) {
				p, c0, c1 := setup(t)
				p.set("main", "s", "staged")
				err := p.giveUp(tc.when, p.branchOp("setif", "main"), func(ctx context.Context) error {
					_, err := p.g.ResetHard(ctx, p.repo, "main", graveler.Ref(c0), graveler.ResetHardOptions{ExpectedCommitID: c1, Force: true})
					return err
				})
				switch head := p.head("main"); {
				case tc.applied && (err != nil || head != c0):
					t.Fatalf("reset applied: %v; head %s, want %s", err, head, c0)
				case !tc.applied && (err == nil || head != c1):
					t.Fatalf("reset never sent: %v; head %s, want %s", err, head, c1)
				}
				if tc.applied {
					p.wantMissing("main", "a")
					p.wantMissing("main", "s")
				} else {
					p.want("main", "a", "1")
					p.want("main", "s", "staged")
				}
			})
		}
	})
}

// TestInterleaveDiffUncommittedTokenDropped: an uncommitted diff read the
// branch (a sealed token of a commit in flight, and the staging token)
// and is held before it scans the sealed token; the commit lands and the
// cleaner drops the token. The diff must not come back short: it shows
// the branch before the commit or after it, never a mix.
func TestInterleaveDiffUncommittedTokenDropped(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		p := newPauseFixture(t, store, graveler.Config{})
		p.set("main", "k", "1")
		p.set("main", "x", "1")
		hold, commit, _ := p.holdCommit("main")
		p.set("main", "k", "2") // into the fresh staging token
		sealed := p.branch("main").SealedTokens
		if len(sealed) != 1 {
			t.Fatalf("sealed tokens %v", sealed)
		}
		scan := p.ps.Pause(kvtest.Before, func(op kvtest.Op) bool {
			return op.Is("scan", keys.StagingPartition(string(sealed[0])), nil)
		})
		var got []string
		diff := async(func() error {
			it, err := p.g.DiffUncommitted(p.ctx, p.repo, "main")
			if err != nil {
				return err
			}
			defer it.Close()
			for it.Next() {
				got = append(got, fmt.Sprintf("%s %s", it.Value().Type, it.Value().Key))
			}
			return it.Err()
		})
		scan.Wait(t, holdTimeout)
		p.release(hold, commit)
		if err := staging.New(p.inner, staging.Config{}).Drop(p.ctx, sealed[0]); err != nil {
			t.Fatal(err)
		}
		p.release(scan, diff)
		beforeCommit := []string{"added k", "added x"}
		afterCommit := []string{"changed k"}
		if !slices.Equal(got, beforeCommit) && !slices.Equal(got, afterCommit) {
			t.Fatalf("diff %q: neither %q (before the commit) nor %q (after it)", got, beforeCommit, afterCommit)
		}
	})
}

// TestInterleaveDiffUncommittedResumes: a long uncommitted diff has
// handed out its first chunk when a commit in flight lands and the cleaner
// drops the token the diff was reading. The rest of the diff comes from
// the branch as it is after the commit, starting after the last
// difference handed out: every key once, in order, none lost that is
// still uncommitted.
func TestInterleaveDiffUncommittedResumes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		const n = 300 // more than one chunk of the diff
		p := newPauseFixture(t, store, graveler.Config{})
		var recs []*graveler.ValueRecord
		for i := range n {
			v := val("1")
			recs = append(recs, &graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("a%03d", i)), Value: &v})
		}
		if err := p.g.SetBatch(p.ctx, p.repo, "main", recs); err != nil {
			t.Fatal(err)
		}
		hold, commit, _ := p.holdCommit("main")
		p.set("main", "a290", "2") // into the fresh staging token
		sealed := p.branch("main").SealedTokens
		it, err := p.g.DiffUncommitted(p.ctx, p.repo, "main")
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		var got []string
		for len(got) < 200 && it.Next() {
			got = append(got, fmt.Sprintf("%s %s", it.Value().Type, it.Value().Key))
		}
		p.release(hold, commit)
		for _, st := range sealed {
			if err := staging.New(p.inner, staging.Config{}).Drop(p.ctx, st); err != nil {
				t.Fatal(err)
			}
		}
		for it.Next() {
			got = append(got, fmt.Sprintf("%s %s", it.Value().Type, it.Value().Key))
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		// Up to where the first chunk ended, the branch before the commit;
		// after, the branch after it, where only a290 is staged.
		var want []string
		for i := range n {
			want = append(want, fmt.Sprintf("added a%03d", i))
		}
		chunk := slices.Index(got, "changed a290")
		if chunk < 0 || !slices.Equal(got[:chunk], want[:chunk]) || len(got) != chunk+1 {
			t.Fatalf("diff across the commit: %d differences, %q ... %q", len(got), got[:min(3, len(got))], got[max(0, len(got)-3):])
		}
	})
}

// TestInterleaveTwoReplicasAbandonedWrite: two services (replicas) on one
// etcd. Replica 1's staged write of h is held in flight; a write of k=v1
// queues behind it on replica 1 and its caller's deadline passes. The
// client then writes k=v2 through replica 2 and is told OK. When replica
// 1's request is released, the abandoned write of v1 must never land: k
// reads v2 on both replicas, and after a commit.
func TestInterleaveTwoReplicasAbandonedWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("embedded etcd")
	}
	t.Parallel()
	srv := etcdkvtest.NewServer(t)
	ps := kvtest.NewPauseStore(etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{}))
	blobs := committed.NewBucketStore(committed.BucketConfig{})
	t.Cleanup(func() { blobs.Close() })
	ctx := context.Background()
	r1 := &fixture{t: t, g: gravelertest.New(t, ps, gravelertest.Options{Blobs: blobs}), ctx: ctx, repo: "replicas"}
	r2 := &fixture{t: t, g: gravelertest.New(t, etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{}), gravelertest.Options{Blobs: blobs}), ctx: ctx, repo: "replicas"}
	if _, err := r1.g.CreateRepository(ctx, r1.repo, gravelertest.Namespace(), "main"); err != nil {
		t.Fatal(err)
	}
	r1.set("main", "warm", "0")
	r2.want("main", "warm", "0")
	if !r1.g.FencedWrites() {
		t.Fatal("replica 1 does not group its staged writes")
	}
	st, err := r1.g.GetBranch(ctx, r1.repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	hold := ps.Pause(kvtest.Before, func(op kvtest.Op) bool {
		return op.Is("set_and_read", keys.StagingPartition(string(st.StagingToken)), keys.Entry([]byte("h")))
	})
	first := async(func() error {
		return r1.g.Set(ctx, r1.repo, "main", graveler.Key("h"), val("1"), graveler.SetOptions{})
	})
	hold.Wait(t, holdTimeout)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := r1.g.Set(short, r1.repo, "main", graveler.Key("k"), val("v1"), graveler.SetOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a write queued past its deadline: %v", err)
	}
	r2.set("main", "k", "v2")
	hold.Release()
	if err := await(t, first); err != nil {
		t.Fatal(err)
	}
	r1.set("main", "after", "1") // goes after anything replica 1 had queued
	r1.want("main", "k", "v2")
	r2.want("main", "k", "v2")
	r2.commit("main", "after the race")
	r1.want("main@", "k", "v2")
	r2.want("main", "k", "v2")
}

// TestLaterResetKeepsOverride: a reset with a commit in flight publishes
// an override token, and the commit then lands the discarded value in the
// head. Whatever follows (a reset of the key, of its prefix or of
// everything, a write then a reset, a delete of the prefix then a reset, a
// reset while the next commit is in flight), the discarded value must not
// show again: the override token corrects the head, it is not a change a
// later reset discards. The next commit carries it into the head.
func TestLaterResetKeepsOverride(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		for _, tc := range []struct {
			name string
			then func(p *pauseFixture) error
		}{
			{"reset-key", func(p *pauseFixture) error { return p.reset(p.ctx, graveler.ResetTypeKey, "k") }},
			{"reset-prefix", func(p *pauseFixture) error { return p.reset(p.ctx, graveler.ResetTypePrefix, "k") }},
			{"reset-all", func(p *pauseFixture) error { return p.reset(p.ctx, graveler.ResetTypeAll, "") }},
			{"write-then-reset-key", func(p *pauseFixture) error {
				p.set("main", "k", "x")
				return p.reset(p.ctx, graveler.ResetTypeKey, "k")
			}},
			{"write-then-reset-all", func(p *pauseFixture) error {
				p.set("main", "k", "x")
				return p.reset(p.ctx, graveler.ResetTypeAll, "")
			}},
			{"delete-prefix-then-reset-key", func(p *pauseFixture) error {
				if err := p.g.DeletePrefix(p.ctx, p.repo, "main", graveler.Key("k")); err != nil {
					return err
				}
				p.wantMissing("main", "k")
				return p.reset(p.ctx, graveler.ResetTypeKey, "k")
			}},
			{"delete-prefix-then-reset-prefix", func(p *pauseFixture) error {
				if err := p.g.DeletePrefix(p.ctx, p.repo, "main", graveler.Key("k")); err != nil {
					return err
				}
				return p.reset(p.ctx, graveler.ResetTypePrefix, "k")
			}},
			{"reset-during-next-commit", func(p *pauseFixture) error {
				p.set("main", "k", "x")
				hold, commit, _ := p.holdCommit("main")
				err := p.reset(p.ctx, graveler.ResetTypeKey, "k")
				p.want("main", "k", "old")
				p.release(hold, commit)
				return err
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := newPauseFixture(t, store, graveler.Config{})
				p.stageOverBase("k")
				hold, commit, _ := p.holdCommit("main")
				if err := p.reset(p.ctx, graveler.ResetTypeKey, "k"); err != nil {
					t.Fatal(err)
				}
				p.release(hold, commit)
				p.want("main@", "k", "new") // the commit's tree holds the discarded value
				p.want("main", "k", "old")
				if err := tc.then(p); err != nil {
					t.Fatal(err)
				}
				p.want("main", "k", "old")
				if _, err := p.g.Commit(p.ctx, p.repo, "main", graveler.CommitParams{Committer: "t", Message: "next"}); err != nil && !errors.Is(err, graveler.ErrNoChanges) {
					t.Fatal(err)
				}
				p.want("main@", "k", "old")
				if b := p.branch("main"); len(b.SealedTokens) != 0 || len(b.OverrideTokens) != 0 {
					t.Fatalf("branch after the commit: %+v", b)
				}
			})
		}
	})
}

// TestResetsDoNotPileTokens: resets add sealed tokens only for what a
// sealed token or a range tombstone stages. A reset of a key under a
// prefix deleted in the staging token publishes an override token above
// it (two sealed tokens); after a commit in flight took one key and
// landed, the override token stays alone. Either way, later resets of
// freshly staged keys drop them from the staging token and add nothing.
func TestResetsDoNotPileTokens(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		resetFresh := func(p *pauseFixture, sealed int) {
			p.t.Helper()
			for i := range 2 * graveler.DefaultMaxSealedTokens {
				k := fmt.Sprintf("x%d", i)
				p.set("main", k, "v")
				if err := p.reset(p.ctx, graveler.ResetTypeKey, k); err != nil {
					p.t.Fatalf("reset %d: %v", i, err)
				}
				p.wantMissing("main", k)
				if b := p.branch("main"); len(b.SealedTokens) != sealed {
					p.t.Fatalf("after reset %d: %d sealed tokens, want %d", i, len(b.SealedTokens), sealed)
				}
			}
		}
		t.Run("under-deleted-prefix", func(t *testing.T) {
			p := newPauseFixture(t, store, graveler.Config{})
			p.set("main", "d/1", "old")
			p.commit("main", "base")
			p.deletePrefix("main", "d/")
			if err := p.reset(p.ctx, graveler.ResetTypeKey, "d/1"); err != nil {
				t.Fatal(err)
			}
			p.want("main", "d/1", "old")
			resetFresh(p, 2)
			// The override is not a change a later reset drops.
			if err := p.reset(p.ctx, graveler.ResetTypeKey, "d/1"); err != nil {
				t.Fatal(err)
			}
			p.want("main", "d/1", "old")
			p.commitAllowEmpty("main")
			p.want("main@", "d/1", "old")
		})
		t.Run("after-commit-in-flight", func(t *testing.T) {
			p := newPauseFixture(t, store, graveler.Config{})
			p.stageOverBase("k")
			hold, commit, _ := p.holdCommit("main")
			if err := p.reset(p.ctx, graveler.ResetTypeKey, "k"); err != nil {
				t.Fatal(err)
			}
			p.release(hold, commit)
			p.want("main", "k", "old")
			resetFresh(p, 1)
			p.want("main", "k", "old")
		})
	})
}

// TestResetOverridesBounded: a commit in flight holds five keys; resets
// of them publish one override token each (below the staging token,
// which stages none of them) until the next would pass MaxSealedTokens:
// that reset is refused, asking for a commit, and changes nothing. Once
// the commit lands, the key is committed, no longer staged, and its
// reset has nothing to discard.
func TestResetOverridesBounded(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		p := newPauseFixture(t, store, graveler.Config{MaxSealedTokens: 3})
		p.stageOverBase("a", "b", "c")
		hold, commit, _ := p.holdCommit("main")
		for i, k := range []string{"a", "b"} {
			if err := p.reset(p.ctx, graveler.ResetTypeKey, k); err != nil {
				t.Fatal(err)
			}
			if b := p.branch("main"); len(b.SealedTokens) != i+2 || len(b.OverrideTokens) != i+1 {
				t.Fatalf("after resetting %s: %+v", k, b)
			}
		}
		err := p.reset(p.ctx, graveler.ResetTypeKey, "c")
		if !errors.Is(err, graveler.ErrTooManyRetries) || !strings.Contains(err.Error(), "commit the branch") {
			t.Fatalf("reset past the bound: %v, want ErrTooManyRetries asking for a commit", err)
		}
		p.want("main", "c", "new")
		p.release(hold, commit)
		if err := p.reset(p.ctx, graveler.ResetTypeKey, "c"); err != nil {
			t.Fatal(err)
		}
		p.want("main", "a", "old")
		p.want("main", "b", "old")
		p.want("main", "c", "new")
		p.commit("main", "next")
		p.want("main@", "a", "old")
		p.want("main@", "c", "new")
	})
}

// TestNoOpOverridesLeaveBranchClean: a reset publishes an override token
// while a commit is in flight; a reset of everything then discards the
// commit's token too, so the commit lands nothing and the override token
// holds only what the head holds. The branch is clean: nothing differs
// from its head, and a reset hard (no force) moves it, letting the
// override token go so that it cannot mask the new head.
func TestNoOpOverridesLeaveBranchClean(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		p := newPauseFixture(t, store, graveler.Config{})
		p.set("main", "k", "older")
		older := p.commit("main", "older")
		p.set("main", "k", "old")
		p.commit("main", "base")
		p.set("main", "k", "new")
		hold, commit, _ := p.holdCommit("main")
		if err := p.reset(p.ctx, graveler.ResetTypeKey, "k"); err != nil {
			t.Fatal(err)
		}
		if err := p.reset(p.ctx, graveler.ResetTypeAll, ""); err != nil {
			t.Fatal(err)
		}
		hold.Release()
		// Its token's changes were discarded, not its commit: it lands
		// nothing, and succeeds.
		if err := await(t, commit); err != nil {
			t.Fatalf("the commit in flight, its token's changes discarded: %v", err)
		}
		p.want("main", "k", "old")
		if d := p.diffUncommitted("main"); len(d) != 0 {
			t.Fatalf("uncommitted diff %v", d)
		}
		if len(p.branch("main").OverrideTokens) != 1 {
			t.Fatal("the override token was not kept by the reset of everything")
		}
		if _, err := p.g.ResetHard(p.ctx, p.repo, "main", graveler.Ref(older), graveler.ResetHardOptions{}); err != nil {
			t.Fatalf("reset hard of a clean branch: %v", err)
		}
		p.want("main", "k", "older")
		if b := p.branch("main"); len(b.OverrideTokens) != 0 || len(b.SealedTokens) != 0 {
			t.Fatalf("branch after the reset hard: %+v", b)
		}
	})
}

// TestOverridePublishDeadline: a reset's publication held before the
// store past its deadline is never sent: the reset fails, no override
// token is published, and the commit in flight lands the staged value.
func TestOverridePublishDeadline(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		p := newPauseFixture(t, store, graveler.Config{OverridePublishWithin: 200 * time.Millisecond})
		p.stageOverBase("k")
		hold, commit, _ := p.holdCommit("main")
		held, done := p.heldAsync(kvtest.Before, p.overridePublish(), func() error { return p.reset(p.ctx, graveler.ResetTypeKey, "k") })
		time.Sleep(400 * time.Millisecond)
		held.Release()
		if err := await(t, done); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("reset published past its deadline: %v", err)
		}
		if b := p.branch("main"); len(b.OverrideTokens) != 0 {
			t.Fatalf("override tokens %q", b.OverrideTokens)
		}
		p.release(hold, commit)
		p.want("main", "k", "new")
	})
}

// TestResetUnderDeletePrefixVsHeadMove: a merge (or a reset hard without
// force) found main clean; before its head update, a DeletePrefix and a
// reset of a key under it. The reset's override token carries the old
// head's value: the head update must not slip under it, so it is refused
// as over a dirty branch, and the key shows the head it was computed on.
func TestResetUnderDeletePrefixVsHeadMove(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		for _, tc := range []struct {
			name string
			move func(ctx context.Context, p *pauseFixture, older graveler.CommitID) error
		}{
			{"merge", func(ctx context.Context, p *pauseFixture, _ graveler.CommitID) error {
				_, _, err := p.g.Merge(ctx, p.repo, "main", "dev", graveler.MergeParams{})
				return err
			}},
			{"reset-hard", func(ctx context.Context, p *pauseFixture, older graveler.CommitID) error {
				_, err := p.g.ResetHard(ctx, p.repo, "main", graveler.Ref(older), graveler.ResetHardOptions{})
				return err
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := newPauseFixture(t, store, graveler.Config{})
				p.set("main", "a/x", "older")
				older := p.commit("main", "older")
				p.set("main", "a/x", "1")
				p.commit("main", "base")
				if _, err := p.g.CreateBranch(p.ctx, p.repo, "dev", "main"); err != nil {
					t.Fatal(err)
				}
				p.set("dev", "a/x", "dev")
				p.commit("dev", "dev work")
				err := p.race(p.branchOp("setif", "main"), func(ctx context.Context) error { return tc.move(ctx, p, older) }, func() {
					p.deletePrefix("main", "a/")
					if err := p.reset(p.ctx, graveler.ResetTypeKey, "a/x"); err != nil {
						t.Fatal(err)
					}
					p.want("main", "a/x", "1")
				})
				if !errors.Is(err, graveler.ErrDirtyBranch) {
					t.Fatalf("%s over a reset's override token: %v, want ErrDirtyBranch", tc.name, err)
				}
				p.want("main", "a/x", "1")
				p.commitAllowEmpty("main")
				p.want("main@", "a/x", "1")
			})
		}
	})
}

// TestStaleResetDropUnderDeletePrefix: a reset of a/x reads the staging
// token (a/x staged, no range tombstone) and is held before its drop;
// meanwhile a DeletePrefix of a/ lands, then a second reset of a/x, or a
// write of it. Released, the drop must not turn what followed into a
// reset record under the tombstone (a/x would read deleted, which no
// order of the operations gives): the token refuses it, and the held
// reset's next round decides on what is staged now.
func TestStaleResetDropUnderDeletePrefix(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		for _, tc := range []struct {
			name string
			then func(p *pauseFixture)
			want []string // the values allowed
		}{
			{"second-reset", func(p *pauseFixture) {
				if err := p.reset(p.ctx, graveler.ResetTypeKey, "a/x"); err != nil {
					p.t.Fatal(err)
				}
				p.want("main", "a/x", "old")
			}, []string{"old"}},
			// The held reset before the delete: w; after the write: old.
			{"write", func(p *pauseFixture) { p.set("main", "a/x", "w") }, []string{"old", "w"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := newPauseFixture(t, store, graveler.Config{})
				p.stageOverBase("a/x")
				st := p.branch("main").StagingToken
				err := p.race(stagedWrite(st, "a/x"), func(ctx context.Context) error {
					return p.reset(ctx, graveler.ResetTypeKey, "a/x")
				}, func() {
					p.deletePrefix("main", "a/")
					tc.then(p)
				})
				if err != nil {
					t.Fatal(err)
				}
				v, err := p.get("main", "a/x")
				if !slices.Contains(tc.want, v) {
					t.Fatalf("a/x = %q, %v; want one of %q", v, err, tc.want)
				}
			})
		}
	})
}

// TestRepeatedResetUnderDeletePrefix: resetting a key again and again,
// with nothing written in between, under a prefix deleted in the staging
// token (a key of the head, and one that is nowhere): the first reset of
// the head's key publishes an override token; later resets find it the
// newest record of the key, or nothing to discard, and publish nothing.
func TestRepeatedResetUnderDeletePrefix(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		p := newPauseFixture(t, store, graveler.Config{})
		p.stageOverBase("p/k")
		p.deletePrefix("main", "p/")
		sealed := -1
		for i := range 2 * graveler.DefaultMaxSealedTokens {
			for _, k := range []string{"p/k", "p/none"} {
				if err := p.reset(p.ctx, graveler.ResetTypeKey, k); err != nil {
					t.Fatalf("reset %d of %s: %v (sealed tokens %d)", i, k, err, len(p.branch("main").SealedTokens))
				}
			}
			n := len(p.branch("main").SealedTokens)
			if sealed >= 0 && n != sealed {
				t.Fatalf("round %d: %d sealed tokens, %d after the first", i, n, sealed)
			}
			sealed = n
		}
		p.want("main", "p/k", "old")
		p.wantMissing("main", "p/none")
		p.commitAllowEmpty("main")
		p.want("main@", "p/k", "old")
	})
}

// TestCommitConsumingCorrectionIsACommit: an override token corrects the
// head (a reset overlapped a commit that landed the prefix delete it
// discarded), and a delete staged over it leaves the branch's view equal
// to the head's tree. A commit then consumes the correction: it must be a
// commit, not "no changes" (nothing committed), since what a reset shows
// afterwards changes with it.
func TestCommitConsumingCorrectionIsACommit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		p := newPauseFixture(t, store, graveler.Config{})
		p.set("main", "p/b", "old")
		p.commit("main", "base")
		p.deletePrefix("main", "p/")
		hold, done, _ := p.holdCommit("main")
		if err := p.reset(p.ctx, graveler.ResetTypeKey, "p/b"); err != nil {
			t.Fatal(err)
		}
		p.release(hold, done)
		p.wantMissing("main@", "p/b") // the commit landed the delete
		p.want("main", "p/b", "old")
		if err := p.g.Delete(p.ctx, p.repo, "main", graveler.Key("p/b")); err != nil {
			t.Fatal(err)
		}
		p.wantMissing("main", "p/b")
		id := p.commit("main", "consumes the correction")
		if p.head("main") != id {
			t.Fatalf("head %s, want the commit %s", p.head("main"), id)
		}
		if err := p.reset(p.ctx, graveler.ResetTypeKey, "p/b"); err != nil {
			t.Fatal(err)
		}
		p.wantMissing("main", "p/b")
		p.wantMissing("main@", "p/b")
	})
}

// TestMaskedResetNotRefusedAtBound: a reset with nothing left to discard
// (its key's newest record is an override token) publishes nothing, so it
// succeeds even when the branch holds MaxSealedTokens sealed tokens (here
// left by commits whose head update was never sent).
func TestMaskedResetNotRefusedAtBound(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		p := newPauseFixture(t, store, graveler.Config{})
		p.stageOverBase("p/k")
		p.deletePrefix("main", "p/")
		if err := p.reset(p.ctx, graveler.ResetTypeKey, "p/k"); err != nil {
			t.Fatal(err)
		}
		for len(p.branch("main").SealedTokens) < graveler.DefaultMaxSealedTokens {
			err := p.giveUp(kvtest.Before, p.commitHeadUpdate("main"), func(ctx context.Context) error {
				_, err := p.g.Commit(ctx, p.repo, "main", graveler.CommitParams{Committer: "t", Message: "fails", AllowEmpty: true})
				return err
			})
			if err == nil {
				t.Fatal("a commit whose head update was never sent succeeded")
			}
		}
		if err := p.reset(p.ctx, graveler.ResetTypeKey, "p/k"); err != nil {
			t.Fatalf("a reset with nothing to discard, at the bound: %v", err)
		}
		p.want("main", "p/k", "old")
	})
}

// TestCommitAtSealedBoundRacingReset: resets (each a key reset under a
// staged prefix delete, which publishes an override token and seals the
// staging token) fill the branch's sealed tokens up to MaxSealedTokens.
// a/2 is deleted (acknowledged), then a commit starts, and a reset of
// a/2 (of its prefix, of everything) runs while the commit's head update
// is held, and again once it landed. a/2 stays deleted throughout: the
// commit at the bound seals the staging token too, so it never lands the
// older state in which a/2 still held v17 for a reset to restore.
func TestCommitAtSealedBoundRacingReset(t *testing.T) {
	for _, rc := range []struct {
		name  string
		reset func(p *pauseFixture) error
	}{
		{"key", func(p *pauseFixture) error { return p.reset(p.ctx, graveler.ResetTypeKey, "a/2") }},
		{"prefix", func(p *pauseFixture) error { return p.reset(p.ctx, graveler.ResetTypePrefix, "a/") }},
		{"all", func(p *pauseFixture) error { return p.reset(p.ctx, graveler.ResetTypeAll, "") }},
	} {
		for _, bound := range []int{2, 10} {
			t.Run(fmt.Sprintf("reset-%s/max-%d", rc.name, bound), func(t *testing.T) {
				forEachBackend(t, func(t *testing.T, store kv.Store) {
					p := newPauseFixture(t, store, graveler.Config{MaxSealedTokens: bound})
					p.set("main", "a/2", "v17")
					for range bound / 2 {
						if err := p.g.DeletePrefix(p.ctx, p.repo, "main", graveler.Key("x/")); err != nil {
							t.Fatal(err)
						}
						if err := p.reset(p.ctx, graveler.ResetTypeKey, "x/k"); err != nil {
							t.Fatal(err)
						}
					}
					if n := len(p.branch("main").SealedTokens); n != bound {
						t.Fatalf("%d sealed tokens, want the bound %d", n, bound)
					}
					if err := p.g.DeletePrefix(p.ctx, p.repo, "main", graveler.Key("a/")); err != nil {
						t.Fatal(err)
					}
					p.wantMissing("main", "a/2")
					hold := p.ps.Pause(kvtest.Before, p.commitHeadUpdate("main"))
					done, _ := p.commitAsync(p.ctx, "main")
					hold.Wait(t, holdTimeout)
					// The commit sealed one token past the bound: a reset
					// that would add more is refused until it lands.
					if err := rc.reset(p); err != nil && !errors.Is(err, graveler.ErrTooManyRetries) {
						t.Fatal(err)
					}
					p.wantMissing("main", "a/2")
					hold.Release()
					if err := await(t, done); err != nil && !errors.Is(err, graveler.ErrNoChanges) {
						t.Fatal(err)
					}
					p.wantMissing("main", "a/2")
					p.wantMissing("main@", "a/2")
					if err := rc.reset(p); err != nil {
						t.Fatalf("the reset once the commit landed: %v", err)
					}
					p.wantMissing("main", "a/2")
				})
			})
		}
	}
}
