package cleaner_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"graveler/cleaner"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/gcfence"
	"graveler/graveler/gravelertest"
	"graveler/keys"
	"graveler/kv"
)

// gatedBlobs holds the Put of one object until released, and says when
// it entered and when it finished.
type gatedBlobs struct {
	committed.BlobStore
	target  string
	entered chan struct{}
	release chan struct{}
	done    chan struct{}
	once    sync.Once
}

func (g *gatedBlobs) Put(ctx context.Context, ns graveler.StorageNamespace, name string, data []byte) error {
	if name != g.target {
		return g.BlobStore.Put(ctx, ns, name, data)
	}
	first := false
	g.once.Do(func() { first = true })
	if !first {
		return g.BlobStore.Put(ctx, ns, name, data)
	}
	close(g.entered)
	<-g.release
	err := g.BlobStore.Put(ctx, ns, name, data)
	close(g.done)
	return err
}

// TestGCFenceRewriteRace: a commit stores again an object the collector
// found unreferenced and old, after the collector's last check of it and
// before its delete. The commit must not be acknowledged with that object
// missing: fenced, it fails retryably (gcfence.ErrSwept, UNAVAILABLE),
// whether it began before the sweep was recorded or during it, the branch
// does not move, and its retry commits the whole tree. A commit whose
// caller gives up while it waits for the sweep is not recorded either.
// Unfenced (as before the fence), the same ordering acknowledges a commit
// with a hole, which is what the fenced cases must not do.
//
// The object rewritten is a range, or the tree's root read through
// gravelerd's range cache: the cache keeps its copy of an object the
// collector deleted, so the fence's check must ask the store itself
// whether each object of the tree, the root included, is still there.
func TestGCFenceRewriteRace(t *testing.T) {
	for _, c := range []struct {
		mode   string
		target committed.ObjectKind
		cached bool
	}{
		{"before-sweep", committed.ObjectRange, false},
		{"during-sweep", committed.ObjectRange, false},
		{"gives-up", committed.ObjectRange, false},
		{"unfenced", committed.ObjectRange, false},
		{"during-sweep", committed.ObjectMetaRange, true},
		{"during-sweep", committed.ObjectRange, true},
		{"before-sweep", committed.ObjectMetaRange, false},
		{"unfenced", committed.ObjectMetaRange, false},
	} {
		name := c.mode
		if c.target == committed.ObjectMetaRange {
			name += "/root"
		}
		if c.cached {
			name += "/cached"
		}
		t.Run(name, func(t *testing.T) {
			gcBackends(t, func(t *testing.T, b gcBackend) { testGCFenceRewriteRace(t, b, c.mode, c.target, c.cached) })
		})
	}
}

func testGCFenceRewriteRace(t *testing.T, b gcBackend, mode string, targetKind committed.ObjectKind, cached bool) {
	store, _, _ := newEtcd(t)
	w := newGCWorld(t, store, b, gcGrace)
	if targetKind == committed.ObjectRange {
		// A range is stored again only where ranges are stored on their
		// own (as versions before packs wrote them): packs take fresh
		// names, and only a root is stored again under its own.
		w.cfg.Unpacked = true
	}
	ns := w.createRepo("eps")
	live := map[graveler.RepositoryID]graveler.StorageNamespace{"eps": ns}
	w.mustCommit("eps", "main", "k/", 20)
	recs := make([]graveler.ValueRecord, 50)
	for i := range recs {
		recs[i] = graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("same/%04d", i)), Value: &graveler.Value{Identity: fmt.Appendf(nil, "s%d", i), Data: []byte("same")}}
	}
	// The objects of a commit that failed: the same entries, so the same
	// objects, as the commit below.
	garbage := w.writeTree(ns, recs)
	b.age(t, ns, slices.Collect(maps.Keys(w.objects(ns))), 10*time.Hour)
	var target string
	for _, n := range garbage {
		if kind, _, _ := committed.ParseObjectName(n); kind == targetKind {
			target = n
			break
		}
	}
	if target == "" {
		t.Fatalf("no object of kind %v among %v", targetKind, garbage)
	}

	history, err := logOf(w.ctx, w.g, "eps", "main")
	if err != nil {
		t.Fatal(err)
	}
	initial := history[len(history)-1]
	if _, err := w.g.CreateBranch(w.ctx, "eps", "again", graveler.Ref(initial)); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.g.Set(w.ctx, "eps", "again", r.Key, *r.Value, graveler.SetOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	var blobs committed.BlobStore = b.blobs
	if cached {
		// As gravelerd composes it: the manager and the fence's check
		// both read through the cache.
		cs, err := committed.NewCachedBlobStore(b.blobs, committed.CacheConfig{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		blobs = cs
	}
	gate := &gatedBlobs{BlobStore: blobs, target: target, entered: make(chan struct{}), release: make(chan struct{}), done: make(chan struct{})}
	committer := gravelertest.New(t, store, gravelertest.Options{Blobs: gate, Committed: w.cfg, GCFence: mode != "unfenced"})
	commitCtx, giveUp := context.WithCancel(w.ctx)
	defer giveUp()
	type result struct {
		id  graveler.CommitID
		err error
	}
	res := make(chan result, 1)
	commit := func() {
		id, err := committer.Commit(commitCtx, "eps", "again", graveler.CommitParams{Committer: "gc-test", Message: "same content"})
		res <- result{id, err}
	}

	c := cleaner.New(store, w.cleanerConfig(gcGrace))
	var hooked bool
	c.SetGCHooks(nil, nil)
	cleaner.SetGCRemoveHook(c, func(_ graveler.StorageNamespace, name string) {
		if name != target || hooked {
			return
		}
		hooked = true
		// The collector has checked target (old) and is about to delete
		// it. The commit writes it now.
		if mode != "before-sweep" {
			go commit()
			<-gate.entered
		}
		close(gate.release)
		<-gate.done
		if mode == "gives-up" {
			giveUp()
		}
	})
	if mode == "before-sweep" {
		// The commit reads the sweep record, writes its first objects and
		// waits in the write of target; only then does the sweep begin.
		go commit()
		<-gate.entered
	}
	sum, err := c.Collect(w.ctx)
	if err != nil || sum.Errors != 0 {
		t.Fatalf("collect: %v, %+v", err, sum)
	}
	if !hooked {
		t.Fatalf("the collector never came to delete %s: %+v", target, sum.GC)
	}
	r := <-res
	after := w.objects(ns)

	if mode == "unfenced" {
		if r.err != nil {
			t.Fatalf("unfenced commit: %v", r.err)
		}
		if after[target] {
			t.Fatalf("%s survived: the ordering under test did not happen", target)
		}
		c, err := w.g.GetCommit(w.ctx, "eps", graveler.Ref(r.id))
		if err != nil {
			t.Fatal(err)
		}
		if err := committed.CheckTreeStored(w.ctx, b.blobs, ns, c.MetaRangeID); !errors.Is(err, committed.ErrBlobNotFound) {
			t.Fatalf("unfenced: acknowledged tree check = %v, want the hole the fence prevents", err)
		}
		return
	}

	switch mode {
	case "gives-up":
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("commit whose caller gave up: %v, %v", r.id, r.err)
		}
	default:
		if !errors.Is(r.err, gcfence.ErrSwept) || !errors.Is(r.err, graveler.ErrUnavailable) {
			t.Fatalf("commit racing the delete of an object it wrote: id %q, err %v; want ErrSwept", r.id, r.err)
		}
	}
	if after[target] {
		t.Fatalf("%s was not deleted: the ordering under test did not happen", target)
	}
	br, err := w.g.GetBranch(w.ctx, "eps", "again")
	if err != nil {
		t.Fatal(err)
	}
	if br.CommitID != initial {
		t.Fatalf("branch moved to %s by a commit that failed", br.CommitID)
	}
	// The retry stores the object again and commits the whole tree.
	id, err := committer.Commit(w.ctx, "eps", "again", graveler.CommitParams{Committer: "gc-test", Message: "same content, again"})
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	w.ack(committer, "eps", id, true)
	if len(w.acked) == 0 {
		t.Fatal("nothing acknowledged")
	}
	w.checkAcked(live)
	if !w.objects(ns)[target] {
		t.Fatalf("%s missing after the retry", target)
	}
}

// TestCleanerBackfillsClaims: a repository created before storage
// namespaces were claimed holds no claim; a cleaner pass gives it one
// (reported in the summary; a dry run only counts it), so a create on its
// namespace is refused, and once it is deleted its reclaim empties the
// namespace and frees it.
func TestCleanerBackfillsClaims(t *testing.T) {
	store, _, _ := newEtcd(t)
	b := fileBackend(t)
	w := newGCWorld(t, store, b, gcGrace)
	ns := w.createRepo("legacy")
	w.mustCommit("legacy", "main", "l/", 10)
	norm, err := graveler.NormalizeStorageNamespace(ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(w.ctx, keys.Graveler(), keys.NamespaceClaim(string(norm))); err != nil {
		t.Fatal(err)
	}

	dry := w.cleanerConfig(gcGrace)
	dry.DryRun = true
	sum, err := cleaner.New(store, dry).RunOnce(w.ctx)
	if err != nil || sum.Errors != 0 || sum.ClaimsBackfilled != 1 {
		t.Fatalf("dry run: %v, %+v", err, sum)
	}
	if _, _, err := store.Get(w.ctx, keys.Graveler(), keys.NamespaceClaim(string(norm))); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("dry run wrote a claim: %v", err)
	}

	sum, err = cleaner.New(store, w.cleanerConfig(gcGrace)).RunOnce(w.ctx)
	if err != nil || sum.Errors != 0 || sum.ClaimsBackfilled != 1 {
		t.Fatalf("pass: %v, %+v", err, sum)
	}
	if _, err := w.g.CreateRepository(w.ctx, "intruder", ns, "main"); !errors.Is(err, graveler.ErrNamespaceInUse) {
		t.Fatalf("create on a backfilled namespace: %v", err)
	}
	sum, err = cleaner.New(store, w.cleanerConfig(gcGrace)).RunOnce(w.ctx)
	if err != nil || sum.ClaimsBackfilled != 0 {
		t.Fatalf("second pass: %v, %+v", err, sum)
	}

	if err := w.g.DeleteRepository(w.ctx, "legacy"); err != nil {
		t.Fatal(err)
	}
	sum, err = cleaner.New(store, w.cleanerConfig(gcGrace)).RunOnce(w.ctx)
	if err != nil || sum.Errors != 0 || sum.RepositoriesReclaimed != 1 {
		t.Fatalf("reclaim: %v, %+v", err, sum)
	}
	if left := w.objects(ns); len(left) != 0 {
		t.Fatalf("namespace not emptied: %v", slices.Sorted(maps.Keys(left)))
	}
	if _, err := w.g.CreateRepository(w.ctx, "next", ns, "main"); err != nil {
		t.Fatalf("create on the freed namespace: %v", err)
	}
}
