package cleaner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/gcfence"
	"graveler/graveler/ref"
	"graveler/keys"
)

// Defaults of the collection of committed objects.
const (
	// DefaultGCInterval is the least time between two collections of one
	// Cleaner (Run's passes come more often).
	DefaultGCInterval = time.Hour
	// DefaultGCGrace is committed.DefaultGCGrace: gravelerd's setting
	// unless it was changed, and longer than any commit takes.
	DefaultGCGrace = committed.DefaultGCGrace
	// gcReadParallelism bounds the metaranges one namespace's mark reads
	// at once; gcDeleteParallelism the Stat-and-delete calls of a sweep.
	gcReadParallelism   = 8
	gcDeleteParallelism = 8
)

// GCConfig tunes the collection of committed objects (ranges and
// metaranges) that no commit references. Zero values take the defaults.
type GCConfig struct {
	// Enabled runs a collection after the reclaim pass of RunOnce, at most
	// once per Interval. It needs Config.Blobs.
	Enabled bool
	// Grace protects objects modified within it (default DefaultGCGrace).
	// It must be at least gravelerd's committed.Config.GCGrace, which is
	// how young a commit keeps the objects it references.
	Grace time.Duration
	// Interval is the least time between collections (default
	// DefaultGCInterval); a Cleaner's first pass always collects.
	Interval time.Duration
	// DeleteRate bounds the objects deleted per second, by collections
	// and by the emptying of deleted repositories' namespaces (0: no
	// bound).
	DeleteRate float64
	// Fence tunes the sweep records that keep a deletion from racing a
	// commit that writes the same object (package gcfence).
	Fence gcfence.Config
}

func (g GCConfig) withDefaults() GCConfig {
	if g.Grace <= 0 {
		g.Grace = DefaultGCGrace
	}
	if g.Interval <= 0 {
		g.Interval = DefaultGCInterval
	}
	return g
}

// GCSummary is what one collection did, or in a dry run would do.
type GCSummary struct {
	// Revision is the etcd revision the mark read every record at (0:
	// the store reads at no one revision; the records were read after
	// MarkTime).
	Revision int64 `json:"revision"`
	// MarkTime is when the mark began; objects modified after MarkTime
	// minus Grace were kept whatever references them.
	MarkTime time.Time     `json:"mark_time"`
	Grace    time.Duration `json:"grace_ns"`
	// Repositories and Commits: the live repositories and their commit
	// records, every one a root.
	Repositories int `json:"repositories"`
	Commits      int `json:"commits"`
	// Namespaces: storage namespaces swept to the end. NamespacesAborted:
	// sweeps stopped by a read that failed (nothing more was deleted
	// there). NamespacesHeld: left alone because a deleted repository
	// that the cleaner has not reclaimed yet holds them too, or because
	// a repository on them has no branch (being created, or a bare one
	// being restored: the commits of its objects may not be loaded yet).
	Namespaces        int `json:"namespaces"`
	NamespacesAborted int `json:"namespaces_aborted"`
	NamespacesHeld    int `json:"namespaces_held"`
	// NamespacesBusy: skipped because another collection was sweeping
	// them (its sweep record was running).
	NamespacesBusy int `json:"namespaces_busy"`
	// Marked: metaranges and ranges reachable from the roots.
	Marked int64 `json:"marked"`
	// Listed: committed blobs listed by the sweeps: metaranges and ranges
	// stored on their own, and packs.
	Listed int64 `json:"listed"`
	// Kept: listed blobs kept because they hold a marked object (a pack
	// is kept while any object in it is marked). Every listed blob is
	// kept, kept young or deleted.
	Kept int64 `json:"kept"`
	// Deleted and BytesDeleted: unreferenced objects older than the grace
	// deleted (in a dry run: that would be).
	Deleted      int64 `json:"deleted"`
	BytesDeleted int64 `json:"bytes_deleted"`
	// KeptYoung: unreferenced objects kept because they are younger than
	// the grace (a commit in flight may be about to reference them).
	KeptYoung int64 `json:"kept_young"`
	// Aborted: the collection stopped before sweeping anything (a record
	// that does not decode, or the store could not be read).
	Aborted  bool          `json:"aborted"`
	Duration time.Duration `json:"duration_ns"`
}

// gcDue reports whether this pass collects, and if so notes it started.
func (c *Cleaner) gcDue(now time.Time) bool {
	if !c.cfg.GC.Enabled {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.lastGC.IsZero() && now.Sub(c.lastGC) < c.cfg.GC.Interval {
		return false
	}
	c.lastGC = now
	return true
}

// gcNamespace is one storage namespace to sweep: what its repositories'
// commits reference.
type gcNamespace struct {
	// ns is the namespace as a repository record spells it.
	ns    graveler.StorageNamespace
	repos []string
	// uids are the unique ids of repos' incarnations at the mark.
	uids []graveler.UniqueID
	// metaranges referenced by a commit of a repository on ns.
	metaranges map[graveler.MetaRangeID]bool
	// marked holds the names (committed.TreeObject.Name) of every
	// referenced object, wherever its copies are stored.
	marked map[string]bool
	// packs holds the packs the marked trees name: kept without reading
	// their index.
	packs map[string]bool
	// sweep is the running sweep record, from the first delete on.
	sweep   *gcfence.Sweep
	sweepMu sync.Mutex
}

// gcRun is one collection.
type gcRun struct {
	r      *pass
	sum    *GCSummary
	blobs  committed.BlobStore
	cutoff time.Time
	limit  *rateLimiter
	// fence records each namespace's sweep before its first delete; run
	// names this collection in those records.
	fence *gcfence.Fence
	run   string
	// hooks for tests (nil in production).
	hooks *gcHooks
}

// gcHooks let tests act between a collection's steps.
type gcHooks struct {
	// afterMark runs once every root was read and before any namespace
	// is swept.
	afterMark func()
	// beforeDelete runs before an object is checked again and deleted.
	beforeDelete func(ns graveler.StorageNamespace, name string)
	// beforeRemove runs after that check, right before the delete.
	beforeRemove func(ns graveler.StorageNamespace, name string)
}

// collect runs one collection of unreferenced committed objects. A
// failure is counted in the pass (Summary.Errors) and described; what
// was deleted before it was unreferenced and old.
func (r *pass) collect() {
	start := time.Now()
	g := &gcRun{r: r, sum: &GCSummary{Grace: r.c.cfg.GC.Grace}, blobs: r.c.cfg.Blobs, limit: newRateLimiter(r.c.cfg.GC.DeleteRate), hooks: r.c.gcHooks,
		fence: gcfence.New(r.c.store, r.c.cfg.GC.Fence), run: ref.NewID()}
	r.sum.GC = g.sum
	defer func() {
		g.sum.Duration = time.Since(start)
		observeGC(g.sum, r.c.cfg.DryRun)
		r.c.log.Info("cleaner: collection "+r.did("done", "done (dry run)"), zap.Int64("revision", g.sum.Revision),
			zap.Int("repositories", g.sum.Repositories), zap.Int("commits", g.sum.Commits),
			zap.Int("namespaces", g.sum.Namespaces), zap.Int("namespaces_aborted", g.sum.NamespacesAborted),
			zap.Int("namespaces_held", g.sum.NamespacesHeld), zap.Int("namespaces_busy", g.sum.NamespacesBusy), zap.Int64("marked", g.sum.Marked),
			zap.Int64("listed", g.sum.Listed), zap.Int64(r.did("deleted", "would_delete"), g.sum.Deleted),
			zap.Int64("bytes", g.sum.BytesDeleted), zap.Int64("kept", g.sum.Kept), zap.Int64("kept_young", g.sum.KeptYoung),
			zap.Bool("aborted", g.sum.Aborted), zap.Duration("duration", g.sum.Duration))
	}()
	if g.blobs == nil {
		g.sum.Aborted = true
		r.fail(errors.New("no blob store configured"), "garbage collection skipped")
		return
	}
	spaces, err := g.mark()
	if err != nil && r.ctx.Err() != nil {
		r.cutShort() // the run's time is up: not a failure
		return
	}
	if err != nil {
		g.sum.Aborted = true
		r.fail(err, "garbage collection aborted before sweeping")
		return
	}
	if g.hooks != nil && g.hooks.afterMark != nil {
		g.hooks.afterMark()
	}
	for _, key := range slices.Sorted(maps.Keys(spaces)) {
		if r.ctx.Err() != nil {
			r.cutShort()
			return
		}
		sp := spaces[key]
		if err := g.sweep(sp); err != nil {
			if r.ctx.Err() != nil {
				r.cutShort() // the run's time is up: not a failure
				return
			}
			if errors.Is(err, gcfence.ErrSweepBusy) {
				// Another collector is deleting there now: it does this
				// namespace's work, and two sweeps' records must not
				// interleave.
				g.sum.NamespacesBusy++
				r.c.log.Info("cleaner: another collection is sweeping this storage namespace; skipped", zap.String("namespace", string(sp.ns)), zap.Error(err))
				continue
			}
			if errors.Is(err, committed.ErrBlobNotFound) && g.ownerGone(sp) {
				// A repository of the namespace was deleted since the
				// mark and its reclaim removed objects the mark still
				// walks: nothing of it is collected, and nothing is
				// wrong.
				g.sum.NamespacesHeld++
				r.c.log.Info("cleaner: storage namespace left by a repository deleted since the mark; not collected this run",
					zap.String("namespace", string(sp.ns)), zap.Strings("repositories", sp.repos), zap.Error(err))
				continue
			}
			g.sum.NamespacesAborted++
			r.fail(err, "garbage collection of namespace "+string(sp.ns)+" aborted", zap.String("namespace", string(sp.ns)))
			continue
		}
		g.sum.Namespaces++
	}
}

// mark reads every root at one revision (or, on a store without one,
// after the mark time) and every metarange they reference. It fails on
// anything it cannot read or decode that could hold a root: a
// repository record, a namespace claim's key, a commit record.
func (g *gcRun) mark() (map[string]*gcNamespace, error) {
	r := g.r
	// The mark time comes first: a commit recorded after the revision is
	// read refreshed the objects its metarange references after this,
	// minus how long a commit may take to record (less than half the
	// grace), so they were modified after the cutoff.
	g.sum.MarkTime = r.c.cfg.Now()
	g.cutoff = g.sum.MarkTime.Add(-g.sum.Grace)
	snap, err := r.c.snapshot(r.ctx)
	if err != nil {
		return nil, err
	}
	g.sum.Revision = snap.revision()

	type incarnation struct{ repo, uid string }
	live := map[incarnation]graveler.StorageNamespace{}
	held := map[string]bool{}
	for e, err := range snap.scan(r.ctx, keys.Graveler(), keys.ReposPrefix) {
		if err != nil {
			return nil, fmt.Errorf("read repository records: %w", err)
		}
		name, err := keys.ParseRepository(e.Key)
		if err != nil {
			return nil, fmt.Errorf("repository record key %q: %w", e.Key, err)
		}
		rec, err := ref.DecodeRepository(e.Value)
		if err != nil {
			// Its namespace is unknown: any sweep could be of its objects.
			return nil, fmt.Errorf("repository record %s does not decode: %w", name, err)
		}
		if rec.State == graveler.RepositoryStateDeleting {
			held[nsKey(rec.StorageNamespace)] = true
			continue
		}
		live[incarnation{name, string(rec.UniqueID)}] = rec.StorageNamespace
	}
	// A claim of an incarnation that is not live is a deleted repository
	// the cleaner has not reclaimed yet: its objects are the reclaim's.
	for e, err := range snap.scan(r.ctx, keys.Graveler(), keys.NamespacesPrefix) {
		if err != nil {
			return nil, fmt.Errorf("read namespace claims: %w", err)
		}
		norm, err := keys.ParseNamespaceClaim(e.Key)
		if err != nil {
			return nil, fmt.Errorf("namespace claim key %q: %w", e.Key, err)
		}
		c, err := ref.DecodeNamespaceClaim(e.Key, e.Value)
		if err != nil {
			r.c.log.Warn("cleaner: namespace claim does not decode; its namespace is not collected", zap.String("namespace", norm), zap.Error(err))
			held[norm] = true
			continue
		}
		if _, ok := live[incarnation{string(c.Repository), string(c.UniqueID)}]; !ok || c.Reclaiming {
			held[norm] = true
		}
	}

	spaces := map[string]*gcNamespace{}
	for _, inc := range slices.SortedFunc(maps.Keys(live), func(a, b incarnation) int {
		return strings.Compare(a.repo+"/"+a.uid, b.repo+"/"+b.uid)
	}) {
		ns := live[inc]
		key := nsKey(ns)
		sp := spaces[key]
		if sp == nil {
			sp = &gcNamespace{ns: ns, metaranges: map[graveler.MetaRangeID]bool{}, marked: map[string]bool{}, packs: map[string]bool{}}
			spaces[key] = sp
		}
		sp.repos = append(sp.repos, inc.repo)
		sp.uids = append(sp.uids, graveler.UniqueID(inc.uid))
		g.sum.Repositories++
		part := keys.RepositoryPartition(inc.repo, inc.uid)
		// A repository with no branch is bare (RestoreRefs loads its
		// commits, then its branches) or still being created: the objects
		// in its namespace may belong to commits not loaded yet.
		branched := false
		for _, err := range snap.scan(r.ctx, part, keys.BranchesPrefix) {
			if err != nil {
				return nil, fmt.Errorf("read branches of repository %s: %w", inc.repo, err)
			}
			branched = true
			break
		}
		if !branched {
			held[key] = true
		}
		for e, err := range snap.scan(r.ctx, part, keys.CommitsPrefix) {
			if err != nil {
				return nil, fmt.Errorf("read commits of repository %s: %w", inc.repo, err)
			}
			c, err := ref.DecodeCommit(e.Value)
			if err != nil {
				return nil, fmt.Errorf("commit record %q of repository %s does not decode: %w", e.Key, inc.repo, err)
			}
			g.sum.Commits++
			if c.MetaRangeID != "" {
				sp.metaranges[c.MetaRangeID] = true
			}
		}
	}
	for key, sp := range spaces {
		if held[key] {
			g.sum.NamespacesHeld++
			r.c.log.Info("cleaner: storage namespace held by a deleted repository not yet reclaimed, or by one with no branch (being created or restored); not collected this run",
				zap.String("namespace", string(sp.ns)), zap.Strings("repositories", sp.repos))
			delete(spaces, key)
		}
	}
	for _, sp := range spaces {
		g.sum.Marked += int64(len(sp.metaranges))
	}
	return spaces, nil
}

// ownerGone reports whether a repository that held sp at the mark is no
// longer that active incarnation: deleted (its namespace then belongs to
// its reclaim, which may have emptied it), or deleted and created again.
// A read that fails says nothing, and counts as not gone.
func (g *gcRun) ownerGone(sp *gcNamespace) bool {
	for i, repo := range sp.repos {
		rec, found, err := g.r.getRecord(repo)
		if err != nil {
			return false
		}
		if !found || rec.UniqueID != sp.uids[i] || rec.State == graveler.RepositoryStateDeleting {
			return true
		}
	}
	return false
}

// nsKey is the spelling namespaces are compared by: two repositories on
// one location share one sweep, whatever their records say.
func nsKey(ns graveler.StorageNamespace) string {
	if norm, err := graveler.NormalizeStorageNamespace(ns); err == nil {
		return string(norm)
	}
	return string(ns)
}

// sweep marks the ranges of sp's metaranges, then deletes the committed
// objects of sp that are neither marked nor younger than the grace. It
// stops at the first read that fails.
func (g *gcRun) sweep(sp *gcNamespace) (err error) {
	if err := g.markRanges(sp); err != nil {
		return err
	}
	defer func() {
		if sp.sweep == nil {
			return
		}
		// A sweep left running holds commits back until its deadline.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(g.r.ctx), 10*time.Second)
		defer cancel()
		if ferr := sp.sweep.Finish(ctx); ferr != nil && err == nil {
			err = fmt.Errorf("end sweep record: %w", ferr)
		}
	}()
	// Roots and ranges first, packs last: a sweep that stops part way (a
	// read that failed) has removed unreferenced old roots before any
	// pack they name.
	for _, prefix := range []string{committed.MetaRangesPrefix, committed.RangesPrefix, committed.PacksPrefix} {
		err := g.blobs.List(g.r.ctx, sp.ns, prefix, func(page []committed.BlobInfo) error {
			var doomed []committed.BlobInfo
			for _, o := range page {
				kind, id, ok := committed.ParseObjectName(o.Name)
				if !ok {
					continue // not a committed object: never ours to delete
				}
				g.sum.Listed++
				switch {
				case sp.marked[o.Name], sp.packs[o.Name]:
					g.sum.Kept++
				case !o.ModTime.Before(g.cutoff):
					g.sum.KeptYoung++
				case kind == committed.ObjectPack:
					live, err := g.packLive(sp, id, o.Size)
					if err != nil {
						return err
					}
					if live {
						g.sum.Kept++
					} else {
						doomed = append(doomed, o)
					}
				default:
					doomed = append(doomed, o)
				}
			}
			return g.deleteAll(sp, doomed)
		})
		if err != nil {
			return fmt.Errorf("sweep %s: %w", prefix, err)
		}
	}
	return nil
}

// packLive reports whether a pack no marked tree names holds a marked
// object anyway: a copy of an object a live tree names elsewhere, such as
// the packs of a root that another writer's root of the same ID replaced
// (a reader may still hold the replaced root). An object is live by what
// it is, not by which copy of it a tree names.
func (g *gcRun) packLive(sp *gcNamespace, id string, size int64) (bool, error) {
	objs, err := committed.ReadPackIndex(g.r.ctx, g.blobs, sp.ns, id, size)
	if errors.Is(err, committed.ErrBlobNotFound) {
		// Deleted since it was listed (another collection): deleteOne
		// finds it gone.
		return false, nil
	}
	if errors.Is(err, committed.ErrCorrupt) {
		// What it holds is unknown, so it is kept; a damaged pack must
		// not stop the namespace's collection on every run. gravelerfsck
		// reports the objects a tree names in it.
		g.r.c.log.Warn("cleaner: pack index does not read; pack kept", zap.String("namespace", string(sp.ns)),
			zap.String("pack", committed.PackObjectName(id)), zap.Error(err))
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the index of pack %s: %w", id, err)
	}
	for _, o := range objs {
		if sp.marked[o.Name()] {
			return true, nil
		}
	}
	return false, nil
}

// markRanges reads every tree sp's commits reference and marks all its
// objects: its root, inner nodes and ranges. A subtree already marked (it
// is shared with a tree walked before) is not read again. A node that
// cannot be read aborts the sweep: what it references is unknown, not
// unreferenced. Roots are counted in Marked by the caller.
func (g *gcRun) markRanges(sp *gcNamespace) error {
	ids := slices.Sorted(maps.Keys(sp.metaranges))
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		next  = make(chan graveler.MetaRangeID)
	)
	ctx, cancel := context.WithCancel(g.r.ctx)
	defer cancel()
	mark := func(o committed.TreeObject) error {
		mu.Lock()
		defer mu.Unlock()
		if o.Blob != o.Name() {
			sp.packs[o.Blob] = true
		}
		name := o.Name()
		if sp.marked[name] {
			// The same ID holds the same subtree, whichever copy: its
			// objects are marked by name already. Another copy's packs
			// are kept by what they hold (packLive).
			return committed.ErrSkipSubtree
		}
		sp.marked[name] = true
		if o.Kind != committed.ObjectMetaRange || !sp.metaranges[graveler.MetaRangeID(o.ID)] {
			g.sum.Marked++
		}
		return nil
	}
	for range min(gcReadParallelism, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range next {
				// A subtree skipped is being walked by another worker,
				// which ends before the sweep starts (or fails it).
				err := committed.TreeObjects(ctx, g.blobs, sp.ns, id, mark)
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("read metarange %s: %w", id, err)
						cancel()
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			break
		}
		next <- id
	}
	close(next)
	wg.Wait()
	if first == nil && g.r.ctx.Err() != nil {
		first = g.r.ctx.Err()
	}
	return first
}

// deleteAll deletes objects found unreferenced and old, each after one
// more Stat: an object written again since it was listed (a commit
// storing the same content) is young again and kept.
func (g *gcRun) deleteAll(sp *gcNamespace, objs []committed.BlobInfo) error {
	if len(objs) == 0 {
		return nil
	}
	if err := g.startSweep(sp); err != nil {
		return err
	}
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		next  = make(chan committed.BlobInfo)
	)
	ctx, cancel := context.WithCancel(g.r.ctx)
	defer cancel()
	for range min(gcDeleteParallelism, len(objs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range next {
				deleted, young, size, err := g.deleteOne(ctx, sp, o)
				mu.Lock()
				switch {
				case err != nil:
					if first == nil {
						first = err
						cancel()
					}
				case young:
					g.sum.KeptYoung++
				case deleted:
					g.sum.Deleted++
					g.sum.BytesDeleted += size
				}
				mu.Unlock()
			}
		}()
	}
	for _, o := range objs {
		if ctx.Err() != nil {
			break
		}
		next <- o
	}
	close(next)
	wg.Wait()
	if first == nil && g.r.ctx.Err() != nil {
		first = g.r.ctx.Err()
	}
	return first
}

// startSweep records the sweep of sp before its first object is checked
// for deletion: a commit that writes or refreshes an object after that
// check learns of the sweep and makes sure its objects survived it
// (gcfence). A dry run deletes nothing and records nothing.
func (g *gcRun) startSweep(sp *gcNamespace) error {
	if g.r.c.cfg.DryRun {
		return nil
	}
	sp.sweepMu.Lock()
	defer sp.sweepMu.Unlock()
	if sp.sweep != nil {
		return nil
	}
	s, err := g.fence.StartSweep(g.r.ctx, sp.ns, g.run)
	if err != nil {
		return fmt.Errorf("record sweep: %w", err)
	}
	sp.sweep = s
	return nil
}

func (g *gcRun) deleteOne(ctx context.Context, sp *gcNamespace, o committed.BlobInfo) (deleted, young bool, size int64, err error) {
	ns := sp.ns
	if g.hooks != nil && g.hooks.beforeDelete != nil {
		g.hooks.beforeDelete(ns, o.Name)
	}
	st, err := g.blobs.Stat(ctx, ns, o.Name)
	if errors.Is(err, committed.ErrBlobNotFound) {
		return false, false, 0, nil // deleted meanwhile (another cleaner)
	}
	if err != nil {
		return false, false, 0, fmt.Errorf("stat %s: %w", o.Name, err)
	}
	if !st.ModTime.Before(g.cutoff) {
		return false, true, 0, nil
	}
	log := []zap.Field{zap.String("namespace", string(ns)), zap.String("object", o.Name), zap.Int64("bytes", st.Size), zap.Time("modified", st.ModTime)}
	if g.r.c.cfg.DryRun {
		g.r.c.log.Debug("cleaner: would delete unreferenced object", log...)
		return true, false, st.Size, nil
	}
	if err := g.limit.wait(ctx); err != nil {
		return false, false, 0, err
	}
	// Unreferenced by every commit and older than the grace when Stat
	// ran, after the sweep was recorded: a commit writing or refreshing
	// it since will find it gone and retry (gcfence). Permit refuses once
	// the record's deadline is near, so a stalled collector never deletes
	// behind the back of a commit that stopped waiting for it.
	if err := sp.sweep.Permit(ctx); err != nil {
		return false, false, 0, err
	}
	if g.hooks != nil && g.hooks.beforeRemove != nil {
		g.hooks.beforeRemove(ns, o.Name)
	}
	if err := g.blobs.Delete(ctx, ns, o.Name); err != nil {
		return false, false, 0, fmt.Errorf("delete %s: %w", o.Name, err)
	}
	g.r.c.log.Debug("cleaner: deleted unreferenced object", log...)
	return true, false, st.Size, nil
}

// emptyNamespace deletes every object in the storage namespace of a
// deleted repository incarnation, the last data step of its reclaim: the
// namespace is claimed by this incarnation alone (marked reclaiming), so
// nothing else writes there. The marker a create leaves
// (graveler.NamespaceMarker) is deleted last, and only if it names this
// incarnation. Without Config.Blobs it does nothing. It returns how many
// objects it deleted (in a dry run: would delete).
func (r *pass) emptyNamespace(ns graveler.StorageNamespace, repo, uid string) (int64, error) {
	log := []zap.Field{zap.String("repository", repo), zap.String("unique_id", uid), zap.String("namespace", string(ns))}
	blobs := r.c.cfg.Blobs
	if blobs == nil {
		r.c.log.Warn("cleaner: no blob store configured; the storage namespace of a deleted repository is left as it is", log...)
		return 0, nil
	}
	limit := newRateLimiter(r.c.cfg.GC.DeleteRate)
	var n int64
	marker := false
	foreign := 0
	err := blobs.List(r.ctx, ns, "", func(page []committed.BlobInfo) error {
		for _, o := range page {
			if o.Name == graveler.NamespaceMarker {
				marker = true
				continue
			}
			if committed.ValidateBlobName(o.Name) != nil {
				// Not a name Graveler writes, and not one the store can
				// delete: someone else's, left in place.
				foreign++
				continue
			}
			if !r.c.cfg.DryRun {
				if err := limit.wait(r.ctx); err != nil {
					return err
				}
				// A blob of a deleted repository's namespace, which only
				// the reclaim writes to now.
				if err := blobs.Delete(r.ctx, ns, o.Name); err != nil {
					return fmt.Errorf("delete %s: %w", o.Name, err)
				}
			}
			n++
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("empty storage namespace %s: %w", ns, err)
	}
	if marker {
		mine, err := markerNames(r.ctx, blobs, ns, repo, uid)
		if err != nil {
			return n, fmt.Errorf("empty storage namespace %s: %w", ns, err)
		}
		if mine {
			if !r.c.cfg.DryRun {
				// The deleted incarnation's own marker, read just now.
				if err := blobs.Delete(r.ctx, ns, graveler.NamespaceMarker); err != nil {
					return n, fmt.Errorf("empty storage namespace %s: delete %s: %w", ns, graveler.NamespaceMarker, err)
				}
			}
			n++
		} else {
			r.c.log.Warn("cleaner: the storage namespace marker names another repository; kept", log...)
		}
	}
	if foreign > 0 {
		r.c.log.Warn("cleaner: objects with names Graveler never writes left in the storage namespace of a deleted repository",
			append(log, zap.Int("objects", foreign))...)
	}
	if !r.c.cfg.DryRun {
		gcNamespaceObjectsDeleted.Add(float64(n))
	}
	r.c.log.Info("cleaner: "+r.did("emptied", "would empty")+" storage namespace of deleted repository", append(log, zap.Int64("objects", n))...)
	return n, nil
}

// markerNames reports whether the namespace marker in ns names incarnation
// uid of repo. One that cannot be read as a marker names no one.
func markerNames(ctx context.Context, blobs committed.BlobStore, ns graveler.StorageNamespace, repo, uid string) (bool, error) {
	data, err := blobs.Get(ctx, ns, graveler.NamespaceMarker)
	if errors.Is(err, committed.ErrBlobNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var m struct {
		Repository string `json:"repository"`
		UniqueID   string `json:"unique_id"`
	}
	if json.Unmarshal(data, &m) != nil {
		return false, nil
	}
	return m.Repository == repo && m.UniqueID == uid, nil
}

// rateLimiter spaces calls to wait at most rate per second (a burst of
// one, so deletes never come in bunches); nil waits for nothing. Safe for
// concurrent use.
type rateLimiter struct{ l *rate.Limiter }

func newRateLimiter(perSecond float64) *rateLimiter {
	if perSecond <= 0 {
		return nil
	}
	return &rateLimiter{l: rate.NewLimiter(rate.Limit(perSecond), 1)}
}

func (l *rateLimiter) wait(ctx context.Context) error {
	if l == nil {
		return ctx.Err()
	}
	return l.l.Wait(ctx)
}
