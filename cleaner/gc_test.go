package cleaner_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"graveler/cleaner"
	"graveler/etcdkv"
	"graveler/fsck"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/keys"
	"graveler/kv"
	"graveler/kv/kvtest"
)

const gcGrace = 6 * time.Hour

func gcBackends(t *testing.T, fn func(t *testing.T, b gcBackend)) {
	t.Run("file", func(t *testing.T) { fn(t, fileBackend(t)) })
	t.Run("s3", func(t *testing.T) { fn(t, s3Backend(t)) })
}

// gcFixture: two live repositories with history (commits on main and on a
// branch, a merge), the objects of failed commits, and objects that are
// not committed data (user files, Graveler's marker, a name that only
// looks like a range).
type gcFixture struct {
	w          *gcWorld
	live       map[graveler.RepositoryID]graveler.StorageNamespace
	nsA, nsB   graveler.StorageNamespace
	oldGarbage map[string]bool // in nsA, older than the grace
	young      map[string]bool // in nsB, planted after everything aged
	foreign    map[string]bool // in nsA, never committed data
}

func newGCFixture(t *testing.T, b gcBackend) *gcFixture {
	store, _, _ := newEtcd(t)
	w := newGCWorld(t, store, b, gcGrace)
	f := &gcFixture{w: w, oldGarbage: map[string]bool{}, young: map[string]bool{}, foreign: map[string]bool{}}
	f.nsA, f.nsB = w.createRepo("alpha"), w.createRepo("beta")
	f.live = map[graveler.RepositoryID]graveler.StorageNamespace{"alpha": f.nsA, "beta": f.nsB}
	for _, repo := range []string{"alpha", "beta"} {
		w.mustCommit(repo, "main", "a/", 60)
		if _, err := w.g.CreateBranch(w.ctx, graveler.RepositoryID(repo), "feature", "main"); err != nil {
			t.Fatal(err)
		}
		w.mustCommit(repo, "feature", "f/", 40)
		w.mustCommit(repo, "main", "b/", 30)
		id, _, err := w.g.Merge(w.ctx, graveler.RepositoryID(repo), "main", "feature", graveler.MergeParams{CommitParams: graveler.CommitParams{Committer: "gc-test", Message: "merge"}})
		if err != nil {
			t.Fatal(err)
		}
		w.ack(w.g, repo, id, true)
		w.mustCommit(repo, "main", "a/", 5) // overwrites: the old ranges stay referenced by history
	}
	for range 3 {
		for _, n := range w.plant(f.nsA, 30) {
			f.oldGarbage[n] = true
		}
	}
	for _, n := range []string{"data/part-0001.parquet", "_graveler/other-tool/state", "_graveler/ranges/not-a-range.tmp"} {
		w.put(f.nsA, n, "not committed data")
		f.foreign[n] = true
	}
	f.foreign[graveler.NamespaceMarker] = true
	// Everything so far is 10h old; what is written next is young.
	for _, ns := range []graveler.StorageNamespace{f.nsA, f.nsB} {
		b.age(t, ns, slices.Collect(maps.Keys(w.objects(ns))), 10*time.Hour)
		if b.ageAllOnly {
			break
		}
	}
	for _, n := range w.plant(f.nsB, 20) {
		f.young[n] = true
	}
	return f
}

// TestGCDeletesOnlyUnreferenced: a collection deletes exactly the old
// unreferenced committed objects; every acknowledged commit reads back
// entirely, young garbage and what is not committed data stay, and a
// second collection finds nothing more.
func TestGCDeletesOnlyUnreferenced(t *testing.T) {
	gcBackends(t, func(t *testing.T, b gcBackend) {
		f := newGCFixture(t, b)
		w := f.w
		beforeA, beforeB := w.objects(f.nsA), w.objects(f.nsB)
		sum, err := cleaner.New(w.store, w.cleanerConfig(gcGrace)).RunOnce(w.ctx)
		if err != nil {
			t.Fatal(err)
		}
		gc := sum.GC
		if gc == nil || sum.Errors != 0 || gc.Aborted {
			t.Fatalf("summary %+v, gc %+v", sum, gc)
		}
		afterA, afterB := w.objects(f.nsA), w.objects(f.nsB)
		for n := range beforeA {
			if f.oldGarbage[n] == afterA[n] {
				t.Errorf("%s: old garbage %v, still there %v", n, f.oldGarbage[n], afterA[n])
			}
		}
		if !maps.Equal(beforeB, afterB) {
			t.Errorf("namespace B changed: %d objects -> %d", len(beforeB), len(afterB))
		}
		for n := range f.foreign {
			if !afterA[n] {
				t.Errorf("%s, not committed data, was deleted", n)
			}
		}
		w.checkAcked(f.live)
		if gc.Deleted != int64(len(f.oldGarbage)) || gc.BytesDeleted == 0 || gc.KeptYoung != int64(len(f.young)) ||
			gc.Namespaces != 2 || gc.Repositories != 2 || gc.Commits < 12 || gc.Marked == 0 || gc.Revision == 0 {
			t.Errorf("gc summary %+v; want %d deleted, %d kept young", gc, len(f.oldGarbage), len(f.young))
		}
		if gc.Listed != gc.Deleted+gc.KeptYoung+gc.Kept || gc.Kept == 0 {
			t.Errorf("listed %d, want deleted+kept young+kept = %d (kept %d)", gc.Listed, gc.Deleted+gc.KeptYoung+gc.Kept, gc.Kept)
		}
		again, err := cleaner.New(w.store, w.cleanerConfig(gcGrace)).RunOnce(w.ctx)
		if err != nil || again.GC == nil || again.GC.Deleted != 0 || again.Errors != 0 {
			t.Fatalf("second run: %v, %+v", err, again.GC)
		}
	})
}

// TestGCDryRun: a dry run deletes nothing and reports what it would.
func TestGCDryRun(t *testing.T) {
	gcBackends(t, func(t *testing.T, b gcBackend) {
		f := newGCFixture(t, b)
		w := f.w
		beforeA, beforeB := w.objects(f.nsA), w.objects(f.nsB)
		cfg := w.cleanerConfig(gcGrace)
		cfg.DryRun = true
		sum, err := cleaner.New(w.store, cfg).RunOnce(w.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(beforeA, w.objects(f.nsA)) || !maps.Equal(beforeB, w.objects(f.nsB)) {
			t.Fatal("a dry run changed the blob store")
		}
		if sum.GC == nil || sum.GC.Deleted != int64(len(f.oldGarbage)) || sum.Errors != 0 {
			t.Fatalf("dry run summary %+v", sum.GC)
		}
	})
}

// TestGCCommitsAfterTheMark: objects referenced only by commits recorded
// after the collection read its roots are kept: those a commit wrote,
// packs it passed objects through from, of an old base (touched as it
// reused them), and a failed commit's old root that a new commit stored
// again. The failed commit's old pack is not kept: the new commit stored
// the same objects in a pack of its own.
func TestGCCommitsAfterTheMark(t *testing.T) {
	store, _, _ := newEtcd(t)
	b := fileBackend(t)
	w := newGCWorld(t, store, b, gcGrace)
	ns := w.createRepo("gamma")
	live := map[graveler.RepositoryID]graveler.StorageNamespace{"gamma": ns}
	w.mustCommit("gamma", "main", "k/", 200)
	// The same entries as a commit below, stored by a commit that failed.
	recs := make([]graveler.ValueRecord, 50)
	for i := range recs {
		recs[i] = graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("same/%04d", i)), Value: &graveler.Value{Identity: fmt.Appendf(nil, "s%d", i), Data: []byte("same")}}
	}
	resurrected := w.writeTree(ns, recs)
	b.age(t, ns, slices.Collect(maps.Keys(w.objects(ns))), 10*time.Hour)

	c := cleaner.New(store, w.cleanerConfig(gcGrace))
	c.SetGCHooks(func() {
		// A restarted gravelerd commits: one key changes, the rest of
		// the 10h-old tree is passed through.
		g := w.service()
		if err := g.Set(w.ctx, "gamma", "main", graveler.Key("k/0199"), graveler.Value{Identity: []byte("changed"), Data: []byte("x")}, graveler.SetOptions{}); err != nil {
			t.Error(err)
			return
		}
		id, err := g.Commit(w.ctx, "gamma", "main", graveler.CommitParams{Committer: "gc-test", Message: "after mark"})
		if err != nil {
			t.Error(err)
			return
		}
		w.ack(g, "gamma", id, true)
		// From the initial commit: the empty tree, so the same entries
		// make the same objects.
		history, err := logOf(w.ctx, g, "gamma", "main")
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := g.CreateBranch(w.ctx, "gamma", "again", graveler.Ref(history[len(history)-1])); err != nil {
			t.Error(err)
			return
		}
		for _, r := range recs {
			if err := g.Set(w.ctx, "gamma", "again", r.Key, *r.Value, graveler.SetOptions{}); err != nil {
				t.Error(err)
				return
			}
		}
		id, err = g.Commit(w.ctx, "gamma", "again", graveler.CommitParams{Committer: "gc-test", Message: "same content"})
		if err != nil {
			t.Error(err)
			return
		}
		w.ack(g, "gamma", id, true)
	}, nil)
	sum, err := c.RunOnce(w.ctx)
	if err != nil || sum.Errors != 0 {
		t.Fatalf("run: %v, %+v", err, sum)
	}
	w.checkAcked(live)
	after := w.objects(ns)
	replaced := 0
	for _, n := range resurrected {
		if kind, _, _ := committed.ParseObjectName(n); kind == committed.ObjectPack {
			replaced++
			if after[n] {
				t.Errorf("%s, the failed commit's pack, no tree names, was kept", n)
			}
		} else if !after[n] {
			t.Errorf("%s, stored again by a commit after the mark, was deleted", n)
		}
	}
	if replaced == 0 || sum.GC.Deleted != int64(replaced) {
		t.Errorf("deleted %d objects, want only the %d packs of the failed commit", sum.GC.Deleted, replaced)
	}
}

// TestGCChecksAgainBeforeDeleting: an object written again between the
// listing and its delete (a commit storing the same content) is young
// again and kept.
func TestGCChecksAgainBeforeDeleting(t *testing.T) {
	store, _, _ := newEtcd(t)
	b := fileBackend(t)
	w := newGCWorld(t, store, b, gcGrace)
	ns := w.createRepo("delta")
	w.mustCommit("delta", "main", "k/", 20)
	garbage := w.plant(ns, 40)
	b.age(t, ns, garbage, 10*time.Hour)
	c := cleaner.New(store, w.cleanerConfig(gcGrace))
	rewritten := garbage[0]
	var once sync.Once
	c.SetGCHooks(nil, func(_ graveler.StorageNamespace, name string) {
		once.Do(func() {
			data, err := w.b.blobs.Get(w.ctx, ns, rewritten)
			if err == nil {
				err = w.b.blobs.Put(w.ctx, ns, rewritten, data)
			}
			if err != nil {
				t.Error(err)
			}
		})
	})
	sum, err := c.RunOnce(w.ctx)
	if err != nil || sum.Errors != 0 {
		t.Fatalf("run: %v, %+v", err, sum)
	}
	after := w.objects(ns)
	for i, n := range garbage {
		if after[n] != (i == 0) {
			t.Errorf("%s: present %v after the collection", n, after[n])
		}
	}
	if sum.GC.Deleted != int64(len(garbage)-1) || sum.GC.KeptYoung != 1 {
		t.Errorf("gc summary %+v", sum.GC)
	}
}

// TestGCReadErrorAbortsNamespace: a namespace whose metarange cannot be
// read, or whose listing fails, loses nothing; the others are collected.
func TestGCReadErrorAbortsNamespace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, f *gcFixture) committed.BlobStore
	}{
		{"metarange read fails", func(t *testing.T, f *gcFixture) committed.BlobStore {
			return &failingBlobs{BlobStore: f.w.b.blobs, ns: f.nsA, op: "get", prefix: committed.MetaRangesPrefix}
		}},
		{"packed node read fails", func(t *testing.T, f *gcFixture) committed.BlobStore {
			return &failingBlobs{BlobStore: f.w.b.blobs, ns: f.nsA, op: "get", prefix: committed.PacksPrefix}
		}},
		{"listing fails", func(t *testing.T, f *gcFixture) committed.BlobStore {
			return &failingBlobs{BlobStore: f.w.b.blobs, ns: f.nsA, op: "list", prefix: committed.MetaRangesPrefix}
		}},
		{"stat fails", func(t *testing.T, f *gcFixture) committed.BlobStore {
			return &failingBlobs{BlobStore: f.w.b.blobs, ns: f.nsA, op: "stat"}
		}},
		{"metarange missing", func(t *testing.T, f *gcFixture) committed.BlobStore {
			c, err := f.w.g.GetCommit(f.w.ctx, "alpha", "main")
			if err != nil {
				t.Fatal(err)
			}
			// A blob of the test's namespace, not a kv record: the damage under test.
			if err := f.w.b.blobs.Delete(f.w.ctx, f.nsA, committed.MetaRangeObjectName(c.MetaRangeID)); err != nil {
				t.Fatal(err)
			}
			return f.w.b.blobs
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newGCFixture(t, fileBackend(t))
			w := f.w
			f.young = nil
			// Garbage in B too, old enough to go.
			bGarbage := w.plant(f.nsB, 10)
			w.b.age(t, f.nsB, bGarbage, 10*time.Hour)
			blobs := tc.damage(t, f)
			beforeA := w.objects(f.nsA)
			cfg := w.cleanerConfig(gcGrace)
			cfg.Blobs = blobs
			sum, err := cleaner.New(w.store, cfg).RunOnce(w.ctx)
			if err != nil {
				t.Fatal(err)
			}
			afterA := w.objects(f.nsA)
			deletedA := 0
			for n := range beforeA {
				if !afterA[n] {
					deletedA++
					if !f.oldGarbage[n] {
						t.Errorf("%s, not garbage, was deleted", n)
					}
				}
			}
			if deletedA != 0 {
				t.Errorf("%d objects deleted from the namespace whose sweep failed", deletedA)
			}
			afterB := w.objects(f.nsB)
			for _, n := range bGarbage {
				if afterB[n] {
					t.Errorf("%s: old garbage of the healthy namespace kept", n)
				}
			}
			if sum.Errors != 1 || sum.GC.NamespacesAborted != 1 || sum.GC.Namespaces != 1 || len(sum.Failures) != 1 ||
				!strings.Contains(sum.Failures[0], string(f.nsA)) {
				t.Errorf("summary %+v, gc %+v", sum, sum.GC)
			}
		})
	}
}

// failingBlobs fails one kind of read in one namespace.
type failingBlobs struct {
	committed.BlobStore
	ns     graveler.StorageNamespace
	op     string
	prefix string
}

var errUnreadable = errors.New("injected: unreadable")

func (f *failingBlobs) hit(ns graveler.StorageNamespace, op, name string) bool {
	return ns == f.ns && op == f.op && strings.HasPrefix(name, f.prefix)
}

func (f *failingBlobs) Get(ctx context.Context, ns graveler.StorageNamespace, name string) ([]byte, error) {
	if f.hit(ns, "get", name) {
		return nil, errUnreadable
	}
	return f.BlobStore.Get(ctx, ns, name)
}

func (f *failingBlobs) GetRange(ctx context.Context, ns graveler.StorageNamespace, name string, offset, length int64) ([]byte, error) {
	if f.hit(ns, "get", name) {
		return nil, errUnreadable
	}
	return f.BlobStore.GetRange(ctx, ns, name, offset, length)
}

func (f *failingBlobs) List(ctx context.Context, ns graveler.StorageNamespace, prefix string, fn func([]committed.BlobInfo) error) error {
	if f.hit(ns, "list", prefix) {
		return errUnreadable
	}
	return f.BlobStore.List(ctx, ns, prefix, fn)
}

func (f *failingBlobs) Stat(ctx context.Context, ns graveler.StorageNamespace, name string) (committed.BlobInfo, error) {
	if f.hit(ns, "stat", name) {
		return committed.BlobInfo{}, errUnreadable
	}
	return f.BlobStore.Stat(ctx, ns, name)
}

// TestGCUndecodableRecordAbortsAll: a commit or repository record that
// does not decode stops the collection before anything is deleted.
func TestGCUndecodableRecordAbortsAll(t *testing.T) {
	for _, what := range []string{"commit", "repository"} {
		t.Run(what, func(t *testing.T) {
			f := newGCFixture(t, fileBackend(t))
			w := f.w
			switch what {
			case "commit":
				rec, err := w.g.GetRepository(w.ctx, "alpha")
				if err != nil {
					t.Fatal(err)
				}
				if err := w.store.Set(w.ctx, keys.RepositoryPartition("alpha", string(rec.UniqueID)), keys.Commit("zzbroken"), []byte{0xff, 0x01}); err != nil {
					t.Fatal(err)
				}
			case "repository":
				if err := w.store.Set(w.ctx, keys.Graveler(), keys.Repository("broken"), []byte{0xff, 0x01}); err != nil {
					t.Fatal(err)
				}
			}
			beforeA, beforeB := w.objects(f.nsA), w.objects(f.nsB)
			sum, err := cleaner.New(w.store, w.cleanerConfig(gcGrace)).RunOnce(w.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(beforeA, w.objects(f.nsA)) || !maps.Equal(beforeB, w.objects(f.nsB)) {
				t.Fatal("objects deleted although a record did not decode")
			}
			if sum.GC == nil || !sum.GC.Aborted || sum.GC.Deleted != 0 || sum.Errors == 0 {
				t.Fatalf("summary %+v, gc %+v", sum, sum.GC)
			}
		})
	}
}

// TestGCLeavesDeletedRepositoryToReclaim: a deleted repository's
// namespace is not collected; its reclaim empties it (all but a marker
// that names another repository) and releases it for a new repository.
func TestGCLeavesDeletedRepositoryToReclaim(t *testing.T) {
	gcBackends(t, func(t *testing.T, b gcBackend) {
		store, _, _ := newEtcd(t)
		w := newGCWorld(t, store, b, gcGrace)
		nsL, nsD := w.createRepo("kept"), w.createRepo("doomed")
		w.mustCommit("kept", "main", "k/", 30)
		w.mustCommit("doomed", "main", "d/", 30)
		w.put(nsD, "data/user-file", "user data")
		w.plant(nsD, 20)
		b.age(t, nsD, slices.Collect(maps.Keys(w.objects(nsD))), 10*time.Hour)
		if err := w.g.DeleteRepository(w.ctx, "doomed"); err != nil {
			t.Fatal(err)
		}
		before := w.objects(nsD)
		c := cleaner.New(store, w.cleanerConfig(gcGrace))
		sum, err := c.Collect(w.ctx)
		if err != nil || sum.Errors != 0 || sum.GC.Repositories != 1 {
			t.Fatalf("collect: %v, %+v", err, sum.GC)
		}
		if !maps.Equal(before, w.objects(nsD)) {
			t.Fatal("the collection changed a deleted repository's namespace before its reclaim")
		}
		if len(before) < 5 || !before[graveler.NamespaceMarker] {
			t.Fatalf("deleted namespace holds %d objects, marker %v", len(before), before[graveler.NamespaceMarker])
		}

		// A dry run of the reclaim counts, and changes nothing.
		dry := w.cleanerConfig(gcGrace)
		dry.DryRun = true
		dsum, err := cleaner.New(store, dry).RunOnce(w.ctx)
		if err != nil || dsum.NamespaceObjectsDeleted != int64(len(before)) {
			t.Fatalf("dry run: %v, %d objects would go, want %d", err, dsum.NamespaceObjectsDeleted, len(before))
		}
		if !maps.Equal(before, w.objects(nsD)) {
			t.Fatal("a dry run changed the namespace")
		}

		sum, err = c.RunOnce(w.ctx)
		if err != nil || sum.Errors != 0 || sum.RepositoriesReclaimed != 1 {
			t.Fatalf("reclaim: %v, %+v", err, sum)
		}
		if left := w.objects(nsD); len(left) != 0 {
			t.Fatalf("reclaimed namespace still holds %v", slices.Sorted(maps.Keys(left)))
		}
		if sum.NamespaceObjectsDeleted != int64(len(before)) {
			t.Errorf("namespace_objects_deleted %d, want %d", sum.NamespaceObjectsDeleted, len(before))
		}
		w.checkAcked(map[graveler.RepositoryID]graveler.StorageNamespace{"kept": nsL})
		// Released: a new repository takes the namespace.
		if _, err := w.g.CreateRepository(w.ctx, "reborn", nsD, "main"); err != nil {
			t.Fatalf("create on the reclaimed namespace: %v", err)
		}
	})
}

// TestReclaimKeepsAnotherRepositorysMarker: emptying a namespace never
// deletes a marker that names another repository, and leaves a file whose
// name Graveler could never have written (nor can delete) without failing.
func TestReclaimKeepsAnotherRepositorysMarker(t *testing.T) {
	store, _, _ := newEtcd(t)
	b := fileBackend(t)
	w := newGCWorld(t, store, b, gcGrace)
	nsD := w.createRepo("doomed")
	w.mustCommit("doomed", "main", "d/", 10)
	if err := w.g.DeleteRepository(w.ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	other := `{"repository":"someone-else","unique_id":"x","created":"2020-01-01T00:00:00Z"}`
	w.put(nsD, graveler.NamespaceMarker, other)
	u, err := url.Parse(string(nsD))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(filepath.FromSlash(u.Path), "a user file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := cleaner.New(store, w.cleanerConfig(gcGrace)).RunOnce(w.ctx)
	if err != nil || sum.Errors != 0 || sum.RepositoriesReclaimed != 1 {
		t.Fatalf("reclaim: %v, %+v", err, sum)
	}
	left := w.objects(nsD)
	if len(left) != 2 || !left[graveler.NamespaceMarker] || !left["a user file"] {
		t.Fatalf("left %v, want just the other repository's marker and the user's file", slices.Sorted(maps.Keys(left)))
	}
}

// TestGCCrashAnywhere: a collection whose blob store, or kv store, fails
// at any one step deletes nothing referenced, and a rerun completes.
func TestGCCrashAnywhere(t *testing.T) {
	store, _, _ := newEtcd(t)
	b := fileBackend(t)
	w := newGCWorld(t, store, b, gcGrace)
	live := map[graveler.RepositoryID]graveler.StorageNamespace{}
	for _, repo := range []string{"one", "two"} {
		live[graveler.RepositoryID(repo)] = w.createRepo(repo)
		w.mustCommit(repo, "main", "a/", 40)
		w.mustCommit(repo, "main", "b/", 20)
	}
	ctx := w.ctx
	plant := func() map[string]bool {
		out := map[string]bool{}
		for _, ns := range live {
			names := w.plant(ns, 16)
			b.age(t, ns, names, 10*time.Hour)
			for _, n := range names {
				out[string(ns)+" "+n] = true
			}
		}
		return out
	}
	gone := func(garbage map[string]bool) bool {
		for _, ns := range live {
			objs := w.objects(ns)
			for n := range objs {
				if garbage[string(ns)+" "+n] {
					return false
				}
			}
		}
		return true
	}
	fb := &faultyBlobs{BlobStore: b.blobs}
	fs := kvtest.NewFaultStore(store)
	cfg := w.cleanerConfig(gcGrace)
	cfg.Blobs = fb

	// Count the steps of a clean collection.
	plant()
	fb.arm(0, false)
	fs.Reset()
	if sum, err := cleaner.New(fs, cfg).Collect(ctx); err != nil || sum.Errors != 0 {
		t.Fatalf("clean collection: %v, %+v", err, sum)
	}
	blobOps, kvOps := fb.count(), fs.Ops()
	if blobOps < 10 || kvOps < 3 {
		t.Fatalf("a collection made %d blob and %d kv operations", blobOps, kvOps)
	}
	type fault struct {
		kind  string
		n     int64
		after bool
	}
	var faults []fault
	failed, unreached := 0, 0
	for n := int64(1); n <= blobOps; n++ {
		faults = append(faults, fault{"blob", n, false}, fault{"blob", n, true})
	}
	for n := int64(1); n <= kvOps; n++ {
		faults = append(faults, fault{"kv", n, false})
	}
	for _, f := range faults {
		garbage := plant()
		fb.arm(0, false)
		fs.Reset()
		switch f.kind {
		case "blob":
			fb.arm(f.n, f.after)
		case "kv":
			fs.FailAt(f.n, kvtest.FaultCrash)
		}
		if sum, _ := cleaner.New(fs, cfg).Collect(ctx); sum.Errors > 0 {
			failed++
		}
		switch {
		case f.kind == "blob" && !fb.firedOrUnreached():
			t.Fatalf("the blob fault at operation %d (after: %v) was never returned", f.n, f.after)
		case f.kind == "kv" && fs.Injected() == 0 && fs.Ops() >= f.n:
			t.Fatalf("the kv fault at operation %d was never injected", f.n)
		case f.kind == "blob" && fb.count() < f.n, f.kind == "kv" && fs.Ops() < f.n:
			unreached++
		}
		fb.arm(0, false)
		fs.Reset()
		w.checkAcked(live)
		if t.Failed() {
			t.Fatalf("after a %s fault at operation %d (after: %v)", f.kind, f.n, f.after)
		}
		// The next run comes after the crashed one's sweep record, left
		// running when the fault hit between its start and its end,
		// expired.
		rerun := cfg
		rerun.GC.Fence.Now = func() time.Time { return time.Now().Add(time.Minute) }
		sum, err := cleaner.New(fs, rerun).Collect(ctx)
		if err != nil || sum.Errors != 0 || sum.GC.Aborted {
			t.Fatalf("rerun after a %s fault at %d: %v, %+v", f.kind, f.n, err, sum)
		}
		if !gone(garbage) {
			t.Fatalf("rerun after a %s fault at %d left old garbage", f.kind, f.n)
		}
	}
	// Most faults must have stopped the collection they hit (the rest
	// hit an answer already given, e.g. a delete applied then reported
	// failed on an object another worker's Stat had found gone).
	if failed < len(faults)/2 {
		t.Errorf("only %d of %d injected faults made a collection fail", failed, len(faults))
	}
	if unreached > len(faults)/4 {
		t.Errorf("%d of %d faults fell past the end of their run", unreached, len(faults))
	}
	t.Logf("%d faults over %d blob and %d kv operations; %d collections failed, %d faults unreached", len(faults), blobOps, kvOps, failed, unreached)
	w.checkAcked(live)
}

// TestGCConcurrentWithWriters: collections run back to back, by two
// cleaners, while two gravelerd replicas commit to several branches,
// merge them, and create and delete repositories. Afterwards every
// acknowledged commit reads back entirely, the objects of failed commits
// (planted at the start) are gone once older than the grace, and deleted
// repositories' namespaces are empty. A dry run before the last
// collection deletes nothing.
func TestGCConcurrentWithWriters(t *testing.T) {
	if testing.Short() {
		t.Skip("sustained run")
	}
	gcBackends(t, func(t *testing.T, b gcBackend) {
		// Short enough to collect during the run; long enough that a
		// commit records its metarange within half of it on a loaded
		// machine (the writer refreshes what it references to half).
		const grace = 3 * time.Second
		const runFor = 7 * time.Second
		store, _, _ := newEtcd(t)
		w := newGCWorld(t, store, b, grace)
		live := map[graveler.RepositoryID]graveler.StorageNamespace{}
		planted := map[graveler.StorageNamespace][]string{}
		for i := range 3 {
			repo := fmt.Sprintf("live-%d", i)
			ns := w.createRepo(repo)
			live[graveler.RepositoryID(repo)] = ns
			w.mustCommit(repo, "main", "seed/", 30)
			for _, br := range []graveler.BranchID{"b1", "b2", "merged"} {
				if _, err := w.g.CreateBranch(w.ctx, graveler.RepositoryID(repo), br, "main"); err != nil {
					t.Fatal(err)
				}
			}
			planted[ns] = w.plant(ns, 40)
		}
		replicas := []*graveler.Graveler{w.g, w.service()}
		ctx, stop := context.WithCancel(w.ctx)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var deletedNS []graveler.StorageNamespace
		commits, merges, gcRuns, deletedObjects := 0, 0, 0, int64(0)
		errorf := func(format string, args ...any) {
			if ctx.Err() == nil {
				t.Errorf(format, args...)
			}
		}
		// Committers: each on its own keys of one branch.
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g := replicas[i%2]
				for n := 0; ctx.Err() == nil; n++ {
					repo := fmt.Sprintf("live-%d", n%3)
					br := []graveler.BranchID{"main", "b1", "b2"}[(n+i)%3]
					_, err := w.commit(g, repo, br, fmt.Sprintf("%s/w%d/", br, i), 4, false)
					if errors.Is(err, graveler.ErrNoChanges) {
						continue // another committer's commit took these entries
					}
					if err != nil {
						errorf("commit on %s/%s: %v", repo, br, err)
						return
					}
					mu.Lock()
					commits++
					mu.Unlock()
				}
			}()
		}
		// A merger: b1 and main in turn into "merged", where nothing is
		// staged.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				repo := graveler.RepositoryID(fmt.Sprintf("live-%d", n%3))
				dst, src := graveler.BranchID("merged"), graveler.Ref("b1")
				if n%2 == 1 {
					src = "main"
				}
				id, _, err := replicas[n%2].Merge(ctx, repo, dst, src, graveler.MergeParams{CommitParams: graveler.CommitParams{Committer: "gc-test", Message: "merge"}})
				switch {
				case errors.Is(err, graveler.ErrNoChanges):
				case err != nil:
					errorf("merge %s into %s of %s: %v", src, dst, repo, err)
					return
				default:
					w.ack(replicas[n%2], string(repo), id, false)
					mu.Lock()
					merges++
					mu.Unlock()
				}
			}
		}()
		// Repositories created, committed to and deleted.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				repo := fmt.Sprintf("tmp-%d", n)
				ns := b.ns(repo)
				if _, err := w.g.CreateRepository(w.ctx, graveler.RepositoryID(repo), ns, "main"); err != nil {
					errorf("create %s: %v", repo, err)
					return
				}
				for range 2 {
					if _, err := w.commit(w.g, repo, "main", "t/", 10, false); err != nil {
						errorf("commit on %s: %v", repo, err)
						return
					}
				}
				if err := w.g.DeleteRepository(w.ctx, graveler.RepositoryID(repo)); err != nil {
					errorf("delete %s: %v", repo, err)
					return
				}
				mu.Lock()
				deletedNS = append(deletedNS, ns)
				mu.Unlock()
			}
		}()
		// Two cleaners, each reclaiming and collecting back to back.
		cfg := w.cleanerConfig(grace)
		cfg.GC.Interval = time.Nanosecond
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := cleaner.New(store, cfg)
				for ctx.Err() == nil {
					sum, err := c.RunOnce(ctx)
					if err != nil || sum.Errors != 0 {
						errorf("cleaner run: %v, %v", err, sum.Failures)
						return
					}
					mu.Lock()
					gcRuns++
					deletedObjects += sum.GC.Deleted
					mu.Unlock()
				}
			}()
		}
		time.Sleep(runFor)
		stop()
		wg.Wait()
		if t.Failed() {
			return
		}
		t.Logf("%d commits, %d merges, %d repositories deleted, %d cleaner runs deleted %d objects", commits, merges, len(deletedNS), gcRuns, deletedObjects)
		if commits == 0 || merges == 0 || len(deletedNS) == 0 || gcRuns < 2 {
			t.Fatal("the run did too little to mean anything")
		}

		// A dry run deletes nothing.
		before := map[graveler.StorageNamespace]map[string]bool{}
		for _, ns := range live {
			before[ns] = w.objects(ns)
		}
		dry := w.cleanerConfig(grace)
		dry.DryRun = true
		dsum, err := cleaner.New(store, dry).RunOnce(w.ctx)
		if err != nil || dsum.Errors != 0 {
			t.Fatalf("dry run: %v, %+v", err, dsum)
		}
		for _, ns := range live {
			if !maps.Equal(before[ns], w.objects(ns)) {
				t.Errorf("a dry run changed %s", ns)
			}
		}
		// The last collection: the planted objects are older than the
		// grace by now.
		sum, err := cleaner.New(store, w.cleanerConfig(grace)).RunOnce(w.ctx)
		if err != nil || sum.Errors != 0 {
			t.Fatalf("last run: %v, %+v", err, sum)
		}
		for ns, names := range planted {
			objs := w.objects(ns)
			for _, n := range names {
				if objs[n] {
					t.Errorf("%s %s: a failed commit's object older than the grace was kept", ns, n)
				}
			}
		}
		for _, ns := range deletedNS {
			if objs := w.objects(ns); len(objs) != 0 {
				t.Errorf("deleted repository's namespace %s still holds %d objects", ns, len(objs))
			}
		}
		w.checkAcked(live)
		checkFsck(t, store, b.blobs)
	})
}

// checkFsck runs a full consistency check (package fsck) of store and
// blobs and fails on any finding of error severity: after collections
// beside writers, no commit that a ref reaches may miss an object or read
// back damaged. Warnings are not the collector's business: the orphan
// grace keeps the run's young staging partitions out of them anyway.
func checkFsck(t *testing.T, store *etcdkv.Store, blobs committed.BlobStore) {
	t.Helper()
	rep, err := fsck.New(store, blobs, fsck.Config{Full: true}).Run(context.Background())
	if err != nil {
		t.Fatalf("fsck: %v (problems: %v)", err, rep.Problems)
	}
	for _, f := range rep.Findings {
		if f.Severity == fsck.SeverityError {
			t.Errorf("fsck: %s %s: %s: %s", f.Kind, f.Repository, f.Resource, f.Detail)
		} else {
			t.Logf("fsck: %s %s %s: %s: %s", f.Severity, f.Kind, f.Repository, f.Resource, f.Detail)
		}
	}
	s := rep.Stats
	t.Logf("fsck: %d commits (%d unreachable), %d metaranges and %d ranges (%d bytes) verified, %d findings",
		s.Commits, s.UnreachableCommits, s.MetaRanges, s.Ranges, s.RangeBytes, len(rep.Findings))
	if s.MetaRanges == 0 || s.Ranges == 0 {
		t.Errorf("fsck verified %d metaranges and %d ranges: it proved nothing", s.MetaRanges, s.Ranges)
	}
}

// TestGCInterval: a Cleaner collects in its first pass, then only once
// GCConfig.Interval has passed since it last began one.
func TestGCInterval(t *testing.T) {
	store := kv.NewMemoryStore()
	defer store.Close()
	var mu sync.Mutex
	now := time.Now()
	cfg := cleaner.Config{Blobs: committed.NewBucketStore(committed.BucketConfig{}), GC: cleaner.GCConfig{Enabled: true, Interval: time.Hour},
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	defer cfg.Blobs.Close()
	c := cleaner.New(store, cfg)
	for i, tc := range []struct {
		advance time.Duration
		collect bool
	}{{0, true}, {time.Minute, false}, {58 * time.Minute, false}, {2 * time.Minute, true}, {time.Second, false}} {
		mu.Lock()
		now = now.Add(tc.advance)
		mu.Unlock()
		sum, err := c.RunOnce(t.Context())
		if err != nil || sum.Errors != 0 {
			t.Fatalf("pass %d: %v, %+v", i, err, sum)
		}
		if (sum.GC != nil) != tc.collect {
			t.Errorf("pass %d: collected %v, want %v", i, sum.GC != nil, tc.collect)
		}
	}
	// Without Enabled, never.
	cfg.GC.Enabled = false
	if sum, _ := cleaner.New(store, cfg).RunOnce(t.Context()); sum.GC != nil {
		t.Error("a Cleaner without GC collected")
	}
}

// TestGCLeavesBareRepositoryAlone: the namespace of a repository with no
// branch (bare, its refs about to be restored onto objects copied there)
// is not collected.
func TestGCLeavesBareRepositoryAlone(t *testing.T) {
	store, _, _ := newEtcd(t)
	b := fileBackend(t)
	w := newGCWorld(t, store, b, gcGrace)
	ns := b.ns("restored")
	copied := w.plant(ns, 30) // the blobs of the repository to restore
	b.age(t, ns, copied, 10*time.Hour)
	if _, err := w.g.CreateBareRepository(w.ctx, "restored", ns, "main"); err != nil {
		t.Fatal(err)
	}
	before := w.objects(ns)
	sum, err := cleaner.New(store, w.cleanerConfig(gcGrace)).RunOnce(w.ctx)
	if err != nil || sum.Errors != 0 {
		t.Fatalf("run: %v, %+v", err, sum)
	}
	if !maps.Equal(before, w.objects(ns)) {
		t.Fatal("the namespace of a bare repository was collected")
	}
	if sum.GC.NamespacesHeld != 1 || sum.GC.Deleted != 0 {
		t.Errorf("gc summary %+v", sum.GC)
	}
}

// TestGCRepositoryDeletedAfterTheMark: a repository is deleted, and its
// namespace emptied by a reclaim, between the collection's read of the
// roots and its walk of their trees (another cleaner's reclaim runs
// meanwhile). The walk finds objects gone: the namespace is no longer a
// live repository's, so it is held, not a failure. The same missing
// object under a repository still live aborts the namespace's sweep as a
// failure: what it references is unknown.
func TestGCRepositoryDeletedAfterTheMark(t *testing.T) {
	for _, deleted := range []bool{true, false} {
		t.Run(fmt.Sprintf("deleted=%v", deleted), func(t *testing.T) {
			store, _, _ := newEtcd(t)
			b := fileBackend(t)
			w := newGCWorld(t, store, b, gcGrace)
			ns := w.createRepo("epsilon")
			w.mustCommit("epsilon", "main", "k/", 200)
			c := cleaner.New(store, w.cleanerConfig(gcGrace))
			c.SetGCHooks(func() {
				if deleted {
					if err := w.g.DeleteRepository(w.ctx, "epsilon"); err != nil {
						t.Error(err)
					}
				}
				// What the deleted repository's reclaim does: every
				// object of the namespace goes.
				for name := range w.objects(ns) {
					if err := b.blobs.Delete(w.ctx, ns, name); err != nil {
						t.Error(err)
					}
				}
			}, nil)
			sum, err := c.Collect(w.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if deleted {
				if sum.Errors != 0 || sum.GC.NamespacesAborted != 0 || sum.GC.NamespacesHeld != 1 {
					t.Fatalf("namespace of a repository deleted after the mark: %+v, %+v", sum.GC, sum.Failures)
				}
				return
			}
			if sum.Errors == 0 || sum.GC.NamespacesAborted != 1 {
				t.Fatalf("objects missing under a live repository: %+v, %+v", sum.GC, sum.Failures)
			}
		})
	}
}

// TestCollectDuringRestore: a collection runs in the middle of a restore
// onto a copy of a namespace whose objects are all older than the grace,
// right after the first branch (every commit came before it, as a dump
// writes them). It keeps every restored commit's tree: before the first
// branch the namespace is held, and from it on the commits are all there.
func TestCollectDuringRestore(t *testing.T) {
	store, _, _ := newEtcd(t)
	b := fileBackend(t)
	w := newGCWorld(t, store, b, gcGrace)
	src := w.createRepo("src")
	ids := []graveler.CommitID{w.mustCommit("src", "main", "a/", 60), w.mustCommit("src", "main", "b/", 60)}
	if _, err := w.g.CreateBranch(w.ctx, "src", "dev", graveler.Ref(ids[0])); err != nil {
		t.Fatal(err)
	}
	var recs []*graveler.RefsRecord
	for r, err := range w.g.DumpRefs(w.ctx, "src") {
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	dst := b.ns("restored")
	var names []string
	for name := range w.objects(src) {
		if name == graveler.NamespaceMarker {
			continue
		}
		data, err := b.blobs.Get(w.ctx, src, name)
		if err != nil {
			t.Fatal(err)
		}
		w.put(dst, name, string(data))
		names = append(names, name)
	}
	// Objects no restored commit references: the collection must sweep
	// them, or it did not look at the namespace at all.
	garbage := w.writeTree(dst, []graveler.ValueRecord{{Key: graveler.Key("zz/garbage"), Value: &graveler.Value{Identity: []byte("g"), Data: []byte("g")}}})
	b.age(t, dst, append(names, garbage...), 10*time.Hour)
	if _, err := w.g.CreateBareRepository(w.ctx, "restored", dst, "main"); err != nil {
		t.Fatal(err)
	}
	c := cleaner.New(store, w.cleanerConfig(gcGrace))
	collected := false
	err := w.g.RestoreRefs(w.ctx, "restored", func(yield func(*graveler.RefsRecord, error) bool) {
		for i, r := range recs {
			if !yield(r, nil) {
				return
			}
			if r.Branch != nil && !collected {
				collected = true
				if sum, err := c.Collect(w.ctx); err != nil || sum.Errors != 0 {
					t.Errorf("collect after record %d: %v, %+v", i, err, sum)
				}
			}
		}
	})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if !collected {
		t.Fatal("the dump had no branch: no collection ran mid-restore")
	}
	left := w.objects(dst)
	for _, name := range garbage {
		if left[name] {
			t.Fatalf("%s, referenced by no commit, survived: the collection did not sweep the namespace", name)
		}
	}
	for _, id := range ids {
		cr, err := w.g.GetCommit(w.ctx, "restored", graveler.Ref(id))
		if err != nil {
			t.Fatal(err)
		}
		if err := committed.CheckTreeStored(w.ctx, b.blobs, dst, cr.MetaRangeID); err != nil {
			t.Errorf("restored commit %s: %v", id, err)
		}
	}
}

// TestGCKeepsPacksOfAReplacedRoot: the same entries written again (a
// revert, a retried commit) store a root of an ID already stored, which
// replaces it and names this write's packs. The packs the replaced root
// named hold objects of a live tree, and a reader that read the root
// before still reads through them, so the collection keeps them: a pack
// is kept while any object in it is live, whichever copy trees name.
func TestGCKeepsPacksOfAReplacedRoot(t *testing.T) {
	gcBackends(t, func(t *testing.T, b gcBackend) {
		store, _, _ := newEtcd(t)
		w := newGCWorld(t, store, b, gcGrace)
		ns := w.createRepo("zeta")
		live := map[graveler.RepositoryID]graveler.StorageNamespace{"zeta": ns}
		id := w.mustCommit("zeta", "main", "z/", 80)
		c, err := w.g.GetCommit(w.ctx, "zeta", graveler.Ref(id))
		if err != nil {
			t.Fatal(err)
		}
		packsOf := func() map[string]bool {
			out := map[string]bool{}
			if err := committed.TreeObjects(w.ctx, b.blobs, ns, c.MetaRangeID, func(o committed.TreeObject) error {
				if o.Blob != o.Name() {
					out[o.Blob] = true
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			return out
		}
		first := packsOf()
		// A reader that read the tree before the root is replaced.
		reader := committed.NewManager(b.blobs, w.cfg)
		want := listTree(t, reader, ns, c.MetaRangeID)

		var recs []graveler.ValueRecord
		for _, k := range slices.Sorted(maps.Keys(want)) {
			identity, data, _ := strings.Cut(want[k], "\x00")
			recs = append(recs, graveler.ValueRecord{Key: graveler.Key(k), Value: &graveler.Value{Identity: []byte(identity), Data: []byte(data)}})
		}
		again := w.writeTree(ns, recs)
		if !slices.Contains(again, committed.MetaRangeObjectName(c.MetaRangeID)) {
			t.Fatalf("the same entries made another tree: %v", again)
		}
		second := packsOf()
		for p := range first {
			if second[p] {
				t.Fatalf("the root was not replaced: it still names %s", p)
			}
		}
		b.age(t, ns, slices.Collect(maps.Keys(w.objects(ns))), 10*time.Hour)

		sum, err := cleaner.New(store, w.cleanerConfig(gcGrace)).RunOnce(w.ctx)
		if err != nil || sum.Errors != 0 || sum.GC.Deleted != 0 {
			t.Fatalf("run: %v, %+v", err, sum.GC)
		}
		after := w.objects(ns)
		for p := range first {
			if !after[p] {
				t.Errorf("%s, holding objects of a live tree, was deleted", p)
			}
		}
		w.checkAcked(live)
		if got := listTree(t, reader, ns, c.MetaRangeID); !maps.Equal(got, want) {
			t.Errorf("the reader of the replaced root reads %d entries, had %d", len(got), len(want))
		}
	})
}

// listTree reads every entry of a tree through m.
func listTree(t *testing.T, m *committed.Manager, ns graveler.StorageNamespace, id graveler.MetaRangeID) map[string]string {
	t.Helper()
	it, err := m.List(context.Background(), ns, id)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string]string{}
	for it.Next() {
		v := it.Value()
		out[string(v.Key)] = string(v.Identity) + "\x00" + string(v.Data)
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestGCKeepsAPackWhoseIndexDoesNotRead: a pack no tree names whose index
// is damaged is kept (what it holds is unknown) and logged, and the rest
// of its namespace is collected: one damaged pack must not stop a
// namespace's collection on every run.
func TestGCKeepsAPackWhoseIndexDoesNotRead(t *testing.T) {
	store, _, _ := newEtcd(t)
	b := fileBackend(t)
	w := newGCWorld(t, store, b, gcGrace)
	ns := w.createRepo("eta")
	w.mustCommit("eta", "main", "k/", 30)
	damaged, other := w.plant(ns, 20), w.plant(ns, 20)
	var pack string
	for _, n := range damaged {
		if kind, _, _ := committed.ParseObjectName(n); kind == committed.ObjectPack {
			pack = n
		}
	}
	data, err := b.blobs.Get(w.ctx, ns, pack)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 0xff // the footer's checksum
	if err := b.blobs.Put(w.ctx, ns, pack, data); err != nil {
		t.Fatal(err)
	}
	b.age(t, ns, slices.Collect(maps.Keys(w.objects(ns))), 10*time.Hour)
	sum, err := cleaner.New(store, w.cleanerConfig(gcGrace)).RunOnce(w.ctx)
	if err != nil || sum.Errors != 0 || sum.GC.NamespacesAborted != 0 {
		t.Fatalf("run: %v, %+v, gc %+v", err, sum, sum.GC)
	}
	after := w.objects(ns)
	if !after[pack] {
		t.Error("a pack whose index does not read was deleted")
	}
	for _, n := range append(slices.Clone(other), damaged...) {
		if n != pack && after[n] {
			t.Errorf("%s, old and unreferenced, was kept", n)
		}
	}
	w.checkAcked(map[graveler.RepositoryID]graveler.StorageNamespace{"eta": ns})
}
