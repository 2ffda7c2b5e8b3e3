package cleaner_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"graveler/cleaner"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/committed/blobtest"
	"graveler/graveler/gcfence"
	"graveler/graveler/gravelertest"
	"graveler/kv"
)

// gcCommitted makes ranges of about 8 keys, so that small commits span
// many ranges and pass most of them through.
func gcCommitted(grace time.Duration) committed.Config {
	// Ranges of about 8 keys and inner nodes of about 4 children: small
	// repositories have trees of several levels.
	return committed.Config{MinRangeSize: 1, MaxRangeSize: 4 << 10, BoundaryMask: 7, BlockSize: 128,
		MinNodeSize: 1, MaxNodeSize: 4 << 10, NodeMask: 3, GCGrace: grace}
}

// gcBackend is a blob store under test and how to age its objects.
type gcBackend struct {
	name  string
	blobs committed.BlobStore
	// ns names a fresh namespace for repo.
	ns func(repo string) graveler.StorageNamespace
	// now is the store's clock, which the collector must share.
	now func() time.Time
	// age makes the named objects of ns older by d; ageAllOnly backends
	// (the S3 fake, whose clock moves) age every object at once.
	age        func(t testing.TB, ns graveler.StorageNamespace, names []string, d time.Duration)
	ageAllOnly bool
}

func fileBackend(t testing.TB) gcBackend {
	root := t.TempDir()
	blobs := committed.NewBucketStore(committed.BucketConfig{})
	t.Cleanup(func() { blobs.Close() })
	return gcBackend{
		name:  "file",
		blobs: blobs,
		ns: func(repo string) graveler.StorageNamespace {
			return graveler.StorageNamespace((&url.URL{Scheme: "file", Path: filepath.ToSlash(filepath.Join(root, repo))}).String())
		},
		now: time.Now,
		age: func(t testing.TB, ns graveler.StorageNamespace, names []string, d time.Duration) {
			t.Helper()
			u, err := url.Parse(string(ns))
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range names {
				p := filepath.Join(filepath.FromSlash(u.Path), filepath.FromSlash(name))
				info, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				at := info.ModTime().Add(-d)
				if err := os.Chtimes(p, at, at); err != nil {
					t.Fatal(err)
				}
			}
		},
	}
}

func s3Backend(t testing.TB) gcBackend {
	fake := blobtest.StartFakeS3(t, "gc-bucket")
	blobs := committed.NewBucketStore(fake.Config)
	t.Cleanup(func() { blobs.Close() })
	return gcBackend{
		name:  "s3",
		blobs: blobs,
		ns: func(repo string) graveler.StorageNamespace {
			return graveler.StorageNamespace("s3://gc-bucket/data/" + repo)
		},
		now: fake.Clock.Now,
		age: func(t testing.TB, _ graveler.StorageNamespace, _ []string, d time.Duration) {
			fake.Clock.Advance(d)
		},
		ageAllOnly: true,
	}
}

// gcWorld is a Graveler service on etcd over a backend, with the commits
// it acknowledged and what each held.
type gcWorld struct {
	t     testing.TB
	ctx   context.Context
	store kv.Store
	b     gcBackend
	g     *graveler.Graveler
	cfg   committed.Config
	// unfenced leaves commits unfenced against sweeps (to show what the
	// fence prevents); fence tunes it.
	unfenced bool
	fence    gcfence.Config

	mu    sync.Mutex
	acked []ackedCommit
	seq   atomic.Int64
}

type ackedCommit struct {
	repo graveler.RepositoryID
	id   graveler.CommitID
	// entries, when known, is what the commit holds (key -> identity).
	entries map[string]string
}

func newGCWorld(t testing.TB, store kv.Store, b gcBackend, grace time.Duration) *gcWorld {
	w := &gcWorld{t: t, ctx: context.Background(), store: store, b: b, cfg: gcCommitted(grace)}
	w.g = w.service()
	return w
}

// service returns a new Graveler over the same stores: a gravelerd
// replica, or one restarted, that remembers nothing about the objects.
func (w *gcWorld) service() *graveler.Graveler {
	return gravelertest.New(w.t, w.store, gravelertest.Options{Blobs: w.b.blobs, Committed: w.cfg, GCFence: !w.unfenced, Fence: w.fence})
}

func (w *gcWorld) createRepo(name string) graveler.StorageNamespace {
	w.t.Helper()
	ns := w.b.ns(name)
	if _, err := w.g.CreateRepository(w.ctx, graveler.RepositoryID(name), ns, "main"); err != nil {
		w.t.Fatalf("create %s: %v", name, err)
	}
	return ns
}

// commit stages n entries under prefix and commits them on branch.
func (w *gcWorld) commit(g *graveler.Graveler, repo string, branch graveler.BranchID, prefix string, n int, record bool) (graveler.CommitID, error) {
	v := w.seq.Add(1)
	for i := range n {
		val := graveler.Value{Identity: fmt.Appendf(nil, "%s-%d-%d", prefix, i, v), Data: fmt.Appendf(nil, "data-%d", v)}
		if err := g.Set(w.ctx, graveler.RepositoryID(repo), branch, graveler.Key(fmt.Sprintf("%s%04d", prefix, i)), val, graveler.SetOptions{}); err != nil {
			return "", fmt.Errorf("set on %s/%s: %w", repo, branch, err)
		}
	}
	id, err := g.Commit(w.ctx, graveler.RepositoryID(repo), branch, graveler.CommitParams{Committer: "gc-test", Message: prefix})
	if err != nil {
		return "", err
	}
	w.ack(g, repo, id, record)
	return id, nil
}

func (w *gcWorld) mustCommit(repo string, branch graveler.BranchID, prefix string, n int) graveler.CommitID {
	w.t.Helper()
	id, err := w.commit(w.g, repo, branch, prefix, n, true)
	if err != nil {
		w.t.Fatal(err)
	}
	return id
}

// ack remembers an acknowledged commit; with record, also its entries.
func (w *gcWorld) ack(g *graveler.Graveler, repo string, id graveler.CommitID, record bool) {
	a := ackedCommit{repo: graveler.RepositoryID(repo), id: id}
	if record {
		entries, err := listAll(w.ctx, g, a.repo, graveler.Ref(id))
		if err != nil {
			w.t.Errorf("read commit %s of %s just made: %v", id, repo, err)
			return
		}
		a.entries = entries
	}
	w.mu.Lock()
	w.acked = append(w.acked, a)
	w.mu.Unlock()
}

// checkAcked reads every acknowledged commit of the repositories in live
// back entirely: its metarange and every range, each checked against its
// content hash, straight from the blob store; and, where they were
// recorded, its entries through a fresh service.
func (w *gcWorld) checkAcked(live map[graveler.RepositoryID]graveler.StorageNamespace) {
	w.t.Helper()
	g := w.service()
	w.mu.Lock()
	acked := slices.Clone(w.acked)
	w.mu.Unlock()
	checked := 0
	for _, a := range acked {
		ns, ok := live[a.repo]
		if !ok {
			continue
		}
		c, err := g.GetCommit(w.ctx, a.repo, graveler.Ref(a.id))
		if err != nil {
			w.t.Errorf("commit %s of %s: %v", a.id, a.repo, err)
			continue
		}
		ranges, err := committed.ReadMetaRange(w.ctx, w.b.blobs, ns, c.MetaRangeID)
		if err != nil {
			w.t.Errorf("commit %s of %s: metarange %s: %v", a.id, a.repo, c.MetaRangeID, err)
			continue
		}
		for _, r := range ranges {
			if _, err := committed.VerifyRange(w.ctx, w.b.blobs, ns, r.ID, r.Loc); err != nil {
				w.t.Errorf("commit %s of %s: range %s: %v", a.id, a.repo, r.ID, err)
			}
		}
		if a.entries != nil {
			got, err := listAll(w.ctx, g, a.repo, graveler.Ref(a.id))
			if err != nil {
				w.t.Errorf("commit %s of %s: %v", a.id, a.repo, err)
			} else if len(got) != len(a.entries) {
				w.t.Errorf("commit %s of %s holds %d entries, held %d", a.id, a.repo, len(got), len(a.entries))
			} else {
				for k, v := range a.entries {
					if got[k] != v {
						w.t.Errorf("commit %s of %s: %s = %q, was %q", a.id, a.repo, k, got[k], v)
						break
					}
				}
			}
		}
		checked++
	}
	if checked == 0 {
		w.t.Error("no acknowledged commit to check")
	}
}

// plant writes the objects of a commit that failed before its record was
// stored: a metarange and its ranges no commit references. It returns
// the names of the blobs holding them.
func (w *gcWorld) plant(ns graveler.StorageNamespace, n int) []string {
	w.t.Helper()
	v := w.seq.Add(1)
	recs := make([]graveler.ValueRecord, n)
	for i := range recs {
		recs[i] = graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("planted/%06d/%04d", v, i)),
			Value: &graveler.Value{Identity: fmt.Appendf(nil, "p%d-%d", v, i), Data: []byte("planted")}}
	}
	return w.writeTree(ns, recs)
}

func (w *gcWorld) writeTree(ns graveler.StorageNamespace, recs []graveler.ValueRecord) []string {
	w.t.Helper()
	m := committed.NewManager(w.b.blobs, w.cfg)
	id, err := m.WriteMetaRangeByIterator(w.ctx, ns, &sliceIter{recs: recs, i: -1})
	if err != nil {
		w.t.Fatal(err)
	}
	var names []string
	seen := map[string]bool{}
	if err := committed.TreeObjects(w.ctx, w.b.blobs, ns, id, func(o committed.TreeObject) error {
		if !seen[o.Blob] {
			seen[o.Blob] = true
			names = append(names, o.Blob)
		}
		return nil
	}); err != nil {
		w.t.Fatal(err)
	}
	return names
}

// objects lists every object name in ns.
func (w *gcWorld) objects(ns graveler.StorageNamespace) map[string]bool {
	w.t.Helper()
	out := map[string]bool{}
	err := w.b.blobs.List(w.ctx, ns, "", func(page []committed.BlobInfo) error {
		for _, o := range page {
			out[o.Name] = true
		}
		return nil
	})
	if err != nil {
		w.t.Fatal(err)
	}
	return out
}

// put writes a non-committed object (user data, a marker) into ns.
func (w *gcWorld) put(ns graveler.StorageNamespace, name, data string) {
	w.t.Helper()
	if err := w.b.blobs.Put(w.ctx, ns, name, []byte(data)); err != nil {
		w.t.Fatal(err)
	}
}

func (w *gcWorld) cleanerConfig(grace time.Duration) cleaner.Config {
	return cleaner.Config{Blobs: w.b.blobs, GC: cleaner.GCConfig{Enabled: true, Grace: grace}, Now: w.b.now}
}

// sliceIter is a graveler.ValueIterator over sorted records.
type sliceIter struct {
	recs []graveler.ValueRecord
	i    int
}

func (it *sliceIter) Next() bool {
	if it.i < len(it.recs) {
		it.i++
	}
	return it.i < len(it.recs)
}
func (it *sliceIter) Value() *graveler.ValueRecord { return &it.recs[it.i] }
func (it *sliceIter) SeekGE(key graveler.Key) {
	it.i = -1
	for it.i+1 < len(it.recs) && string(it.recs[it.i+1].Key) < string(key) {
		it.i++
	}
}
func (it *sliceIter) Err() error { return nil }
func (it *sliceIter) Close()     {}

// faultyBlobs fails one chosen operation of a blob store: before it runs
// or, for a write, after it applied (an answer lost on the way back).
// Operations are numbered from 1 in the order they start.
type faultyBlobs struct {
	committed.BlobStore
	mu     sync.Mutex
	ops    int64
	failAt int64
	after  bool
	fired  bool // the armed fault was returned
}

var errBlobFault = errors.New("injected blob store fault")

func (f *faultyBlobs) arm(n int64, after bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops, f.failAt, f.after, f.fired = 0, n, after, false
}

// firedOrUnreached reports whether the armed fault was returned, or the
// run made fewer operations than its number (runs differ in their count,
// as their workers interleave differently).
func (f *faultyBlobs) firedOrUnreached() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fired || f.ops < f.failAt
}

func (f *faultyBlobs) count() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ops
}

// next numbers an operation: fail before it, fail after it, or neither.
func (f *faultyBlobs) next() (before, after bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.ops != f.failAt {
		return false, false
	}
	f.fired = true
	return !f.after, f.after
}

func (f *faultyBlobs) do(op func() error) error {
	before, after := f.next()
	if before {
		return errBlobFault
	}
	if err := op(); err != nil {
		return err
	}
	if after {
		return errBlobFault
	}
	return nil
}

func (f *faultyBlobs) Put(ctx context.Context, ns graveler.StorageNamespace, name string, data []byte) error {
	return f.do(func() error { return f.BlobStore.Put(ctx, ns, name, data) })
}

func (f *faultyBlobs) Get(ctx context.Context, ns graveler.StorageNamespace, name string) ([]byte, error) {
	var data []byte
	err := f.do(func() error {
		var err error
		data, err = f.BlobStore.Get(ctx, ns, name)
		return err
	})
	return data, err
}

func (f *faultyBlobs) GetRange(ctx context.Context, ns graveler.StorageNamespace, name string, offset, length int64) ([]byte, error) {
	var data []byte
	err := f.do(func() error {
		var err error
		data, err = f.BlobStore.GetRange(ctx, ns, name, offset, length)
		return err
	})
	return data, err
}

func (f *faultyBlobs) Exists(ctx context.Context, ns graveler.StorageNamespace, name string) (bool, error) {
	var ok bool
	err := f.do(func() error {
		var err error
		ok, err = f.BlobStore.Exists(ctx, ns, name)
		return err
	})
	return ok, err
}

func (f *faultyBlobs) Delete(ctx context.Context, ns graveler.StorageNamespace, name string) error {
	// A blob store's Delete under test, not a kv record.
	return f.do(func() error { return f.BlobStore.Delete(ctx, ns, name) })
}

// List counts the call and each page as one operation each; a fault
// after the call comes once the listing is done, after a page once fn
// took it.
func (f *faultyBlobs) List(ctx context.Context, ns graveler.StorageNamespace, prefix string, fn func([]committed.BlobInfo) error) error {
	before, after := f.next()
	if before {
		return errBlobFault
	}
	err := f.BlobStore.List(ctx, ns, prefix, func(page []committed.BlobInfo) error {
		before, after := f.next()
		if before {
			return errBlobFault
		}
		if err := fn(page); err != nil {
			return err
		}
		if after {
			return errBlobFault
		}
		return nil
	})
	if err == nil && after {
		return errBlobFault
	}
	return err
}

func (f *faultyBlobs) Stat(ctx context.Context, ns graveler.StorageNamespace, name string) (committed.BlobInfo, error) {
	var st committed.BlobInfo
	err := f.do(func() error {
		var err error
		st, err = f.BlobStore.Stat(ctx, ns, name)
		return err
	})
	return st, err
}

// BeginWrites is one operation, and so is each Sync of the Syncer it
// returns.
func (f *faultyBlobs) BeginWrites(ctx context.Context, ns graveler.StorageNamespace) (committed.Syncer, error) {
	var s committed.Syncer
	err := f.do(func() error {
		var err error
		s, err = f.BlobStore.BeginWrites(ctx, ns)
		return err
	})
	if err != nil {
		if s != nil {
			_ = s.Close() // taken, then failed after: the caller never sees it
		}
		return nil, err
	}
	return &faultySyncer{Syncer: s, f: f}, nil
}

type faultySyncer struct {
	committed.Syncer
	f *faultyBlobs
}

func (s *faultySyncer) Sync(ctx context.Context) error {
	return s.f.do(func() error { return s.Syncer.Sync(ctx) })
}

func (f *faultyBlobs) Touch(ctx context.Context, ns graveler.StorageNamespace, name string) error {
	return f.do(func() error { return f.BlobStore.Touch(ctx, ns, name) })
}
