package ref_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"graveler/cleaner"
	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/ref"
	"graveler/keys"
	"graveler/kv"
	"graveler/kv/kvtest"
)

// Interleaving tests: every compare-and-swap path of the ref manager is
// held (kvtest.PauseStore) between its read and its write while the
// operation that matters for it runs, and, separately, its caller gives up
// while the write is held before the store (it must never be applied) or
// after it (applied, the caller hears an error, the state stays one a
// retry or the cleaner completes). Each runs on memory and on etcd.

// holdTimeout bounds the wait for an operation to reach its pause point; a
// test that waits that long has failed anyway.
const holdTimeout = 30 * time.Second

// ienv is an env whose manager runs on a PauseStore (behind kvtest.LateAckStore), with
// the inner store and a partition lister for running the cleaner.
type ienv struct {
	*env
	ps     *kvtest.PauseStore
	inner  kv.Store
	lister cleaner.PartitionLister
}

func newIEnv(t *testing.T, inner kv.Store, lister cleaner.PartitionLister) *ienv {
	ps := kvtest.NewPauseStore(inner)
	return &ienv{env: newEnv(t, kvtest.LateAckStore{Store: ps}, nil), ps: ps, inner: inner, lister: lister}
}

// forEachStore runs fn on memory and on a real embedded etcd (one server,
// a fresh root prefix per environment).
func forEachStore(t *testing.T, fn func(t *testing.T, newEnv func(t *testing.T) *ienv)) {
	t.Run("memory", func(t *testing.T) {
		fn(t, func(t *testing.T) *ienv {
			mem := kv.NewMemoryStore()
			t.Cleanup(func() { _ = mem.Close() })
			return newIEnv(t, mem, cleaner.NewMemoryLister(mem))
		})
	})
	t.Run("etcd", func(t *testing.T) {
		srv := etcdkvtest.NewServer(t)
		n := 0
		fn(t, func(t *testing.T) *ienv {
			n++
			s := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{Prefix: fmt.Sprintf("/interleave-%d", n)})
			return newIEnv(t, s, cleaner.NewEtcdLister(s.Client(), s.Prefix()))
		})
	})
}

// interleave runs op with the operation match selects held, as m says,
// and returns op's error. In race mode racer runs while it is held.
func (e *ienv) interleave(m kvtest.Mode, match func(kvtest.Op) bool, op func(ctx context.Context) error, racer func()) error {
	e.t.Helper()
	return kvtest.Interleave(e.t, e.ctx, e.ps, m, match, op, racer)
}

// wantFailed asserts that a caller who gave up heard an error.
func wantFailed(t *testing.T, m kvtest.Mode, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%v: the caller gave up but was told the operation succeeded", m)
	}
}

// repo creates the repository "repo" and returns it, its main branch and
// its partition.
func (e *ienv) repo() (*graveler.RepositoryRecord, *graveler.Branch, []byte) {
	e.t.Helper()
	r := e.createRepo("repo")
	main, err := e.m.GetBranch(e.ctx, r, "main")
	if err != nil {
		e.t.Fatal(err)
	}
	return r, main, keys.RepositoryPartition("repo", string(r.UniqueID))
}

// uidOf returns the unique id of the current record of id (fatal if none).
func (e *ienv) uidOf(id graveler.RepositoryID) graveler.UniqueID {
	e.t.Helper()
	rec, ok := e.rawRepository(string(id))
	if !ok {
		e.t.Fatalf("%s: no record", id)
	}
	return rec.UniqueID
}

func (e *ienv) wantQueued(repo graveler.RepositoryID, uid graveler.UniqueID, want bool) {
	e.t.Helper()
	if got := e.queued(string(repo), string(uid)); got != want {
		e.t.Fatalf("%s incarnation %s queued for the cleaner: %v, want %v", repo, uid, got, want)
	}
}

func (e *ienv) wantTokenQueued(tok graveler.StagingToken, want bool) {
	e.t.Helper()
	if got := e.tokenQueued(tok); got != want {
		e.t.Fatalf("token %s queued for the cleaner: %v, want %v", tok, got, want)
	}
}

// stage writes one staged entry into tok's partition, as a writer would.
func (e *ienv) stage(tok graveler.StagingToken, key string) {
	e.t.Helper()
	if err := e.inner.Set(e.ctx, keys.StagingPartition(string(tok)), keys.Entry([]byte(key)), []byte("v")); err != nil {
		e.t.Fatal(err)
	}
}

func (e *ienv) staged(tok graveler.StagingToken, key string) bool {
	e.t.Helper()
	_, _, err := e.inner.Get(e.ctx, keys.StagingPartition(string(tok)), keys.Entry([]byte(key)))
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		e.t.Fatal(err)
	}
	return err == nil
}

// runCleaner makes one cleaner pass on the inner store at e's clock, with
// the orphan sweep on and no grace: the most aggressive setting.
func (e *ienv) runCleaner(sweep bool) cleaner.Summary {
	e.t.Helper()
	c := cleaner.New(e.inner, cleaner.Config{RepositoryCreationTimeout: e.cfg.RepositoryCreationTimeout, Now: e.clock.Now,
		Sweep: sweep, SweepGrace: -1, Lister: e.lister})
	sum, err := c.RunOnce(e.ctx)
	if err != nil || sum.Errors != 0 {
		e.t.Fatalf("cleaner pass: %+v, %v", sum, err)
	}
	return sum
}

// liveRepo is a repository with a second branch holding a staged entry:
// what a client has been acknowledged.
type liveRepo struct {
	rec *graveler.RepositoryRecord
	dev *graveler.Branch
}

func (e *ienv) newLiveRepo(id graveler.RepositoryID) liveRepo {
	e.t.Helper()
	rec := e.createRepo(id)
	main, err := e.m.GetBranch(e.ctx, rec, "main")
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.m.CreateBranch(e.ctx, rec, "dev", graveler.Branch{CommitID: main.CommitID}); err != nil {
		e.t.Fatal(err)
	}
	dev, err := e.m.GetBranch(e.ctx, rec, "dev")
	if err != nil {
		e.t.Fatal(err)
	}
	e.stage(dev.StagingToken, "acked")
	return liveRepo{rec: rec, dev: dev}
}

// checkIntact asserts that l is the repository's live incarnation, not
// queued, with its branch and acknowledged entry in place.
func (e *ienv) checkIntact(l liveRepo) {
	e.t.Helper()
	got, err := e.m.GetRepository(e.ctx, l.rec.RepositoryID)
	if err != nil {
		e.t.Fatalf("%s: %v", l.rec.RepositoryID, err)
	}
	if got.UniqueID != l.rec.UniqueID {
		e.t.Fatalf("%s: incarnation %s, want %s", l.rec.RepositoryID, got.UniqueID, l.rec.UniqueID)
	}
	e.wantQueued(l.rec.RepositoryID, l.rec.UniqueID, false)
	dev, err := e.m.GetBranch(e.ctx, got, "dev")
	if err != nil || dev.StagingToken != l.dev.StagingToken {
		e.t.Fatalf("%s: branch dev %+v, %v", l.rec.RepositoryID, dev, err)
	}
	if !e.staged(dev.StagingToken, "acked") {
		e.t.Fatalf("%s: acknowledged entry lost", l.rec.RepositoryID)
	}
}

// checkSurvivesCleaner runs the cleaner and checks l again.
func (e *ienv) checkSurvivesCleaner(l liveRepo) {
	e.t.Helper()
	e.runCleaner(true)
	e.checkIntact(l)
}

// crashedCreate leaves an initial record of id (a create that died after
// its first write) and returns its incarnation.
func (e *ienv) crashedCreate(id graveler.RepositoryID) graveler.UniqueID {
	e.t.Helper()
	fs := &faultStore{Store: e.inner}
	fs.arm(faultCrash, 3) // Get, SetIf initial, then the claim's read fails
	if _, err := e.managerOn(fs).CreateRepository(e.ctx, id, repoParams(), initialCommit()); err == nil {
		e.t.Fatal("crashed create succeeded")
	}
	return e.uidOf(id)
}

// TestInterleaveRepositoryDelete: DeleteRepository's two writes to the
// repository record (SetIf deleting, DeleteIf the deleting record).
func TestInterleaveRepositoryDelete(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *ienv) {
		for _, m := range kvtest.Modes {
			// The mark. Racing: another client deletes the repository and
			// creates the name again, and writes to it.
			t.Run("mark/"+m.String(), func(t *testing.T) {
				e := newEnv(t)
				old := e.newLiveRepo("doomed")
				var fresh liveRepo
				err := e.interleave(m, kvtest.OpOn(keys.Graveler(), keys.Repository("doomed"), "setif"),
					func(ctx context.Context) error { return e.m.DeleteRepository(ctx, "doomed") },
					func() {
						if err := e.m.DeleteRepository(e.ctx, "doomed"); err != nil {
							t.Fatal(err)
						}
						fresh = e.newLiveRepo("doomed")
					})
				switch m {
				case kvtest.Race:
					// The incarnation it read is deleted: done, not a conflict
					// (a retry would delete the new one).
					if err != nil {
						t.Fatalf("delete that lost to another delete of the same incarnation: %v", err)
					}
					e.wantQueued("doomed", old.rec.UniqueID, true)
					e.checkSurvivesCleaner(fresh)
				case kvtest.CancelBefore:
					wantFailed(t, m, err)
					e.checkIntact(old)
				case kvtest.CancelAfter:
					wantFailed(t, m, err)
					// Marked, not removed: being deleted until a retry (or
					// a create of the name, or the cleaner) finishes.
					_, gerr := e.m.GetRepository(e.ctx, "doomed")
					wantErr(t, gerr, graveler.ErrRepositoryDeleting)
					e.checkInvisible("doomed")
					if err := e.m.DeleteRepository(e.ctx, "doomed"); err != nil {
						t.Fatalf("retried delete: %v", err)
					}
					e.wantQueued("doomed", old.rec.UniqueID, true)
					e.checkInvisible("doomed")
				}
			})
			// The removal (issue 14 item 1). Racing: a create of the same
			// name takes over the deleting record and is written to.
			t.Run("remove/"+m.String(), func(t *testing.T) {
				e := newEnv(t)
				old := e.newLiveRepo("phoenix")
				var fresh liveRepo
				err := e.interleave(m, kvtest.OpOn(keys.Graveler(), keys.Repository("phoenix"), "delete", "deleteif"),
					func(ctx context.Context) error { return e.m.DeleteRepository(ctx, "phoenix") },
					func() {
						// In the window the repository is being deleted.
						if _, err := e.m.GetRepository(e.ctx, "phoenix"); !errors.Is(err, graveler.ErrRepositoryDeleting) {
							t.Errorf("get while being deleted: %v, want %v", err, graveler.ErrRepositoryDeleting)
						}
						fresh = e.newLiveRepo("phoenix")
					})
				switch m {
				case kvtest.Race:
					if err != nil {
						t.Fatal(err)
					}
					e.wantQueued("phoenix", old.rec.UniqueID, true)
					e.checkSurvivesCleaner(fresh)
				case kvtest.CancelBefore:
					wantFailed(t, m, err)
					e.wantQueued("phoenix", old.rec.UniqueID, true)
					e.checkInvisible("phoenix")
					// The name is reusable at once.
					fresh = e.newLiveRepo("phoenix")
					e.checkSurvivesCleaner(fresh)
				case kvtest.CancelAfter:
					wantFailed(t, m, err)
					e.wantQueued("phoenix", old.rec.UniqueID, true)
					if _, ok := e.rawRepository("phoenix"); ok {
						t.Fatal("record left after an applied removal")
					}
					e.checkInvisible("phoenix")
				}
			})
		}
	})
}

// TestInterleaveRepositoryCreate: CreateRepository's two writes to the
// repository record (SetIf claiming the name, SetIf activating).
func TestInterleaveRepositoryCreate(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *ienv) {
		for _, m := range kvtest.Modes {
			// The claim. Racing: another create of the same name.
			t.Run("claim/"+m.String(), func(t *testing.T) {
				e := newEnv(t)
				var winner liveRepo
				first := len(e.ids.All())
				err := e.interleave(m, kvtest.OpOn(keys.Graveler(), keys.Repository("name"), "setif"),
					func(ctx context.Context) error {
						_, err := e.m.CreateRepository(ctx, "name", repoParams(), initialCommit())
						return err
					},
					func() { winner = e.newLiveRepo("name") })
				mine := graveler.UniqueID(e.ids.All()[first])
				switch m {
				case kvtest.Race:
					wantErr(t, err, graveler.ErrRepositoryExists)
					if !e.partitionEmpty("name", string(mine)) {
						t.Fatal("the losing create wrote to its partition")
					}
					e.checkSurvivesCleaner(winner)
				case kvtest.CancelBefore:
					wantFailed(t, m, err)
					e.checkInvisible("name")
					e.checkSurvivesCleaner(e.newLiveRepo("name"))
				case kvtest.CancelAfter:
					// The initial record landed; the create abandons it at
					// once, so the name is free without waiting the timeout.
					wantFailed(t, m, err)
					e.wantQueued("name", mine, true)
					if _, ok := e.rawRepository("name"); ok {
						t.Fatal("abandoned initial record left")
					}
					e.checkSurvivesCleaner(e.newLiveRepo("name"))
				}
			})
			// The activation. Racing: the initial record expires and a
			// reader retires it.
			t.Run("activate/"+m.String(), func(t *testing.T) {
				e := newEnv(t)
				first := len(e.ids.All())
				err := e.interleave(m, kvtest.Nth(2, kvtest.OpOn(keys.Graveler(), keys.Repository("slow"), "setif")),
					func(ctx context.Context) error {
						_, err := e.m.CreateRepository(ctx, "slow", repoParams(), initialCommit())
						return err
					},
					func() {
						e.clock.Advance(e.cfg.RepositoryCreationTimeout)
						_, err := e.m.GetRepository(e.ctx, "slow")
						wantErr(t, err, graveler.ErrRepositoryNotFound)
					})
				mine := graveler.UniqueID(e.ids.All()[first])
				switch m {
				case kvtest.Race:
					wantErr(t, err, ref.ErrRepositoryCreationRaced)
					e.wantQueued("slow", mine, true)
					e.checkInvisible("slow")
					e.checkSurvivesCleaner(e.newLiveRepo("slow"))
				case kvtest.CancelBefore:
					wantFailed(t, m, err)
					e.wantQueued("slow", mine, true)
					e.checkInvisible("slow")
					e.checkSurvivesCleaner(e.newLiveRepo("slow"))
				case kvtest.CancelAfter:
					// Active, though the caller heard only that the outcome
					// is unknown: it must not be undone.
					wantErr(t, err, graveler.ErrAmbiguous)
					e.checkUsable("slow")
					e.wantQueued("slow", mine, false)
				}
			})
		}
	})
}

// TestInterleaveRepositoryRetireExpired: GetRepository retiring an initial
// record past the creation timeout (its SetIf deleting, then its DeleteIf).
// Racing: a create of the same name, which takes over the expired record.
func TestInterleaveRepositoryRetireExpired(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *ienv) {
		for _, step := range []struct {
			name  string
			match func(kvtest.Op) bool
		}{
			{"mark", kvtest.OpOn(keys.Graveler(), keys.Repository("stuck"), "setif")},
			{"remove", kvtest.OpOn(keys.Graveler(), keys.Repository("stuck"), "delete", "deleteif")},
		} {
			for _, m := range kvtest.Modes {
				t.Run(step.name+"/"+m.String(), func(t *testing.T) {
					e := newEnv(t)
					dead := e.crashedCreate("stuck")
					e.clock.Advance(e.cfg.RepositoryCreationTimeout)
					var fresh liveRepo
					err := e.interleave(m, step.match,
						func(ctx context.Context) error {
							_, err := e.m.GetRepository(ctx, "stuck")
							return err
						},
						func() { fresh = e.newLiveRepo("stuck") })
					if m == kvtest.Race {
						// Read before the create: not found, and the create
						// it raced is untouched.
						wantErr(t, err, graveler.ErrRepositoryNotFound)
						e.wantQueued("stuck", dead, true)
						e.checkSurvivesCleaner(fresh)
						return
					}
					// Whatever the retire did, the expired incarnation is
					// invisible, and a create of the name or the cleaner
					// finishes the job.
					wantErr(t, err, graveler.ErrRepositoryNotFound)
					e.checkInvisible("stuck")
					fresh = e.newLiveRepo("stuck")
					e.wantQueued("stuck", dead, true)
					e.checkSurvivesCleaner(fresh)
				})
			}
		}
	})
}

// TestInterleaveBranchCreate: CreateBranch's SetIf (absent). Racing:
// another create of the same branch.
func TestInterleaveBranchCreate(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *ienv) {
		for _, m := range kvtest.Modes {
			t.Run(m.String(), func(t *testing.T) {
				e := newEnv(t)
				r, main, part := e.repo()
				var theirs *graveler.Branch
				err := e.interleave(m, kvtest.OpOn(part, keys.Branch("feature"), "setif"),
					func(ctx context.Context) error {
						return e.m.CreateBranch(ctx, r, "feature", graveler.Branch{CommitID: main.CommitID, StagingToken: "repo.mine"})
					},
					func() {
						if err := e.m.CreateBranch(e.ctx, r, "feature", graveler.Branch{CommitID: main.CommitID, StagingToken: "repo.theirs"}); err != nil {
							t.Fatal(err)
						}
						theirs, _ = e.m.GetBranch(e.ctx, r, "feature")
					})
				got, gerr := e.m.GetBranch(e.ctx, r, "feature")
				switch m {
				case kvtest.Race:
					wantErr(t, err, graveler.ErrBranchExists)
					if gerr != nil || got.StagingToken != theirs.StagingToken {
						t.Fatalf("branch after the race: %+v, %v", got, gerr)
					}
				case kvtest.CancelBefore:
					wantFailed(t, m, err)
					wantErr(t, gerr, graveler.ErrBranchNotFound)
				case kvtest.CancelAfter:
					wantFailed(t, m, err)
					if gerr != nil || got.StagingToken != "repo.mine" {
						t.Fatalf("branch after an applied create: %+v, %v", got, gerr)
					}
					wantErr(t, e.m.CreateBranch(e.ctx, r, "feature", graveler.Branch{CommitID: main.CommitID}), graveler.ErrBranchExists)
				}
			})
		}
	})
}

// TestInterleaveBranchUpdate: BranchUpdate's SetIf. Racing: another
// update (a commit sealing the staging token); neither update is lost.
func TestInterleaveBranchUpdate(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *ienv) {
		for _, m := range kvtest.Modes {
			t.Run(m.String(), func(t *testing.T) {
				e := newEnv(t)
				r, before, part := e.repo()
				seal := func(fresh graveler.StagingToken) graveler.BranchUpdateFunc {
					return func(b *graveler.Branch) (*graveler.Branch, error) {
						return &graveler.Branch{CommitID: b.CommitID, StagingToken: fresh,
							SealedTokens: append([]graveler.StagingToken{b.StagingToken}, b.SealedTokens...)}, nil
					}
				}
				err := e.interleave(m, kvtest.OpOn(part, keys.Branch("main"), "setif"),
					func(ctx context.Context) error { return e.m.BranchUpdate(ctx, r, "main", seal("repo.mine")) },
					func() {
						if err := e.m.BranchUpdate(e.ctx, r, "main", seal("repo.theirs")); err != nil {
							t.Fatal(err)
						}
					})
				got, gerr := e.m.GetBranch(e.ctx, r, "main")
				if gerr != nil {
					t.Fatal(gerr)
				}
				var want []graveler.StagingToken
				switch m {
				case kvtest.Race:
					if err != nil {
						t.Fatal(err)
					}
					want = []graveler.StagingToken{"repo.mine", "repo.theirs", before.StagingToken}
				case kvtest.CancelBefore:
					wantFailed(t, m, err)
					want = []graveler.StagingToken{before.StagingToken}
				case kvtest.CancelAfter:
					wantFailed(t, m, err)
					want = []graveler.StagingToken{"repo.mine", before.StagingToken}
				}
				if all := append([]graveler.StagingToken{got.StagingToken}, got.SealedTokens...); !slices.Equal(all, want) {
					t.Fatalf("tokens %v, want %v", all, want)
				}
			})
		}
	})
}

// TestInterleaveBranchDelete: DeleteBranch's DeleteIf. Racing: a delete
// and re-create of the same branch with a write to it, or a commit sealing
// its token. Whatever version is removed, its tokens are queued, so the
// cleaner reclaims them without the sweep; a live branch's tokens are
// never reclaimed.
func TestInterleaveBranchDelete(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *ienv) {
		for _, racer := range []string{"recreate", "commit"} {
			for _, m := range kvtest.Modes {
				if racer == "commit" && m != kvtest.Race {
					continue // the cancellations do not depend on the racer
				}
				t.Run(racer+"/"+m.String(), func(t *testing.T) {
					e := newEnv(t)
					r, main, part := e.repo()
					if err := e.m.CreateBranch(e.ctx, r, "topic", graveler.Branch{CommitID: main.CommitID, StagingToken: "repo.v1"}); err != nil {
						t.Fatal(err)
					}
					e.stage("repo.v1", "k1")
					err := e.interleave(m, kvtest.OpOn(part, keys.Branch("topic"), "delete", "deleteif"),
						func(ctx context.Context) error { return e.m.DeleteBranch(ctx, r, "topic") },
						func() {
							switch racer {
							case "recreate":
								if err := e.m.DeleteBranch(e.ctx, r, "topic"); err != nil {
									t.Fatal(err)
								}
								if err := e.m.CreateBranch(e.ctx, r, "topic", graveler.Branch{CommitID: main.CommitID, StagingToken: "repo.v2"}); err != nil {
									t.Fatal(err)
								}
								e.stage("repo.v2", "k2")
							case "commit":
								if err := e.m.BranchUpdate(e.ctx, r, "topic", func(b *graveler.Branch) (*graveler.Branch, error) {
									return &graveler.Branch{CommitID: b.CommitID, StagingToken: "repo.v2",
										SealedTokens: append([]graveler.StagingToken{b.StagingToken}, b.SealedTokens...)}, nil
								}); err != nil {
									t.Fatal(err)
								}
								e.stage("repo.v2", "k2")
							}
						})
					_, gerr := e.m.GetBranch(e.ctx, r, "topic")
					switch m {
					case kvtest.Race:
						if err != nil {
							t.Fatal(err)
						}
						wantErr(t, gerr, graveler.ErrBranchNotFound)
						// The version it removed had repo.v2: queued, so
						// the cleaner reclaims it without the sweep.
						e.wantTokenQueued("repo.v1", true)
						e.wantTokenQueued("repo.v2", true)
						e.runCleaner(false)
						if e.staged("repo.v1", "k1") || e.staged("repo.v2", "k2") {
							t.Fatal("a deleted branch's staged entries were not reclaimed")
						}
					case kvtest.CancelBefore:
						wantFailed(t, m, err)
						if gerr != nil {
							t.Fatalf("branch after a delete that never reached the store: %v", gerr)
						}
						// Its tokens are queued, but live: the cleaner keeps them.
						e.runCleaner(true)
						if !e.staged("repo.v1", "k1") {
							t.Fatal("the cleaner dropped a live branch's staged entry")
						}
						if err := e.m.DeleteBranch(e.ctx, r, "topic"); err != nil {
							t.Fatalf("retried delete: %v", err)
						}
					case kvtest.CancelAfter:
						wantFailed(t, m, err)
						wantErr(t, gerr, graveler.ErrBranchNotFound)
						e.wantTokenQueued("repo.v1", true)
					}
				})
			}
		}
	})
}

// TestInterleaveTagCreate: CreateTag's SetIf (absent). Racing: another
// create of the same tag.
func TestInterleaveTagCreate(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *ienv) {
		for _, m := range kvtest.Modes {
			t.Run(m.String(), func(t *testing.T) {
				e := newEnv(t)
				r, main, part := e.repo()
				c2 := e.commit(r, "two", main.CommitID)
				err := e.interleave(m, kvtest.OpOn(part, keys.Tag("v1"), "setif"),
					func(ctx context.Context) error { return e.m.CreateTag(ctx, r, "v1", main.CommitID) },
					func() {
						if err := e.m.CreateTag(e.ctx, r, "v1", c2); err != nil {
							t.Fatal(err)
						}
					})
				got, gerr := e.m.GetTag(e.ctx, r, "v1")
				switch m {
				case kvtest.Race:
					wantErr(t, err, graveler.ErrTagExists)
					if gerr != nil || got != c2 {
						t.Fatalf("tag after the race: %s, %v", got, gerr)
					}
				case kvtest.CancelBefore:
					wantFailed(t, m, err)
					wantErr(t, gerr, graveler.ErrTagNotFound)
				case kvtest.CancelAfter:
					wantFailed(t, m, err)
					if gerr != nil || got != main.CommitID {
						t.Fatalf("tag after an applied create: %s, %v", got, gerr)
					}
				}
			})
		}
	})
}

// TestInterleaveBranchTagClash: a branch and a tag of one name are never
// both created (the branch would hide the tag). CreateBranch's write is
// held while a tag of that name is created, and the reverse; the held
// create must fail with ErrAlreadyExists, and only the racer's ref exist.
func TestInterleaveBranchTagClash(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *ienv) {
		t.Run("branch held, tag created", func(t *testing.T) {
			e := newEnv(t)
			r, main, part := e.repo()
			err := e.interleave(kvtest.Race, kvtest.OpOn(part, keys.Branch("v1"), "setif"),
				func(ctx context.Context) error {
					return e.m.CreateBranch(ctx, r, "v1", graveler.Branch{CommitID: main.CommitID})
				},
				func() {
					if err := e.m.CreateTag(e.ctx, r, "v1", main.CommitID); err != nil {
						t.Fatal(err)
					}
				})
			if !errors.Is(err, graveler.ErrAlreadyExists) || errors.Is(err, graveler.ErrBranchExists) {
				t.Fatalf("CreateBranch while a tag of its name was created: %v, want ErrAlreadyExists naming the tag", err)
			}
			wantErr(t, func() error { _, err := e.m.GetBranch(e.ctx, r, "v1"); return err }(), graveler.ErrBranchNotFound)
			if got, err := e.m.GetTag(e.ctx, r, "v1"); err != nil || got != main.CommitID {
				t.Fatalf("tag v1: %s, %v", got, err)
			}
		})
		t.Run("tag held, branch created", func(t *testing.T) {
			e := newEnv(t)
			r, main, part := e.repo()
			err := e.interleave(kvtest.Race, kvtest.OpOn(part, keys.Tag("dev"), "setif"),
				func(ctx context.Context) error { return e.m.CreateTag(ctx, r, "dev", main.CommitID) },
				func() {
					if err := e.m.CreateBranch(e.ctx, r, "dev", graveler.Branch{CommitID: main.CommitID}); err != nil {
						t.Fatal(err)
					}
				})
			if !errors.Is(err, graveler.ErrAlreadyExists) || errors.Is(err, graveler.ErrTagExists) {
				t.Fatalf("CreateTag while a branch of its name was created: %v, want ErrAlreadyExists naming the branch", err)
			}
			wantErr(t, func() error { _, err := e.m.GetTag(e.ctx, r, "dev"); return err }(), graveler.ErrTagNotFound)
			if _, err := e.m.GetBranch(e.ctx, r, "dev"); err != nil {
				t.Fatalf("branch dev: %v", err)
			}
		})
	})
}

// TestInterleaveTagDelete: DeleteTag's DeleteIf. Racing: the tag is
// deleted and created again; the new tag survives the older delete.
func TestInterleaveTagDelete(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *ienv) {
		for _, m := range kvtest.Modes {
			t.Run(m.String(), func(t *testing.T) {
				e := newEnv(t)
				r, main, part := e.repo()
				c2 := e.commit(r, "two", main.CommitID)
				if err := e.m.CreateTag(e.ctx, r, "v1", main.CommitID); err != nil {
					t.Fatal(err)
				}
				err := e.interleave(m, kvtest.OpOn(part, keys.Tag("v1"), "delete", "deleteif"),
					func(ctx context.Context) error { return e.m.DeleteTag(ctx, r, "v1") },
					func() {
						if err := e.m.DeleteTag(e.ctx, r, "v1"); err != nil {
							t.Fatal(err)
						}
						if err := e.m.CreateTag(e.ctx, r, "v1", c2); err != nil {
							t.Fatal(err)
						}
					})
				got, gerr := e.m.GetTag(e.ctx, r, "v1")
				switch m {
				case kvtest.Race:
					if err != nil {
						t.Fatal(err)
					}
					if gerr != nil || got != c2 {
						t.Fatalf("re-created tag after the older delete: %s, %v", got, gerr)
					}
				case kvtest.CancelBefore:
					wantFailed(t, m, err)
					if gerr != nil || got != main.CommitID {
						t.Fatalf("tag after a delete that never reached the store: %s, %v", got, gerr)
					}
				case kvtest.CancelAfter:
					wantFailed(t, m, err)
					wantErr(t, gerr, graveler.ErrTagNotFound)
				}
			})
		}
	})
}

// TestRepositoryStates: seed 003's answers. Deleting (a delete in
// progress, held after its mark): ErrRepositoryDeleting, not listed, and
// a create of the name succeeds at once. Initial within the timeout: not
// found. Initial past it: retired, not found.
func TestRepositoryStates(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *ienv) {
		e := newEnv(t)
		e.createRepo("other")
		old := e.newLiveRepo("going")
		pt := e.ps.Pause(kvtest.After, kvtest.OpOn(keys.Graveler(), keys.Repository("going"), "setif"))
		done := make(chan error, 1)
		go func() { done <- e.m.DeleteRepository(e.ctx, "going") }()
		pt.Wait(t, holdTimeout)
		_, err := e.m.GetRepository(e.ctx, "going")
		wantErr(t, err, graveler.ErrRepositoryDeleting)
		if errors.Is(err, graveler.ErrNotFound) {
			t.Fatalf("deleting also reads as not found: %v", err)
		}
		names := func() []graveler.RepositoryID {
			var out []graveler.RepositoryID
			for _, r := range collect(t, e.m.ListRepositories(e.ctx, graveler.ListOptions{})) {
				out = append(out, r.RepositoryID)
			}
			return out
		}
		if got := names(); !slices.Equal(got, []graveler.RepositoryID{"other"}) {
			t.Fatalf("listed %v while going is being deleted", got)
		}
		fresh := e.newLiveRepo("going")
		pt.Release()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		e.wantQueued("going", old.rec.UniqueID, true)
		e.checkIntact(fresh)

		// Initial: not found while young, retired once past the timeout.
		uid := e.crashedCreate("young")
		_, err = e.m.GetRepository(e.ctx, "young")
		wantErr(t, err, graveler.ErrRepositoryNotFound)
		if rec, ok := e.rawRepository("young"); !ok || rec.State != graveler.RepositoryStateInitial {
			t.Fatalf("young initial record: %+v, %v", rec, ok)
		}
		e.clock.Advance(e.cfg.RepositoryCreationTimeout)
		_, err = e.m.GetRepository(e.ctx, "young")
		wantErr(t, err, graveler.ErrRepositoryNotFound)
		if _, ok := e.rawRepository("young"); ok {
			t.Fatal("expired initial record not retired")
		}
		e.wantQueued("young", uid, true)
		if got := names(); !slices.Equal(got, []graveler.RepositoryID{"going", "other"}) {
			t.Fatalf("listed %v", got)
		}
	})
}
