package ref_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"graveler/graveler"
	"graveler/keys"
	"graveler/kv"
)

var faultModes = []faultMode{faultError, faultAmbiguous, faultCrash}

// checkUsable asserts that the repository works end to end.
func (e *env) checkUsable(id graveler.RepositoryID) {
	e.t.Helper()
	ctx := e.ctx
	r, err := e.m.GetRepository(ctx, id)
	if err != nil {
		e.t.Fatalf("%s: get: %v", id, err)
	}
	b, err := e.m.GetBranch(ctx, r, r.DefaultBranchID)
	if err != nil {
		e.t.Fatalf("%s: default branch: %v", id, err)
	}
	head, err := e.m.GetCommit(ctx, r, b.CommitID)
	if err != nil {
		e.t.Fatalf("%s: head commit: %v", id, err)
	}
	child, err := e.m.AddCommit(ctx, r, graveler.Commit{Message: "child", Parents: []graveler.CommitID{b.CommitID}})
	if err != nil {
		e.t.Fatalf("%s: add commit: %v", id, err)
	}
	if err := e.m.BranchUpdate(ctx, r, r.DefaultBranchID, func(b *graveler.Branch) (*graveler.Branch, error) {
		b.CommitID = child
		return b, nil
	}); err != nil {
		e.t.Fatalf("%s: branch update: %v", id, err)
	}
	c, err := e.m.GetCommit(ctx, r, child)
	if err != nil || c.Generation != head.Generation+1 {
		e.t.Fatalf("%s: child commit %+v, %v", id, c, err)
	}
	if !slices.ContainsFunc(collect(e.t, e.m.ListRepositories(ctx, graveler.ListOptions{})), func(rr *graveler.RepositoryRecord) bool {
		return rr.RepositoryID == id
	}) {
		e.t.Fatalf("%s: usable but not listed", id)
	}
}

// checkInvisible asserts that get says not found (being deleted, for a
// deleting record: seed 003) and list omits the repository.
func (e *env) checkInvisible(id graveler.RepositoryID) {
	e.t.Helper()
	rec, ok := e.rawRepository(string(id))
	_, err := e.m.GetRepository(e.ctx, id)
	if ok && rec.State == graveler.RepositoryStateDeleting {
		wantErr(e.t, err, graveler.ErrRepositoryDeleting)
	} else {
		wantErr(e.t, err, graveler.ErrRepositoryNotFound)
	}
	for _, rr := range collect(e.t, e.m.ListRepositories(e.ctx, graveler.ListOptions{})) {
		if rr.RepositoryID == id {
			e.t.Fatalf("%s: invisible but listed", id)
		}
	}
}

func (e *env) partitionEmpty(repo, uid string) bool {
	for _, err := range e.store.Scan(e.ctx, keys.RepositoryPartition(repo, uid), kv.ScanOptions{Limit: 1}) {
		if err != nil {
			e.t.Fatal(err)
		}
		return false
	}
	return true
}

// checkReclaimable asserts that every non-empty partition of the given
// incarnations is live (the active record's), queued in graveler_deleted,
// or, when pendingOK, named by an initial record (which expires) or a
// deleting record (which a retried delete or a create of the name queues).
func (e *env) checkReclaimable(id graveler.RepositoryID, uids []string, pendingOK bool) {
	e.t.Helper()
	rec, haveRec := e.rawRepository(string(id))
	for _, uid := range uids {
		if e.partitionEmpty(string(id), uid) || e.queued(string(id), uid) {
			continue
		}
		if haveRec && string(rec.UniqueID) == uid {
			if rec.State == graveler.RepositoryStateActive || pendingOK {
				continue
			}
		}
		e.t.Fatalf("%s: partition of incarnation %s leaked (record %+v, present %v)", id, uid, rec, haveRec)
	}
}

// testFaultsCreateRepository breaks each kv operation of CreateRepository
// in turn, in each fault mode, and checks the repository is either fully
// usable or invisible, with every leftover reclaimable.
func testFaultsCreateRepository(t *testing.T, newStore newStoreFunc) {
	store := newStore(t)
	e := newEnv(t, store, nil)
	fs := &faultStore{Store: store}
	mf := e.managerOn(fs)

	fs.arm(faultError, 0)
	if _, err := mf.CreateRepository(e.ctx, "count-create", repoParams(), initialCommit()); err != nil {
		t.Fatal(err)
	}
	total := fs.ops.Load()
	t.Logf("CreateRepository: %d kv operations", total)
	if total != 9 {
		t.Fatalf("CreateRepository made %d kv operations, want 9 (Get, SetIf, Get claim, SetIf claim, Get, Set, SetIf, Get, SetIf)", total)
	}
	for _, mode := range faultModes {
		for n := int64(1); n <= total; n++ {
			// The namespace of a failed create is taken next by a retry
			// of the create, or by a create of another name.
			for _, next := range []string{"retry", "other"} {
				id := graveler.RepositoryID(fmt.Sprintf("create-%s-%d-%s", mode, n, next))
				params := repoParams()
				first := len(e.ids.All())
				fs.arm(mode, n)
				_, cerr := mf.CreateRepository(e.ctx, id, params, initialCommit())
				fs.arm(faultError, 0)
				uids := e.ids.All()[first:]

				if _, err := e.m.GetRepository(e.ctx, id); err == nil {
					if mode == faultCrash && n <= total {
						// A crash at any step leaves the activation undone
						// (the activation is the last op).
						t.Fatalf("%s: usable after a crash at op %d", id, n)
					}
					e.checkUsable(id)
					e.checkReclaimable(id, uids, false)
					e.wantClaim(params.StorageNamespace, id)
					continue
				}
				if cerr == nil {
					t.Fatalf("%s: create succeeded but the repository is not visible", id)
				}
				if !errors.Is(cerr, graveler.ErrUnavailable) && !errors.Is(cerr, graveler.ErrAmbiguous) {
					t.Fatalf("%s: store failure surfaced as %v", id, cerr)
				}
				e.checkInvisible(id)
				e.checkReclaimable(id, uids, true)
				if c := e.claimOf(params.StorageNamespace); c != nil && mode != faultCrash {
					// Abandoning the creation released its claim.
					t.Fatalf("%s (%s at op %d): claim left after an abandoned create: %+v", id, mode, n, c)
				}
				if mode == faultCrash {
					// Nothing cleaned up: the initial record holds the name
					// (and the claim, once written, the namespace) until
					// the creation timeout.
					e.clock.Advance(e.cfg.RepositoryCreationTimeout)
				}
				taker := id
				if next == "other" {
					taker = id + "-2"
				}
				if _, err := e.m.CreateRepository(e.ctx, taker, params, initialCommit()); err != nil {
					t.Fatalf("%s (%s at op %d): create %s on the same namespace: %v", id, mode, n, taker, err)
				}
				e.checkUsable(taker)
				e.wantClaim(params.StorageNamespace, taker)
				if next == "other" {
					if _, err := e.m.CreateRepository(e.ctx, id, repoParams(), initialCommit()); err != nil {
						t.Fatalf("%s (%s at op %d): re-create: %v", id, mode, n, err)
					}
				}
				e.checkUsable(id)
				rec, _ := e.rawRepository(string(id))
				e.checkReclaimable(id, slices.DeleteFunc(uids, func(u string) bool { return u == string(rec.UniqueID) }), false)
			}
		}
	}
}

// testFaultsDeleteRepository does the same for DeleteRepository.
func testFaultsDeleteRepository(t *testing.T, newStore newStoreFunc) {
	store := newStore(t)
	e := newEnv(t, store, nil)
	fs := &faultStore{Store: store}
	mf := e.managerOn(fs)

	e.createRepo("count-delete")
	fs.arm(faultError, 0)
	if err := mf.DeleteRepository(e.ctx, "count-delete"); err != nil {
		t.Fatal(err)
	}
	total := fs.ops.Load()
	t.Logf("DeleteRepository: %d kv operations", total)
	if total != 5 {
		t.Fatalf("DeleteRepository made %d kv operations, want 5 (Get, SetIf, Set, Get, DeleteIf)", total)
	}
	for _, mode := range faultModes {
		for n := int64(1); n <= total; n++ {
			id := graveler.RepositoryID(fmt.Sprintf("delete-%s-%d", mode, n))
			first := len(e.ids.All())
			r := e.createRepo(id)
			uids := e.ids.All()[first:]
			fs.arm(mode, n)
			derr := mf.DeleteRepository(e.ctx, id)
			fs.arm(faultError, 0)

			if _, err := e.m.GetRepository(e.ctx, id); err == nil {
				if derr == nil {
					t.Fatalf("%s: delete succeeded but the repository is visible", id)
				}
				e.checkUsable(id)
				e.checkReclaimable(id, uids, false)
				// Retrying the delete works.
				if err := e.m.DeleteRepository(e.ctx, id); err != nil {
					t.Fatalf("%s: retried delete: %v", id, err)
				}
			} else {
				e.checkInvisible(id)
				e.checkReclaimable(id, uids, true)
				// A retried delete completes whatever the failed one left.
				if err := e.m.DeleteRepository(e.ctx, id); err != nil && !errors.Is(err, graveler.ErrRepositoryNotFound) {
					t.Fatalf("%s: retried delete: %v", id, err)
				}
			}
			e.checkInvisible(id)
			if _, ok := e.rawRepository(string(id)); ok {
				t.Fatalf("%s: record left after a completed delete", id)
			}
			if !e.queued(string(id), string(r.UniqueID)) {
				t.Fatalf("%s: deleted incarnation not queued", id)
			}
			e.createRepo(id)
			e.checkUsable(id)
		}
	}

	// A crash right after marking deleting leaves a deleting record; a
	// create of the name queues it and takes the name without a delete.
	id := graveler.RepositoryID("delete-then-create")
	r := e.createRepo(id)
	fs.arm(faultCrash, 3)
	if err := mf.DeleteRepository(e.ctx, id); err == nil {
		t.Fatal("crashed delete succeeded")
	}
	fs.arm(faultError, 0)
	if rec, _ := e.rawRepository(string(id)); rec.State != graveler.RepositoryStateDeleting {
		t.Fatalf("record after crash: %+v", rec)
	}
	e.checkInvisible(id)
	e.createRepo(id)
	if !e.queued(string(id), string(r.UniqueID)) {
		t.Fatal("replaced deleting incarnation not queued")
	}
	e.checkUsable(id)
}
