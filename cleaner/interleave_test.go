package cleaner_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"graveler/cleaner"
	"graveler/graveler"
	"graveler/graveler/gravelertest"
	"graveler/graveler/ref"
	"graveler/keys"
	"graveler/kv"
	"graveler/kv/kvtest"
)

// Interleaving tests of the cleaner's compare-and-swap paths: retiring a
// repository record through ref, and removing a work item (a stale one, a
// reclaimed repository's, a reclaimed token's). Each is held
// (kvtest.PauseStore) while the operation that matters for it runs, and
// separately while its run's context ends before or after the store
// applied it. Each runs on memory and on etcd.

const holdTimeout = 30 * time.Second

// creationTimeout is the creation timeout of the cleaner and the clients.
const creationTimeout = time.Minute

// cenv: clients (a ref manager) and the cleaner on one PauseStore (behind
// kvtest.LateAckStore), sharing a clock.
type cenv struct {
	t      *testing.T
	ctx    context.Context
	inner  kv.Store
	ps     *kvtest.PauseStore
	lister cleaner.PartitionLister
	clock  *gravelertest.Clock
	m      *ref.Manager
}

func newCEnv(t *testing.T, inner kv.Store, lister cleaner.PartitionLister) *cenv {
	e := &cenv{t: t, ctx: t.Context(), inner: inner, ps: kvtest.NewPauseStore(inner), lister: lister,
		clock: gravelertest.NewClock(time.Now())}
	e.m = ref.New(kvtest.LateAckStore{Store: e.ps}, ref.Config{RepositoryCreationTimeout: creationTimeout, Now: e.clock.Now})
	return e
}

func forEachStore(t *testing.T, fn func(t *testing.T, newEnv func(t *testing.T) *cenv)) {
	t.Run("memory", func(t *testing.T) {
		fn(t, func(t *testing.T) *cenv {
			mem := kv.NewMemoryStore()
			t.Cleanup(func() { _ = mem.Close() })
			return newCEnv(t, mem, cleaner.NewMemoryLister(mem))
		})
	})
	t.Run("etcd", func(t *testing.T) {
		fn(t, func(t *testing.T) *cenv {
			s, _, lister := newEtcd(t)
			return newCEnv(t, s, lister)
		})
	})
}

// cleanerWith returns a cleaner on the pause store at e's clock.
func (e *cenv) cleanerWith(sweep bool) *cleaner.Cleaner {
	return cleaner.New(kvtest.LateAckStore{Store: e.ps}, cleaner.Config{RepositoryCreationTimeout: creationTimeout, Now: e.clock.Now,
		Sweep: sweep, SweepGrace: -1, Lister: e.lister})
}

// pass runs one cleaner pass that must succeed.
func (e *cenv) pass(sweep bool) cleaner.Summary {
	e.t.Helper()
	sum, err := e.cleanerWith(sweep).RunOnce(e.ctx)
	if err != nil || sum.Errors != 0 {
		e.t.Fatalf("cleaner pass: %+v, %v", sum, err)
	}
	return sum
}

// interleave runs one cleaner pass (sweep off, so only the work list
// reclaims) with the operation match selects held, as m says; in race
// mode racer runs while it is held. It returns the pass's summary and error.
func (e *cenv) interleave(m kvtest.Mode, match func(kvtest.Op) bool, racer func()) (cleaner.Summary, error) {
	e.t.Helper()
	var sum cleaner.Summary
	err := kvtest.Interleave(e.t, e.ctx, e.ps, m, match, func(ctx context.Context) error {
		var err error
		sum, err = e.cleanerWith(false).RunOnce(ctx)
		return err
	}, racer)
	return sum, err
}

// wantStopped asserts that a pass whose caller gave up says so.
func wantStopped(t *testing.T, sum cleaner.Summary, err error) {
	t.Helper()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("pass whose context ended: %+v, %v", sum, err)
	}
}

func (e *cenv) present(part, key []byte) bool {
	e.t.Helper()
	_, _, err := e.inner.Get(e.ctx, part, key)
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		e.t.Fatal(err)
	}
	return err == nil
}

func (e *cenv) partitionEmpty(part []byte) bool {
	e.t.Helper()
	for _, err := range e.inner.Scan(e.ctx, part, kv.ScanOptions{Limit: 1}) {
		if err != nil {
			e.t.Fatal(err)
		}
		return false
	}
	return true
}

func (e *cenv) set(part, key []byte) {
	e.t.Helper()
	if err := e.inner.Set(e.ctx, part, key, []byte("v")); err != nil {
		e.t.Fatal(err)
	}
}

func (e *cenv) wantItem(key []byte, want bool) {
	e.t.Helper()
	if got := e.present(keys.Deleted(), key); got != want {
		e.t.Fatalf("work item %s present: %v, want %v", key, got, want)
	}
}

// wantItemRemovalStopped asserts that a pass whose caller gave up while
// the removal of item was held (mode m) says so, and that the item is
// still queued if the removal was held before the store, gone if after.
func (e *cenv) wantItemRemovalStopped(m kvtest.Mode, item []byte, sum cleaner.Summary, err error) {
	e.t.Helper()
	wantStopped(e.t, sum, err)
	e.wantItem(item, m == kvtest.CancelBefore)
}

// wantReclaimed runs a pass (sweep off) and asserts that it reclaims part,
// which what names, from the work list and removes item.
func (e *cenv) wantReclaimed(what string, part, item []byte) {
	e.t.Helper()
	e.pass(false)
	if !e.partitionEmpty(part) {
		e.t.Fatalf("%s was not reclaimed from the work list", what)
	}
	e.wantItem(item, false)
}

// live is a repository with a second branch holding a staged entry.
type live struct {
	rec *graveler.RepositoryRecord
	dev *graveler.Branch
}

func (e *cenv) newLive(id graveler.RepositoryID) live {
	e.t.Helper()
	rec, err := e.m.CreateRepository(e.ctx, id, repoParams(), initialCommit())
	if err != nil {
		e.t.Fatal(err)
	}
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
	e.set(keys.StagingPartition(string(dev.StagingToken)), keys.Entry([]byte("acked")))
	return live{rec: rec, dev: dev}
}

// checkIntact asserts that l is its name's live incarnation, not queued,
// with its branch and acknowledged entry.
func (e *cenv) checkIntact(l live) {
	e.t.Helper()
	got, err := e.m.GetRepository(e.ctx, l.rec.RepositoryID)
	if err != nil {
		e.t.Fatalf("%s: %v", l.rec.RepositoryID, err)
	}
	if got.UniqueID != l.rec.UniqueID {
		e.t.Fatalf("%s: incarnation %s, want %s", l.rec.RepositoryID, got.UniqueID, l.rec.UniqueID)
	}
	e.wantItem(keys.DeletedRepository(string(l.rec.RepositoryID), string(l.rec.UniqueID)), false)
	dev, err := e.m.GetBranch(e.ctx, got, "dev")
	if err != nil || dev.StagingToken != l.dev.StagingToken {
		e.t.Fatalf("%s: branch dev %+v, %v", l.rec.RepositoryID, dev, err)
	}
	if !e.present(keys.StagingPartition(string(dev.StagingToken)), keys.Entry([]byte("acked"))) {
		e.t.Fatalf("%s: acknowledged entry lost", l.rec.RepositoryID)
	}
}

// crashedCreate leaves an initial record of id and returns its incarnation.
func (e *cenv) crashedCreate(id graveler.RepositoryID) graveler.UniqueID {
	e.t.Helper()
	fs := kvtest.NewFaultStore(e.inner)
	fs.FailAt(3, kvtest.FaultCrash) // Get, SetIf initial, then the claim's read fails
	if _, err := ref.New(fs, ref.Config{Now: e.clock.Now}).CreateRepository(e.ctx, id, repoParams(), initialCommit()); err == nil {
		e.t.Fatal("crashed create succeeded")
	}
	data, _, err := e.inner.Get(e.ctx, keys.Graveler(), keys.Repository(string(id)))
	if err != nil {
		e.t.Fatal(err)
	}
	rec, err := ref.DecodeRepository(data)
	if err != nil {
		e.t.Fatal(err)
	}
	return rec.UniqueID
}

// TestInterleaveCleanerRetire: the cleaner retiring an initial record past
// the creation timeout (ref.RetireRepository: SetIf deleting, DeleteIf).
// Racing: a create of the same name, which takes over the expired record
// and is written to. The new incarnation is never touched.
func TestInterleaveCleanerRetire(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *cenv) {
		for _, step := range []struct {
			name  string
			names []string
		}{
			{"mark", []string{"setif"}},
			{"remove", []string{"delete", "deleteif"}},
		} {
			for _, m := range kvtest.Modes {
				t.Run(step.name+"/"+m.String(), func(t *testing.T) {
					e := newEnv(t)
					dead := e.crashedCreate("stuck")
					deadPart := keys.RepositoryPartition("stuck", string(dead))
					e.clock.Advance(creationTimeout)
					var fresh live
					sum, err := e.interleave(m, kvtest.OpOn(keys.Graveler(), keys.Repository("stuck"), step.names...),
						func() { fresh = e.newLive("stuck") })
					switch m {
					case kvtest.Race:
						if err != nil || sum.Errors != 0 {
							t.Fatalf("pass: %+v, %v", sum, err)
						}
						e.checkIntact(fresh)
					case kvtest.CancelBefore, kvtest.CancelAfter:
						wantStopped(t, sum, err)
						fresh = e.newLive("stuck")
					}
					// Whatever the held pass did, the next one (sweep on, no
					// grace) reclaims the dead incarnation and nothing live.
					e.pass(true)
					e.checkIntact(fresh)
					if !e.partitionEmpty(deadPart) {
						t.Fatal("the expired incarnation's partition was not reclaimed")
					}
					e.wantItem(keys.DeletedRepository("stuck", string(dead)), false)
				})
			}
		}
	})
}

// TestInterleaveCleanerRetireVsActivation: the cleaner marks an expired
// initial record deleting while its create, which ran past the timeout,
// activates it. The activation wins the compare-and-swap; the cleaner
// leaves the now live repository alone and counts no failure.
func TestInterleaveCleanerRetireVsActivation(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *cenv) {
		e := newEnv(t)
		// Hold the create before its activation (the second SetIf of the record).
		n := 0
		activation := e.ps.Pause(kvtest.Before, func(op kvtest.Op) bool {
			if op.Is("setif", keys.Graveler(), keys.Repository("late")) {
				n++
				return n == 2
			}
			return false
		})
		created := make(chan error, 1)
		var rec *graveler.RepositoryRecord
		go func() {
			var err error
			rec, err = e.m.CreateRepository(e.ctx, "late", repoParams(), initialCommit())
			created <- err
		}()
		activation.Wait(t, holdTimeout)
		e.clock.Advance(creationTimeout)
		mark := e.ps.Pause(kvtest.Before, kvtest.OpOn(keys.Graveler(), keys.Repository("late"), "setif"))
		type result struct {
			sum cleaner.Summary
			err error
		}
		cleaned := make(chan result, 1)
		go func() {
			sum, err := e.cleanerWith(true).RunOnce(e.ctx)
			cleaned <- result{sum, err}
		}()
		mark.Wait(t, holdTimeout)
		activation.Release()
		if err := <-created; err != nil {
			t.Fatalf("create that activated first: %v", err)
		}
		mark.Release()
		r := <-cleaned
		if r.err != nil || r.sum.Errors != 0 || r.sum.RepositoriesRetired != 0 {
			t.Fatalf("pass that lost to the activation: %+v, %v", r.sum, r.err)
		}
		got, err := e.m.GetRepository(e.ctx, "late")
		if err != nil || got.UniqueID != rec.UniqueID {
			t.Fatalf("activated repository: %+v, %v", got, err)
		}
		e.wantItem(keys.DeletedRepository("late", string(rec.UniqueID)), false)
		main, err := e.m.GetBranch(e.ctx, got, "main")
		if err != nil {
			t.Fatal(err)
		}
		if e.partitionEmpty(keys.RepositoryPartition("late", string(rec.UniqueID))) || main.CommitID == "" {
			t.Fatal("the activated repository lost its refs")
		}
	})
}

// TestInterleaveCleanerStaleItem: a work item naming a repository that is
// active (its create finished past the timeout after a create of the name
// queued it) is removed alone, at the version read. Racing: the repository
// is deleted, which queues the same item again; that item is real work
// and must survive for the next pass, which reclaims the incarnation
// without the sweep.
func TestInterleaveCleanerStaleItem(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *cenv) {
		for _, m := range kvtest.Modes {
			t.Run(m.String(), func(t *testing.T) {
				e := newEnv(t)
				l := e.newLive("busy")
				item := keys.DeletedRepository("busy", string(l.rec.UniqueID))
				e.set(keys.Deleted(), item) // stale: the incarnation is active
				sum, err := e.interleave(m, kvtest.OpOn(keys.Deleted(), item, "delete", "deleteif"), func() {
					if err := e.m.DeleteRepository(e.ctx, "busy"); err != nil {
						t.Fatal(err)
					}
				})
				switch m {
				case kvtest.Race:
					if err != nil || sum.Errors != 0 {
						t.Fatalf("pass: %+v, %v", sum, err)
					}
					e.wantItem(item, true)
					e.pass(false)
					if !e.partitionEmpty(keys.RepositoryPartition("busy", string(l.rec.UniqueID))) ||
						e.present(keys.StagingPartition(string(l.dev.StagingToken)), keys.Entry([]byte("acked"))) {
						t.Fatal("the deleted incarnation was not reclaimed from the work list")
					}
					e.wantItem(item, false)
				case kvtest.CancelBefore:
					wantStopped(t, sum, err)
					e.wantItem(item, true)
					e.pass(true)
					e.checkIntact(l)
				case kvtest.CancelAfter:
					wantStopped(t, sum, err)
					e.checkIntact(l)
					e.pass(true)
					e.checkIntact(l)
				}
			})
		}
	})
}

// TestInterleaveCleanerRepositoryItem: the work item of a reclaimed
// repository incarnation is removed at the version read. Racing: a create
// that ran past the timeout (retired by this very pass) writes its branch
// into the partition after the drop, finds its record gone and queues the
// incarnation again; the item survives and the next pass reclaims the
// late branch.
func TestInterleaveCleanerRepositoryItem(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *cenv) {
		for _, m := range kvtest.Modes {
			t.Run(m.String(), func(t *testing.T) {
				e := newEnv(t)
				var (
					item    []byte
					part    []byte
					created chan error
					branch  *kvtest.PausePoint
				)
				if m == kvtest.Race {
					// A create held before it writes its default branch.
					branch = e.ps.Pause(kvtest.Before, kvtest.OpOn(nil, keys.Branch("main"), "setif"))
					defer branch.Release()
					created = make(chan error, 1)
					go func() {
						_, err := e.m.CreateRepository(e.ctx, "slow", repoParams(), initialCommit())
						created <- err
					}()
					op := branch.Wait(t, holdTimeout)
					part = op.Partition
					_, uid, err := keys.ParseRepositoryPartition(part)
					if err != nil {
						t.Fatal(err)
					}
					item = keys.DeletedRepository("slow", uid)
					e.clock.Advance(creationTimeout)
				} else {
					l := e.newLive("slow")
					if err := e.m.DeleteRepository(e.ctx, "slow"); err != nil {
						t.Fatal(err)
					}
					part = keys.RepositoryPartition("slow", string(l.rec.UniqueID))
					item = keys.DeletedRepository("slow", string(l.rec.UniqueID))
				}
				sum, err := e.interleave(m, kvtest.OpOn(keys.Deleted(), item, "delete", "deleteif"), func() {
					branch.Release()
					if err := <-created; !errors.Is(err, ref.ErrRepositoryCreationRaced) {
						t.Fatalf("create retired under it: %v", err)
					}
				})
				switch m {
				case kvtest.Race:
					if err != nil || sum.Errors != 0 || sum.RepositoriesRetired != 1 {
						t.Fatalf("pass: %+v, %v", sum, err)
					}
					// Queued again after the drop, by the create: kept.
					e.wantItem(item, true)
					if e.partitionEmpty(part) {
						t.Fatal("the late branch was not written")
					}
				case kvtest.CancelBefore, kvtest.CancelAfter:
					e.wantItemRemovalStopped(m, item, sum, err)
				}
				e.wantReclaimed("the incarnation's partition", part, item)
			})
		}
	})
}

// TestInterleaveCleanerTokenItem: the work item of a reclaimed staging
// token is removed at the version read. Racing: a late write lands in the
// dropped token and the token is queued again (a branch delete that read
// a version still holding it); the item survives and the next pass
// reclaims the late write.
func TestInterleaveCleanerTokenItem(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *cenv) {
		for _, m := range kvtest.Modes {
			t.Run(m.String(), func(t *testing.T) {
				e := newEnv(t)
				l := e.newLive("repo")
				tok := graveler.StagingToken("repo." + ref.NewID())
				part := keys.StagingPartition(string(tok))
				e.set(part, keys.Entry([]byte("consumed")))
				if err := e.m.DeleteStagingTokens(e.ctx, []graveler.StagingToken{tok}); err != nil {
					t.Fatal(err)
				}
				item := keys.DeletedToken(string(tok))
				sum, err := e.interleave(m, kvtest.OpOn(keys.Deleted(), item, "delete", "deleteif"), func() {
					e.set(part, keys.Entry([]byte("late")))
					if err := e.m.DeleteStagingTokens(e.ctx, []graveler.StagingToken{tok}); err != nil {
						t.Fatal(err)
					}
				})
				switch m {
				case kvtest.Race:
					if err != nil || sum.Errors != 0 {
						t.Fatalf("pass: %+v, %v", sum, err)
					}
					e.wantItem(item, true)
				case kvtest.CancelBefore, kvtest.CancelAfter:
					e.wantItemRemovalStopped(m, item, sum, err)
				}
				e.wantReclaimed("the token's partition", part, item)
				e.checkIntact(l)
			})
		}
	})
}

// TestInterleaveDrainRetireRacesActivation: the cleaner drains a queued
// incarnation whose record is an expired initial one, and retires it
// first; the create of that incarnation activates between the retire's
// read and its mark, so the retire leaves it alone. The pass must then
// keep the repository (its partition, its claim and its namespace), not
// go on as if it had retired it.
func TestInterleaveDrainRetireRacesActivation(t *testing.T) {
	store, _, _ := newEtcd(t)
	b := fileBackend(t)
	w := newGCWorld(t, store, b, gcGrace)
	ns := b.ns("repo-r")
	ctx := w.ctx
	hold := 10 * time.Second

	// A: the create of r, held before its default branch is written.
	psA := kvtest.NewPauseStore(store)
	gA := gravelertest.New(t, psA, gravelertest.Options{Blobs: b.blobs, Committed: w.cfg})
	branchA := psA.Pause(kvtest.Before, kvtest.OpOn(nil, keys.Branch("main"), "setif"))
	doneA := make(chan error, 1)
	go func() { _, err := gA.CreateRepository(ctx, "repo-r", ns, "main"); doneA <- err }()
	select {
	case <-branchA.Reached():
	case err := <-doneA:
		t.Fatalf("create A ended: %v", err)
	case <-time.After(hold):
		t.Fatal("timeout")
	}
	data, _, err := store.Get(ctx, keys.Graveler(), keys.Repository("repo-r"))
	if err != nil {
		t.Fatal(err)
	}
	recA, err := ref.DecodeRepository(data)
	if err != nil {
		t.Fatal(err)
	}

	// B: another create of r on a replica whose clock finds A expired; it
	// queues A's incarnation (claimName's first write), then fails.
	psB := kvtest.NewPauseStore(store)
	gB := gravelertest.New(t, psB, gravelertest.Options{Blobs: b.blobs, Committed: w.cfg,
		Ref: ref.Config{Now: func() time.Time { return time.Now().Add(3 * time.Minute) }}})
	setB := psB.Pause(kvtest.Before, kvtest.OpOn(keys.Graveler(), keys.Repository("repo-r"), "setif"))
	ctxB, cancelB := context.WithCancel(ctx)
	doneB := make(chan error, 1)
	go func() { _, err := gB.CreateRepository(ctxB, "repo-r", b.ns("repo-rb"), "main"); doneB <- err }()
	setB.Wait(t, hold)
	cancelB()
	setB.Release()
	if err := <-doneB; err == nil {
		t.Fatal("create B, whose caller gave up, succeeded")
	}
	if _, _, err := store.Get(ctx, keys.Deleted(), keys.DeletedRepository("repo-r", string(recA.UniqueID))); err != nil {
		t.Fatalf("A's incarnation not queued: %v", err)
	}

	// The cleaner: its records step runs while A is within the creation
	// timeout by its clock; by the time it drains, A has expired.
	clock := gravelertest.NewClock(time.Now())
	ps := kvtest.NewPauseStore(store)
	queue := ps.Pause(kvtest.Before, kvtest.OpOn(keys.Deleted(), nil, "scan"))
	mark := ps.Pause(kvtest.Before, kvtest.OpOn(keys.Graveler(), keys.Repository("repo-r"), "setif"))
	c := cleaner.New(ps, cleaner.Config{Blobs: b.blobs, Now: clock.Now, Lister: cleaner.NewMemoryLister(nil)})
	doneC := make(chan cleaner.Summary, 1)
	go func() {
		sum, err := c.RunOnce(ctx)
		if err != nil {
			t.Error(err)
		}
		doneC <- sum
	}()
	queue.Wait(t, hold)
	clock.Advance(3 * time.Minute)
	queue.Release()
	mark.Wait(t, hold) // drainRepo's RetireRepository, between its read and its mark
	branchA.Release()  // A writes its branch and activates
	if err := <-doneA; err != nil {
		t.Fatalf("create A: %v", err)
	}
	mark.Release()
	if sum := <-doneC; sum.Skipped == 0 {
		t.Errorf("the pass skipped nothing: %+v", sum)
	}

	rec, err := w.g.GetRepository(ctx, "repo-r")
	if err != nil {
		t.Fatalf("r after the pass: %v", err)
	}
	if rec.UniqueID != recA.UniqueID {
		t.Fatal("r is another incarnation")
	}
	if _, err := w.g.GetBranch(ctx, "repo-r", "main"); err != nil {
		t.Errorf("active repository r (acknowledged create) lost its default branch: %v", err)
	}
	norm, _ := graveler.NormalizeStorageNamespace(ns)
	if _, _, err := store.Get(ctx, keys.Graveler(), keys.NamespaceClaim(string(norm))); errors.Is(err, kv.ErrNotFound) {
		t.Errorf("active repository r no longer holds its namespace claim")
	}
	if len(w.objects(ns)) == 0 {
		t.Errorf("namespace of active repository r emptied")
	}
}

// TestInterleaveClaimLandsAfterRetire: a bare create on a namespace that
// holds blobs copied in for a restore stalls before its claim lands; its
// record expires and the cleaner retires and reclaims the incarnation (no
// claim yet). The claim then lands: the create must release it and fail,
// so that no later pass empties a namespace no repository wrote to.
func TestInterleaveClaimLandsAfterRetire(t *testing.T) {
	store, _, _ := newEtcd(t)
	ps := kvtest.NewPauseStore(store)
	b := fileBackend(t)
	w := newGCWorld(t, store, b, gcGrace)
	dst := b.ns("restored")
	copied := w.plant(dst, 30)
	b.age(t, dst, copied, 10*time.Hour)
	before := len(w.objects(dst))

	g := gravelertest.New(t, ps, gravelertest.Options{Blobs: b.blobs, Committed: w.cfg})
	norm, _ := graveler.NormalizeStorageNamespace(dst)
	claimed := ps.Pause(kvtest.Before, kvtest.OpOn(keys.Graveler(), keys.NamespaceClaim(string(norm)), "setif"))
	done := make(chan error, 1)
	go func() {
		_, err := g.CreateBareRepository(w.ctx, "restored", dst, "main")
		done <- err
	}()
	claimed.Wait(t, 10*time.Second)

	cfg := cleaner.Config{Blobs: b.blobs, Now: later}
	sum, err := cleaner.New(store, cfg).RunOnce(w.ctx)
	if err != nil || sum.RepositoriesRetired != 1 {
		t.Fatalf("pass while the create stalls: %v, %+v; want the expired record retired", err, sum)
	}
	claimed.Release()
	if err := <-done; !errors.Is(err, ref.ErrRepositoryCreationRaced) {
		t.Fatalf("create whose record was retired: %v, want ErrRepositoryCreationRaced", err)
	}
	if _, _, err := store.Get(w.ctx, keys.Graveler(), keys.NamespaceClaim(string(norm))); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("claim of the retired create: %v, want it released", err)
	}
	if _, err := cleaner.New(store, cfg).RunOnce(w.ctx); err != nil {
		t.Fatal(err)
	}
	if after := len(w.objects(dst)); after < before {
		t.Fatalf("namespace held %d objects before the failed create, %d after the cleaner", before, after)
	}
}
