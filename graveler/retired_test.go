package graveler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"graveler/graveler"
	"graveler/keys"
	"graveler/kv"
	"graveler/kv/kvtest"
)

// A staged write that applied to a token and then saw the token retired
// (its fence ran after a commit sealed the token) came before the seal:
// the commit carries it. Writing it again into the next token would apply
// it a second time, after writes acknowledged meanwhile, and undo them.
// Each case holds the write after the store applied it, lets a commit seal
// and land the token, acknowledges a newer write of the same key, then
// releases the held write: the newer write must stand.

// sealedAndOverwritten commits main (sealing and landing the token a held
// write went to), then writes key=2 and checks it is what reads see.
func (p *pauseFixture) sealedAndOverwritten(key string) {
	p.t.Helper()
	p.commit("main", "seals the held write's token")
	p.set("main", key, "2")
	p.want("main", key, "2")
}

// heldAsync starts op with the operation match selects held at when and
// returns once it is held.
func (p *pauseFixture) heldAsync(when kvtest.When, match func(kvtest.Op) bool, op func() error) (*kvtest.PausePoint, <-chan error) {
	p.t.Helper()
	hold := p.ps.Pause(when, match)
	done := async(op)
	hold.Wait(p.t, holdTimeout)
	return hold, done
}

// setBatchW stages w=1 on main as a one-record batch.
func (p *pauseFixture) setBatchW() error {
	return p.g.SetBatch(p.ctx, p.repo, "main", []*graveler.ValueRecord{{Key: graveler.Key("w"), Value: ptr(val("1"))}})
}

func TestRetiredWriteNotRepeated(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		// One write held after it applied, by its kind: w is what reads
		// show while it is held.
		for _, tc := range []struct {
			name  string
			cfg   graveler.Config
			match func(p *pauseFixture) func(kvtest.Op) bool
			write func(p *pauseFixture) error
			w     string // "": missing
		}{
			{"delete-prefix", graveler.Config{}, func(p *pauseFixture) func(kvtest.Op) bool { return p.rangesOf("setif") },
				func(p *pauseFixture) error { return p.g.DeletePrefix(p.ctx, p.repo, "main", graveler.Key("w")) }, ""},
			{"set-batch", graveler.Config{}, func(p *pauseFixture) func(kvtest.Op) bool {
				return stagedWrite(p.branch("main").StagingToken, "w")
			}, (*pauseFixture).setBatchW, "1"},
			// The writer's fence read apart from the write (no
			// one-round-trip fence): a plain Set.
			{"set-separate-fence", graveler.Config{SeparateFenceRead: true}, func(p *pauseFixture) func(kvtest.Op) bool {
				return stagedWrite(p.branch("main").StagingToken, "w")
			}, func(p *pauseFixture) error {
				return p.g.Set(p.ctx, p.repo, "main", graveler.Key("w"), val("1"), graveler.SetOptions{})
			}, "1"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := newPauseFixture(t, store, tc.cfg)
				p.set("main", "w", "0")
				p.commit("main", "base")
				p.set("main", "other", "1")
				hold, done := p.heldAsync(kvtest.After, tc.match(p), func() error { return tc.write(p) })
				if tc.w == "" {
					p.wantMissing("main", "w")
				} else {
					p.want("main", "w", tc.w)
				}
				p.sealedAndOverwritten("w")
				p.release(hold, done)
				p.want("main", "w", "2")
			})
		}
		// Part of a batch applied before the seal, part was refused by it:
		// only the refused part goes to the next token.
		t.Run("set-batch-part", func(t *testing.T) {
			p := newPauseFixture(t, store, graveler.Config{})
			p.set("main", "other", "1")
			st := p.branch("main").StagingToken
			hold, done := p.heldAsync(kvtest.Before, stagedWrite(st, "b"), func() error {
				return p.g.SetBatch(p.ctx, p.repo, "main", []*graveler.ValueRecord{
					{Key: graveler.Key("a"), Value: ptr(val("1"))},
					{Key: graveler.Key("b"), Value: ptr(val("1"))},
				})
			})
			waitFor(t, func() bool { _, err := p.get("main", "a"); return err == nil })
			p.sealedAndOverwritten("a")
			p.release(hold, done)
			p.want("main", "a", "2")
			p.want("main", "b", "1")
			p.commit("main", "next")
			p.want("main@", "a", "2")
			p.want("main@", "b", "1")
		})
		// A reset's drop applied before the seal: the commit read the
		// token without the value, so the reset is done; overrides now
		// would undo the newer write.
		t.Run("reset-drop", func(t *testing.T) {
			p := newPauseFixture(t, store, graveler.Config{})
			p.stageOverBase("k")
			p.set("main", "other", "1")
			st := p.branch("main").StagingToken
			hold, done := p.heldAsync(kvtest.After, stagedWrite(st, "k"), func() error { return p.reset(p.ctx, graveler.ResetTypeKey, "k") })
			p.want("main", "k", "old")
			p.sealedAndOverwritten("k")
			p.release(hold, done)
			p.want("main", "k", "2")
		})
		// A reset's override token (several keys, a commit in flight),
		// published, held after the store: a commit then seals and lands
		// it.
		t.Run("reset-overrides", func(t *testing.T) {
			p := newPauseFixture(t, store, graveler.Config{})
			p.stageOverBase("d/a", "d/b")
			holdC, commit, _ := p.holdCommit("main")
			hold, done := p.heldAsync(kvtest.After, p.overridePublish(), func() error { return p.reset(p.ctx, graveler.ResetTypePrefix, "d/") })
			p.release(holdC, commit)
			p.want("main", "d/a", "old")
			p.sealedAndOverwritten("d/a")
			p.release(hold, done)
			p.want("main", "d/a", "2")
			p.want("main", "d/b", "old")
		})
	})
}

// TestResetOverridesFollowTheHead: a reset's override token, computed on
// the head before a commit in flight landed, is held before its
// publication; the commit lands, the branch is clean, and a reset hard
// moves the head to a commit where the key has another value. Released,
// the publication finds the branch moved and is not made: the reset
// starts again, finds nothing staged, and the key shows the new head.
func TestResetOverridesFollowTheHead(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		p := newPauseFixture(t, store, graveler.Config{})
		p.set("main", "k", "A")
		p.commit("main", "base")
		if _, err := p.g.CreateBranch(p.ctx, p.repo, "dev", "main"); err != nil {
			t.Fatal(err)
		}
		p.set("dev", "k", "R")
		devC := p.commit("dev", "R")
		p.set("main", "k", "B")
		holdC, commit, _ := p.holdCommit("main")
		hold, done := p.heldAsync(kvtest.Before, p.overridePublish(), func() error { return p.reset(p.ctx, graveler.ResetTypeKey, "k") })
		p.release(holdC, commit)
		if _, err := p.g.ResetHard(p.ctx, p.repo, "main", graveler.Ref(devC), graveler.ResetHardOptions{}); err != nil {
			t.Fatal(err)
		}
		p.want("main", "k", "R")
		p.release(hold, done)
		p.want("main", "k", "R")
		p.commitAllowEmpty("main")
		p.want("main@", "k", "R")
	})
}

// TestResetRecordUnderDeletePrefix: a DeletePrefix lands between a reset
// of a key under it reading the branch and the reset's record being
// written. A reset record would stage nothing and let the prefix delete
// show through, deleting the key where the reset must show what lies
// below: the token refuses the record instead, and the next round finds
// the range tombstone and hides it under an override token. The reset
// takes effect after the prefix delete: Get, listing and the commit all
// show the key's head value.
func TestResetRecordUnderDeletePrefix(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		p := newPauseFixture(t, store, graveler.Config{})
		p.stageOverBase("p/k")
		st := p.branch("main").StagingToken
		err := p.race(stagedWrite(st, "p/k"), func(ctx context.Context) error { return p.reset(ctx, graveler.ResetTypeKey, "p/k") }, func() {
			if err := p.g.DeletePrefix(p.ctx, p.repo, "main", graveler.Key("p/")); err != nil {
				t.Fatal(err)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		wantRows(t, "stored under p/", storedUnder(t, p.inner, st, "p/"), "p/k") // no reset record
		p.want("main", "p/k", "old")
		page, err := p.g.ListEntriesPage(p.ctx, p.repo, "main", graveler.ListEntriesOptions{Prefix: graveler.Key("p/"), Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Rows) != 1 || string(page.Rows[0].Key) != "p/k" {
			t.Fatalf("listing shows %d entries under p/, want p/k", len(page.Rows))
		}
		p.commitAllowEmpty("main")
		p.want("main@", "p/k", "old")
	})
}

// TestWriteAgainReadsTheBranchAfterTheMarker: a write applied to T1; its
// fence reads the branch while a commit of T1 is held (T1 among the
// sealed tokens); before the writer reads T1's marker, the commit lands,
// T1 is dropped and a newer write of the key is acknowledged. The marker
// is then missing while the branch the writer read still holds T1: only
// a branch read after the marker tells a dropped token from one sealed
// without a marker, and the writer must not write again.
func TestWriteAgainReadsTheBranchAfterTheMarker(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		p := newPauseFixture(t, store, graveler.Config{})
		p.set("main", "other", "1")
		st := p.branch("main").StagingToken
		hold, done := p.heldAsync(kvtest.After, stagedWrite(st, "w"), func() error {
			return p.setBatchW()
		})
		holdC, commit, _ := p.holdCommit("main")
		marker := p.ps.Pause(kvtest.Before, kvtest.OpOn(keys.StagingPartition(string(st)), keys.StagingSealed(), "get_many"))
		hold.Release()
		marker.Wait(t, holdTimeout)
		p.release(holdC, commit)
		if _, err := kv.DropPartition(p.ctx, p.inner, keys.StagingPartition(string(st))); err != nil {
			t.Fatal(err)
		}
		p.set("main", "w", "2")
		marker.Release()
		if err := await(t, done); !errors.Is(err, graveler.ErrAmbiguous) {
			t.Fatalf("write whose token was dropped before its marker was read: %v, want graveler.ErrAmbiguous", err)
		}
		p.want("main", "w", "2")
	})
}

// TestRetiredAndDroppedWriteUnknown: a write applied to a token that was
// then retired and dropped before the writer's fence ran. Nothing in the
// store tells whether it applied before the retirement (the commit carries
// it) or into the dropped partition (nobody will see it), so the writer
// neither writes it again nor reports success: graveler.ErrAmbiguous.
func TestRetiredAndDroppedWriteUnknown(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		for _, tc := range []struct {
			name  string
			match func(st graveler.StagingToken) func(kvtest.Op) bool
			write func(p *pauseFixture) error
		}{
			{"set-batch", func(st graveler.StagingToken) func(kvtest.Op) bool { return stagedWrite(st, "w") },
				func(p *pauseFixture) error {
					return p.setBatchW()
				}},
			{"delete-prefix", func(st graveler.StagingToken) func(kvtest.Op) bool {
				return kvtest.OpOn(keys.StagingPartition(string(st)), keys.StagingRanges(), "setif")
			}, func(p *pauseFixture) error { return p.g.DeletePrefix(p.ctx, p.repo, "main", graveler.Key("w")) }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p := newPauseFixture(t, store, graveler.Config{})
				p.set("main", "other", "1")
				st := p.branch("main").StagingToken
				hold, done := p.heldAsync(kvtest.After, tc.match(st), func() error { return tc.write(p) })
				p.commit("main", "seals the held write's token")
				if _, err := kv.DropPartition(p.ctx, p.inner, keys.StagingPartition(string(st))); err != nil {
					t.Fatal(err)
				}
				hold.Release()
				if err := await(t, done); !errors.Is(err, graveler.ErrAmbiguous) {
					t.Fatalf("write whose token was dropped before its fence: %v, want graveler.ErrAmbiguous", err)
				}
				got := p.branch("main")
				if got.StagingToken == st || len(got.SealedTokens) != 0 {
					t.Fatalf("branch %+v", got)
				}
				if !tokenEmpty(t, p, got.StagingToken) {
					t.Fatal("the write went again into the new token")
				}
			})
		}
	})
}

// TestRetiredWithoutMarkerWrittenAgain: a token sealed by a release that
// writes no seal marker (simulated by removing the marker while the
// commit that sealed it is held). A write that applied to it may have
// landed after that commit read it, so it goes again into the next token,
// as that release did.
func TestRetiredWithoutMarkerWrittenAgain(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		p := newPauseFixture(t, store, graveler.Config{})
		p.set("main", "other", "1")
		st := p.branch("main").StagingToken
		hold, done := p.heldAsync(kvtest.After, stagedWrite(st, "w"), func() error {
			return p.setBatchW()
		})
		holdC, commit, _ := p.holdCommit("main")
		if err := p.inner.Delete(p.ctx, keys.StagingPartition(string(st)), keys.StagingSealed()); err != nil {
			t.Fatal(err)
		}
		next := p.branch("main").StagingToken
		p.release(hold, done)
		if _, _, err := p.inner.Get(p.ctx, keys.StagingPartition(string(next)), keys.Entry([]byte("w"))); err != nil {
			t.Fatalf("the write is not in the next token: %v", err)
		}
		p.release(holdC, commit)
		p.want("main", "w", "1")
	})
}

// tokenEmpty reports whether staging token st holds no record at all.
func tokenEmpty(t *testing.T, p *pauseFixture, st graveler.StagingToken) bool {
	t.Helper()
	for _, err := range p.inner.Scan(p.ctx, keys.StagingPartition(string(st)), kv.ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		return false
	}
	return true
}

// waitFor polls cond until it holds, failing the test after holdTimeout.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(holdTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func ptr[T any](v T) *T { return &v }

// TestWriteRacingBranchDeleteAndRecreate: a write to branch b that read b
// (staging token T) before b was deleted and created again. A branch
// delete seals T in the same step, so the writer learns what became of
// its write instead of answering OUTCOME_UNKNOWN:
//
//   - held before the store saw it: the seal refuses it, and it goes to
//     the new b, where it is visible;
//   - held after it applied: it came before the delete, which discarded
//     it with the old b; it is done, and not written into the new b.
func TestWriteRacingBranchDeleteAndRecreate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		for _, tc := range []struct {
			name  string
			cfg   graveler.Config
			match func(p *pauseFixture, st graveler.StagingToken) func(kvtest.Op) bool
			write func(p *pauseFixture) error
			w     string // what the write makes w read: "" missing
		}{
			{"set-batch", graveler.Config{}, func(p *pauseFixture, st graveler.StagingToken) func(kvtest.Op) bool { return stagedWrite(st, "w") },
				func(p *pauseFixture) error {
					return p.g.SetBatch(p.ctx, p.repo, "b", []*graveler.ValueRecord{{Key: graveler.Key("w"), Value: ptr(val("1"))}})
				}, "1"},
			{"delete-prefix", graveler.Config{}, func(p *pauseFixture, st graveler.StagingToken) func(kvtest.Op) bool {
				return kvtest.OpOn(keys.StagingPartition(string(st)), keys.StagingRanges(), "setif")
			}, func(p *pauseFixture) error { return p.g.DeletePrefix(p.ctx, p.repo, "b", graveler.Key("w")) }, ""},
			{"set", graveler.Config{}, func(p *pauseFixture, st graveler.StagingToken) func(kvtest.Op) bool { return stagedWrite(st, "w") },
				func(p *pauseFixture) error {
					return p.g.Set(p.ctx, p.repo, "b", graveler.Key("w"), val("1"), graveler.SetOptions{})
				}, "1"},
			{"set-separate-fence", graveler.Config{SeparateFenceRead: true}, func(p *pauseFixture, st graveler.StagingToken) func(kvtest.Op) bool { return stagedWrite(st, "w") },
				func(p *pauseFixture) error {
					return p.g.Set(p.ctx, p.repo, "b", graveler.Key("w"), val("1"), graveler.SetOptions{})
				}, "1"},
		} {
			for _, when := range []kvtest.When{kvtest.Before, kvtest.After} {
				name := tc.name + "/held-before"
				if when == kvtest.After {
					name = tc.name + "/held-after"
				}
				t.Run(name, func(t *testing.T) {
					p := newPauseFixture(t, store, tc.cfg)
					p.set("main", "w", "0")
					p.commit("main", "base")
					if _, err := p.g.CreateBranch(p.ctx, p.repo, "b", "main"); err != nil {
						t.Fatal(err)
					}
					old := p.branch("b").StagingToken
					hold, done := p.heldAsync(when, tc.match(p, old), func() error { return tc.write(p) })
					if err := p.g.DeleteBranch(p.ctx, p.repo, "b"); err != nil {
						t.Fatalf("delete b: %v", err)
					}
					if _, err := p.g.CreateBranch(p.ctx, p.repo, "b", "main"); err != nil {
						t.Fatalf("create b again: %v", err)
					}
					fresh := p.branch("b").StagingToken
					p.release(hold, done)
					if when == kvtest.Before {
						// Refused by the seal, then written into the new b.
						if tc.w == "" {
							p.wantMissing("b", "w")
						} else {
							p.want("b", "w", tc.w)
						}
						if tokenEmpty(t, p, fresh) {
							t.Fatal("the write did not go into the new branch's token")
						}
						return
					}
					// Applied before the delete: gone with the old b.
					p.want("b", "w", "0")
					if !tokenEmpty(t, p, fresh) {
						t.Fatal("the write went again into the new branch's token")
					}
				})
			}
		}
	})
}
