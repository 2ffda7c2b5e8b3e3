package ref_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"graveler/cleaner"
	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/ref"
	"graveler/keys"
	"graveler/kv"
	"graveler/kv/kvtest"
)

// claimOf returns the claim on ns, nil when there is none.
func (e *env) claimOf(ns graveler.StorageNamespace) *ref.NamespaceClaim {
	e.t.Helper()
	norm, err := graveler.NormalizeStorageNamespace(ns)
	if err != nil {
		e.t.Fatal(err)
	}
	key := keys.NamespaceClaim(string(norm))
	data, _, err := e.store.Get(e.ctx, keys.Graveler(), key)
	if errors.Is(err, kv.ErrNotFound) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := ref.DecodeNamespaceClaim(key, data)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// wantClaim asserts that the current incarnation of id holds ns.
func (e *env) wantClaim(ns graveler.StorageNamespace, id graveler.RepositoryID) {
	e.t.Helper()
	rec, ok := e.rawRepository(string(id))
	if !ok {
		e.t.Fatalf("%s: no record", id)
	}
	c := e.claimOf(ns)
	if c == nil || c.Repository != id || c.UniqueID != rec.UniqueID || c.Namespace != rec.StorageNamespace {
		e.t.Fatalf("claim on %q: %+v, want one of %s incarnation %s", ns, c, id, rec.UniqueID)
	}
}

func (e *env) createOn(id graveler.RepositoryID, ns graveler.StorageNamespace) (*graveler.RepositoryRecord, error) {
	return e.m.CreateRepository(e.ctx, id, graveler.Repository{StorageNamespace: ns, DefaultBranchID: "main"}, initialCommit())
}

func (e *env) mustCreateOn(id graveler.RepositoryID, ns graveler.StorageNamespace) *graveler.RepositoryRecord {
	e.t.Helper()
	r, err := e.createOn(id, ns)
	if err != nil {
		e.t.Fatalf("create %s on %q: %v", id, ns, err)
	}
	return r
}

// wantInUse asserts that err is NAMESPACE_IN_USE held by holder in state.
func wantInUse(t *testing.T, err error, holder graveler.RepositoryID, state string) *graveler.NamespaceInUseError {
	t.Helper()
	wantErr(t, err, graveler.ErrNamespaceInUse)
	wantErr(t, err, graveler.ErrAlreadyExists)
	e, ok := errors.AsType[*graveler.NamespaceInUseError](err)
	if !ok || e.Repository != holder || e.State != state {
		t.Fatalf("in use error %v (%+v), want held by %s, %s", err, e, holder, state)
	}
	return e
}

// wantAbandoned asserts that a create of id that failed left nothing:
// no record, no claim naming it.
func (e *env) wantAbandoned(id graveler.RepositoryID) {
	e.t.Helper()
	if rec, ok := e.rawRepository(string(id)); ok {
		e.t.Fatalf("%s: record left by a failed create: %+v", id, rec)
	}
	for c, err := range e.m.NamespaceClaims(e.ctx) {
		if err != nil {
			e.t.Fatal(err)
		}
		if c.Repository == id {
			e.t.Fatalf("%s: claim left by a failed create: %+v", id, c)
		}
	}
}

func (e *env) cleanerPass(store kv.Store) (cleaner.Summary, error) {
	c := cleaner.New(store, cleaner.Config{RepositoryCreationTimeout: e.cfg.RepositoryCreationTimeout, Now: e.clock.Now})
	return c.RunOnce(e.ctx)
}

func (e *env) mustClean() {
	e.t.Helper()
	if sum, err := e.cleanerPass(e.store); err != nil || sum.Errors != 0 {
		e.t.Fatalf("cleaner pass: %+v, %v", sum, err)
	}
}

// testNamespaceClaims: one live repository per storage namespace, from
// its create until the cleaner reclaims it after its delete.
func testNamespaceClaims(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore(t), nil)
	ctx := e.ctx

	// Held by a live repository: a second create fails and leaves nothing.
	a := e.mustCreateOn("alpha", "s3://bucket/a/data")
	e.wantClaim("s3://bucket/a/data", "alpha")
	_, err := e.createOn("beta", "s3://bucket/a/data")
	ie := wantInUse(t, err, "alpha", "active")
	if ie.Namespace != "s3://bucket/a/data" || ie.UniqueID != a.UniqueID {
		t.Fatalf("in use error %+v", ie)
	}
	e.wantAbandoned("beta")
	_, err = e.m.CreateBareRepository(ctx, "beta", graveler.Repository{StorageNamespace: "s3://bucket/a/data", DefaultBranchID: "main"})
	wantInUse(t, err, "alpha", "active")
	e.wantAbandoned("beta")

	// Other spellings of one location collide.
	for _, ns := range []graveler.StorageNamespace{"s3://BUCKET/a/data/", "s3://bucket//a/data", "s3://bucket/a/%64ata"} {
		_, err := e.createOn("beta", ns)
		wantInUse(t, err, "alpha", "active")
	}
	e.mustCreateOn("files", "file:///srv/lake/x")
	for _, ns := range []graveler.StorageNamespace{"file://localhost/srv/lake/x", "file:///srv//lake/./x/", "file:///srv/lake/y/../x"} {
		_, err := e.createOn("beta", ns)
		wantInUse(t, err, "files", "active")
	}
	e.mustCreateOn("memory", "mem://Pool/x")
	_, err = e.createOn("beta", "mem://pool/x/")
	wantInUse(t, err, "memory", "active")

	// Nested namespaces collide both ways; siblings do not.
	_, err = e.createOn("beta", "s3://bucket/a/data/inner")
	if ie := wantInUse(t, err, "alpha", "active"); ie.Held != "s3://bucket/a/data" {
		t.Fatalf("held namespace %q", ie.Held)
	}
	_, err = e.createOn("beta", "s3://bucket")
	wantInUse(t, err, "alpha", "active")
	_, err = e.createOn("beta", "file:///srv")
	wantInUse(t, err, "files", "active")
	e.mustCreateOn("sibling", "s3://bucket/a/database")
	e.mustCreateOn("memsub", "mem://pool/x/sub") // mem:// names do not nest
	e.wantAbandoned("beta")

	// Malformed namespaces are invalid arguments and claim nothing.
	for _, ns := range []graveler.StorageNamespace{"s3:///nobucket", "s3://b:9000/p", "s3://b/a b", "s3://b/p?x=1",
		"file://host/dir", "file:///", "file:///x#frag", "mem://", "mem://u@x", "ftp://x"} {
		_, err := e.createOn("beta", ns)
		wantErr(t, err, graveler.ErrInvalidStorageNamespace)
	}
	e.wantAbandoned("beta")

	// A failed namespace check abandons the create; the namespace is
	// free again at once.
	errCheck := errors.New("namespace check failed")
	_, err = e.m.CreateRepository(ctx, "beta", graveler.Repository{StorageNamespace: "s3://bucket/b", DefaultBranchID: "main"}, initialCommit(),
		graveler.WithNamespaceCheck(func(ctx context.Context, r *graveler.RepositoryRecord) error {
			// Run with the record initial and the namespace claimed.
			if rec, ok := e.rawRepository("beta"); !ok || rec.State != graveler.RepositoryStateInitial || rec.UniqueID != r.UniqueID {
				t.Errorf("record during the check: %+v", rec)
			}
			if c := e.claimOf("s3://bucket/b"); c == nil || c.UniqueID != r.UniqueID {
				t.Errorf("claim during the check: %+v", c)
			}
			return errCheck
		}))
	wantErr(t, err, errCheck)
	e.wantAbandoned("beta")
	e.mustCreateOn("gamma", "s3://bucket/b")

	// A deleted repository holds its namespace until the cleaner has
	// reclaimed it.
	if err := e.m.DeleteRepository(ctx, "alpha"); err != nil {
		t.Fatal(err)
	}
	_, err = e.createOn("beta", "s3://bucket/a/data")
	wantInUse(t, err, "alpha", "deleted, until the cleaner reclaims it")
	e.wantAbandoned("beta")
	e.mustClean()
	if c := e.claimOf("s3://bucket/a/data"); c != nil {
		t.Fatalf("claim left after the cleaner reclaimed its repository: %+v", c)
	}
	e.mustCreateOn("beta", "s3://bucket/a/data")
	e.wantClaim("s3://bucket/a/data", "beta")

	// A stale claim (no record, no work item) is taken over; so is the
	// claim of a create that died past its deadline.
	if err := e.m.DeleteRepository(ctx, "beta"); err != nil {
		t.Fatal(err)
	}
	beta := e.claimOf("s3://bucket/a/data")
	if err := e.store.Delete(ctx, keys.Deleted(), keys.DeletedRepository("beta", string(beta.UniqueID))); err != nil {
		t.Fatal(err)
	}
	e.mustCreateOn("delta", "s3://bucket/a/data")
	e.wantClaim("s3://bucket/a/data", "delta")

	fs := &faultStore{Store: e.store}
	fs.arm(faultCrash, 5) // the record and the claim written, then a crash
	if _, err := e.managerOn(fs).CreateRepository(ctx, "dead", graveler.Repository{StorageNamespace: "s3://bucket/c", DefaultBranchID: "main"}, initialCommit()); err == nil {
		t.Fatal("crashed create succeeded")
	}
	e.wantClaim("s3://bucket/c", "dead")
	_, err = e.createOn("epsilon", "s3://bucket/c")
	wantInUse(t, err, "dead", "being created")
	e.clock.Advance(e.cfg.RepositoryCreationTimeout)
	e.mustCreateOn("epsilon", "s3://bucket/c")
	e.wantClaim("s3://bucket/c", "epsilon")
	e.checkInvisible("dead")
}

// TestNamespaceReleaseFaults fails each kv operation of a cleaner pass
// that reclaims a deleted repository, in every fault mode, and checks that
// a live repository's claim survives, and that the deleted repository's
// namespace is free once a pass completes.
func TestNamespaceReleaseFaults(t *testing.T) {
	stores := []struct {
		name string
		new  func(t *testing.T) func() kv.Store
	}{
		{"memory", func(t *testing.T) func() kv.Store { return func() kv.Store { return memoryStore(t) } }},
		{"etcd", func(t *testing.T) func() kv.Store {
			srv := etcdkvtest.NewServer(t)
			n := 0
			return func() kv.Store {
				n++
				return etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{Prefix: fmt.Sprintf("/release-faults-%d", n)})
			}
		}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			newStore := st.new(t)
			// setup leaves a live repository and a deleted one.
			setup := func() (*env, *kvtest.FaultStore, string) {
				e := newEnv(t, newStore(), nil)
				e.mustCreateOn("live", "s3://bucket/live")
				gone := e.mustCreateOn("gone", "s3://bucket/gone")
				if err := e.m.DeleteRepository(e.ctx, "gone"); err != nil {
					t.Fatal(err)
				}
				return e, kvtest.NewFaultStore(e.store), string(gone.UniqueID)
			}
			e, fs, _ := setup()
			if sum, err := e.cleanerPass(fs); err != nil || sum.Errors != 0 || sum.RepositoriesReclaimed != 1 {
				t.Fatalf("pass: %+v, %v", sum, err)
			}
			total := fs.Ops()
			t.Logf("a cleaner pass reclaiming one repository: %d kv operations", total)
			for _, mode := range []kvtest.FaultMode{kvtest.FaultError, kvtest.FaultAmbiguousApplied, kvtest.FaultAmbiguousNotApplied, kvtest.FaultCrash} {
				for n := int64(1); n <= total; n++ {
					e, fs, uid := setup()
					fs.FailAt(n, mode)
					_, _ = e.cleanerPass(fs)
					e.wantClaim("s3://bucket/live", "live")
					gone := e.claimOf("s3://bucket/gone")
					queued := e.queued("gone", uid)
					if gone != nil && !queued {
						// A claim no record and no work item names is stale:
						// the next create takes it over. The pass never
						// leaves one behind.
						t.Fatalf("%s at op %d: claim %+v left without its work item", mode, n, gone)
					}
					// The next pass finishes the job.
					e.mustClean()
					if c := e.claimOf("s3://bucket/gone"); c != nil || e.queued("gone", uid) {
						t.Fatalf("%s at op %d: after a complete pass: claim %+v, queued %v", mode, n, c, e.queued("gone", uid))
					}
					e.mustCreateOn("again", "s3://bucket/gone")
					e.wantClaim("s3://bucket/live", "live")
				}
			}
		})
	}
}

// TestInterleaveNamespaceClaim: claimNamespace's SetIf on
// graveler/namespaces/<ns>, held between its read and its write. Racing:
// another create on the namespace (absent before), a create taking over
// the same stale claim, and a create of a namespace nested in it. Each
// also with the caller giving up before and after the write.
func TestInterleaveNamespaceClaim(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *ienv) {
		for _, kind := range []string{"fresh", "stale", "nested"} {
			for _, m := range kvtest.Modes {
				t.Run(kind+"/"+m.String(), func(t *testing.T) {
					e := newEnv(t)
					const ns = graveler.StorageNamespace("s3://bucket/shared")
					rival := ns
					if kind == "nested" {
						rival = ns + "/inner"
					}
					if kind == "stale" {
						// A deleted repository whose work item is gone: its
						// claim is stale, and both creates take it over at
						// the version they read.
						e.mustCreateOn("old", ns)
						uid := e.uidOf("old")
						if err := e.m.DeleteRepository(e.ctx, "old"); err != nil {
							t.Fatal(err)
						}
						if err := e.inner.Delete(e.ctx, keys.Deleted(), keys.DeletedRepository("old", string(uid))); err != nil {
							t.Fatal(err)
						}
					}
					norm, _ := graveler.NormalizeStorageNamespace(ns)
					err := e.interleave(m, kvtest.OpOn(keys.Graveler(), keys.NamespaceClaim(string(norm)), "setif"),
						func(ctx context.Context) error {
							_, err := e.m.CreateRepository(ctx, "mine", graveler.Repository{StorageNamespace: ns, DefaultBranchID: "main"}, initialCommit())
							return err
						},
						func() { e.mustCreateOn("rival", rival) })
					switch m {
					case kvtest.Race:
						// Exactly one wins: the rival, which wrote first.
						wantInUse(t, err, "rival", "active")
						e.wantAbandoned("mine")
						e.wantClaim(rival, "rival")
						e.checkUsable("rival")
					default:
						// Before: never written. After: written, then
						// released by the abandoned create. Either way the
						// namespace is free at once.
						wantFailed(t, m, err)
						e.wantAbandoned("mine")
						e.mustCreateOn("next", ns)
						e.wantClaim(ns, "next")
						_, err := e.createOn("rival", rival)
						wantInUse(t, err, "next", "active")
					}
					e.runCleaner(true)
					e.checkInvisible("mine")
				})
			}
		}
	})
}

// TestInterleaveNamespaceRelease: the cleaner's two writes to the claim of
// a deleted repository (ReclaimNamespace's SetIf reclaiming, then
// ReleaseNamespace's DeleteIf). Racing: a create on the namespace, which
// must find it held until the release. Also with the pass given up before
// and after each write: the next pass completes the release.
func TestInterleaveNamespaceRelease(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *ienv) {
		for _, op := range []string{"setif", "deleteif"} {
			for _, m := range kvtest.Modes {
				t.Run(op+"/"+m.String(), func(t *testing.T) {
					e := newEnv(t)
					const ns = graveler.StorageNamespace("file:///lake/gone")
					e.mustCreateOn("gone", ns)
					live := e.newLiveRepo("live")
					if err := e.m.DeleteRepository(e.ctx, "gone"); err != nil {
						t.Fatal(err)
					}
					norm, _ := graveler.NormalizeStorageNamespace(ns)
					c := cleaner.New(kvtest.LateAckStore{Store: e.ps}, cleaner.Config{RepositoryCreationTimeout: e.cfg.RepositoryCreationTimeout, Now: e.clock.Now})
					err := e.interleave(m, kvtest.OpOn(keys.Graveler(), keys.NamespaceClaim(string(norm)), op),
						func(ctx context.Context) error {
							sum, err := c.RunOnce(ctx)
							if err == nil && (sum.Errors != 0 || sum.Incomplete) {
								err = fmt.Errorf("pass: %+v", sum)
							}
							return err
						},
						func() {
							_, err := e.createOn("taker", ns)
							wantInUse(t, err, "gone", "deleted, until the cleaner reclaims it")
						})
					if m == kvtest.Race && err != nil {
						t.Fatal(err)
					}
					if m != kvtest.Race {
						wantFailed(t, m, err)
						e.runCleaner(false)
					}
					if c := e.claimOf(ns); c != nil {
						t.Fatalf("claim left after the cleaner reclaimed its repository: %+v", c)
					}
					e.mustCreateOn("taker", ns)
					e.wantClaim(ns, "taker")
					e.checkSurvivesCleaner(live)
					e.wantClaim(ns, "taker")
				})
			}
		}
		// A create so slow that its record expired and was retired (and
		// queued) before its claim landed: the retirer found no claim to
		// release, so the create, finding its record gone once its claim
		// is written, releases the claim itself and fails. The cleaner
		// then has no namespace to empty: the create never wrote to it.
		t.Run("slow-create", func(t *testing.T) {
			e := newEnv(t)
			const ns = graveler.StorageNamespace("s3://bucket/slow")
			norm, _ := graveler.NormalizeStorageNamespace(ns)
			first := len(e.ids.All())
			claimed := e.ps.Pause(kvtest.Before, kvtest.OpOn(keys.Graveler(), keys.NamespaceClaim(string(norm)), "setif"))
			done := make(chan error, 1)
			go func() {
				_, err := e.m.CreateRepository(e.ctx, "slow", graveler.Repository{StorageNamespace: ns, DefaultBranchID: "main"}, initialCommit())
				done <- err
			}()
			claimed.Wait(t, holdTimeout)
			uid := graveler.UniqueID(e.ids.All()[first])
			e.clock.Advance(e.cfg.RepositoryCreationTimeout)
			_, err := e.m.GetRepository(e.ctx, "slow")
			wantErr(t, err, graveler.ErrRepositoryNotFound)
			e.wantQueued("slow", uid, true)
			claimed.Release()
			wantErr(t, <-done, ref.ErrRepositoryCreationRaced)
			if c := e.claimOf(ns); c != nil {
				t.Fatalf("claim of a create whose record was retired before the claim landed: %+v", c)
			}
			e.mustCreateOn("taker", ns)
			e.runCleaner(false)
			e.wantClaim(ns, "taker")
		})
	})
}

// TestNamespaceClaimFaults fails each kv operation of a create on an
// s3:// namespace (its claim and the check of nested claims included), in
// every fault mode, and checks that the repository is usable and holds
// its namespace, or is invisible and its namespace not held for ever: a
// create of another name takes it (at once, or once a crashed create's
// record has expired). A live repository's claim is never touched.
func TestNamespaceClaimFaults(t *testing.T) {
	stores := []struct {
		name string
		new  func(t *testing.T) func() kv.Store
	}{
		{"memory", func(t *testing.T) func() kv.Store { return func() kv.Store { return memoryStore(t) } }},
		{"etcd", func(t *testing.T) func() kv.Store {
			srv := etcdkvtest.NewServer(t)
			n := 0
			return func() kv.Store {
				n++
				return etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{Prefix: fmt.Sprintf("/claim-faults-%d", n)})
			}
		}},
	}
	const ns = graveler.StorageNamespace("s3://bucket/lake/sales")
	params := graveler.Repository{StorageNamespace: ns, DefaultBranchID: "main"}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			newStore := st.new(t)
			setup := func() (*env, *kvtest.FaultStore) {
				e := newEnv(t, newStore(), nil)
				e.mustCreateOn("live", "s3://bucket/lake/live")
				return e, kvtest.NewFaultStore(e.store)
			}
			e, fs := setup()
			if _, err := e.managerOn(fs).CreateRepository(e.ctx, "sales", params, initialCommit()); err != nil {
				t.Fatal(err)
			}
			total := fs.Ops()
			t.Logf("CreateRepository on %s: %d kv operations", ns, total)
			for _, mode := range []kvtest.FaultMode{kvtest.FaultError, kvtest.FaultAmbiguousApplied, kvtest.FaultAmbiguousNotApplied, kvtest.FaultCrash} {
				for n := int64(1); n <= total; n++ {
					e, fs := setup()
					fs.FailAt(n, mode)
					_, cerr := e.managerOn(fs).CreateRepository(e.ctx, "sales", params, initialCommit())
					e.wantClaim("s3://bucket/lake/live", "live")
					if _, err := e.m.GetRepository(e.ctx, "sales"); err == nil {
						e.checkUsable("sales")
						e.wantClaim(ns, "sales")
						continue
					}
					if cerr == nil {
						t.Fatalf("%s at op %d: create succeeded but the repository is not visible", mode, n)
					}
					e.checkInvisible("sales")
					if c := e.claimOf(ns); c != nil && mode != kvtest.FaultCrash {
						t.Fatalf("%s at op %d: claim left after an abandoned create: %+v", mode, n, c)
					}
					if mode == kvtest.FaultCrash {
						_, err := e.createOn("other", ns)
						if c := e.claimOf(ns); c != nil && c.Repository == "sales" {
							// The crashed create's record holds it until it expires.
							wantInUse(t, err, "sales", "being created")
							e.clock.Advance(e.cfg.RepositoryCreationTimeout)
						} else if err != nil {
							t.Fatalf("%s at op %d: create on a namespace never claimed: %v", mode, n, err)
						}
					}
					if _, ok := e.rawRepository("other"); !ok {
						e.mustCreateOn("other", ns)
					}
					e.wantClaim(ns, "other")
					e.checkUsable("other")
					e.checkInvisible("sales")
					e.wantClaim("s3://bucket/lake/live", "live")
				}
			}
		})
	}
}

// dropClaim makes ns's holder look like a repository created before
// claims existed: its record, no claim.
func (e *ienv) dropClaim(ns graveler.StorageNamespace) {
	e.t.Helper()
	norm, err := graveler.NormalizeStorageNamespace(ns)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.inner.Delete(e.ctx, keys.Graveler(), keys.NamespaceClaim(string(norm))); err != nil {
		e.t.Fatal(err)
	}
}

// TestBackfillNamespaceClaim: a repository created before claims gets its
// claim once, after which a create on its namespace is refused; a second
// such repository on the same namespace is reported, not given it; a
// stale claim is taken over; a repository not active gets none.
func TestBackfillNamespaceClaim(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *ienv) {
		e := newEnv(t)
		const ns = graveler.StorageNamespace("s3://bucket/legacy")
		e.mustCreateOn("old", ns)
		e.dropClaim(ns)
		// Unclaimed, so a second repository could be created on it, as
		// before claims existed.
		e.mustCreateOn("twin", ns)
		e.dropClaim(ns)

		ok, err := e.m.BackfillNamespaceClaim(e.ctx, "old", e.uidOf("old"))
		if err != nil || !ok {
			t.Fatalf("backfill old: %v, %v", ok, err)
		}
		e.wantClaim(ns, "old")
		if ok, err := e.m.BackfillNamespaceClaim(e.ctx, "old", e.uidOf("old")); err != nil || ok {
			t.Fatalf("backfill again: %v, %v", ok, err)
		}
		_, err = e.m.BackfillNamespaceClaim(e.ctx, "twin", e.uidOf("twin"))
		wantInUse(t, err, "old", "active")
		e.wantClaim(ns, "old")
		_, err = e.createOn("new", ns)
		wantInUse(t, err, "old", "active")

		// Another incarnation's uid: nothing.
		if ok, err := e.m.BackfillNamespaceClaim(e.ctx, "twin", "0123456789abcdef0123456789abcdef"); err != nil || ok {
			t.Fatalf("backfill of a uid that is not the record's: %v, %v", ok, err)
		}

		// "old" deleted and its work item gone: its claim is stale, and
		// "twin" takes it over.
		uid := e.uidOf("old")
		if err := e.m.DeleteRepository(e.ctx, "old"); err != nil {
			t.Fatal(err)
		}
		if err := e.inner.Delete(e.ctx, keys.Deleted(), keys.DeletedRepository("old", string(uid))); err != nil {
			t.Fatal(err)
		}
		if ok, err := e.m.BackfillNamespaceClaim(e.ctx, "twin", e.uidOf("twin")); err != nil || !ok {
			t.Fatalf("backfill twin over a stale claim: %v, %v", ok, err)
		}
		e.wantClaim(ns, "twin")
	})
}

// TestInterleaveNamespaceBackfill: the backfill's claim write held while
// the repository is deleted and reclaimed (found no claim to honour): the
// backfill reads the record again and releases what it wrote, so the
// namespace is free. Given up before the write: nothing written; after:
// the claim stands, naming the live repository.
func TestInterleaveNamespaceBackfill(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *ienv) {
		for _, m := range kvtest.Modes {
			t.Run(m.String(), func(t *testing.T) {
				e := newEnv(t)
				const ns = graveler.StorageNamespace("file:///lake/legacy")
				e.mustCreateOn("old", ns)
				e.dropClaim(ns)
				uid := e.uidOf("old")
				norm, _ := graveler.NormalizeStorageNamespace(ns)
				err := e.interleave(m, kvtest.OpOn(keys.Graveler(), keys.NamespaceClaim(string(norm)), "setif"),
					func(ctx context.Context) error {
						_, err := e.m.BackfillNamespaceClaim(ctx, "old", uid)
						return err
					},
					func() {
						if err := e.m.DeleteRepository(e.ctx, "old"); err != nil {
							t.Error(err)
						}
						e.runCleaner(true)
					})
				switch m {
				case kvtest.Race:
					if err != nil {
						t.Fatalf("backfill racing a delete: %v", err)
					}
					if c := e.claimOf(ns); c != nil {
						t.Fatalf("claim of a reclaimed repository left behind: %+v", c)
					}
					e.mustCreateOn("next", ns)
					e.wantClaim(ns, "next")
				default:
					wantFailed(t, m, err)
					c := e.claimOf(ns)
					if m == kvtest.CancelBefore && c != nil {
						t.Fatalf("claim written by a backfill given up before its write: %+v", c)
					}
					if m == kvtest.CancelAfter {
						e.wantClaim(ns, "old")
					}
				}
			})
		}
	})
}
