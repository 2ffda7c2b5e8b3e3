package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sync/atomic"
	"time"

	pb "graveler/api/graveler/v1"
	"graveler/client"
	"graveler/etcdkv"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/gcfence"
	"graveler/graveler/ref"
	"graveler/graveler/staging"
	"graveler/kv"
)

// commit-scaling: how a commit's cost grows with the size of the tree it
// changes. For each N in --sizes-n it builds a head of N entries in bulk,
// then for each k in --sizes-k times commits of k changed keys, scattered
// (random) and in one run (contiguous), scalingRounds of each, and prints
// one SCALING line per commit. Only the commit is timed; the k keys are
// staged before it through the normal write path.
//
// With --embedded the service is the Graveler library on the embedded
// etcd, composed as gravelerd composes it (refs and staging on etcd,
// committed data in a file:// namespace behind the range cache), with a
// counter between the range cache and the blob store: bytes_written and
// objects_written are what reached the store. Heads are built with
// Graveler.CommitSorted, straight into the committed store. Commits are
// fenced against GC sweeps (gcfence) as in gravelerd.
//
// Against --server, heads are built through staging (BatchPutEntries and a
// commit per scalingRemoteChunk entries), which is slow, so N is bounded by
// scalingRemoteMaxN; bytes and objects written are the files that appear
// in the repository's storage namespace when it is a file:// directory
// this process can read, -1 otherwise. Objects rewritten with the same
// name (content addressed: the same bytes) are not seen there.

const (
	scalingRounds      = 3
	scalingRemoteMaxN  = 200_000
	scalingRemoteChunk = 100_000
	scalingBatch       = 1000
)

// scalingFlags are commit-scaling's flags.
type scalingFlags struct {
	sizesN, sizesK string
	n, k           []int
	nodeCacheBytes int
}

func (s *scalingFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.sizesN, "sizes-n", "10000,1000000", fmt.Sprintf("commit-scaling: entries in the head built before the commits; "+
		"built in bulk (no staging) with --embedded; against --server built through staging and at most %d", scalingRemoteMaxN))
	fs.StringVar(&s.sizesK, "sizes-k", "1000", "commit-scaling: changed keys per commit (each at most the smallest --sizes-n); "+
		"bytes_written and objects_written are counted at the blob store with --embedded, from the repository's directory "+
		"against a --server whose namespace is a local file:// one, and are -1 otherwise")
	fs.IntVar(&s.nodeCacheBytes, "node-cache-bytes", committed.DefaultNodeCacheBytes, "commit-scaling with --embedded: gravelerd's --node-cache-bytes "+
		"(in-memory cache of decoded inner nodes, by their stored bytes)")
}

func (s *scalingFlags) check() error {
	var errs []error
	var err error
	if s.n, err = intList(s.sizesN); err != nil {
		errs = append(errs, fmt.Errorf("--sizes-n: %w", err))
	}
	if s.k, err = intList(s.sizesK); err != nil {
		errs = append(errs, fmt.Errorf("--sizes-k: %w", err))
	}
	if s.nodeCacheBytes < 0 {
		errs = append(errs, fmt.Errorf("--node-cache-bytes %d is negative", s.nodeCacheBytes))
	}
	if len(s.n) > 0 && len(s.k) > 0 && slices.Max(s.k) > slices.Min(s.n) {
		errs = append(errs, fmt.Errorf("--sizes-k %d exceeds the smallest --sizes-n %d", slices.Max(s.k), slices.Min(s.n)))
	}
	return errors.Join(errs...)
}

// scalingTarget is the service commit-scaling measures.
type scalingTarget interface {
	// build creates repo with a head of n entries, keyed key(i).
	build(ctx context.Context, repo string, n int, key func(int) []byte, id func(int) []byte, data []byte) error
	// stage stages recs on repo's main branch through the write path.
	stage(ctx context.Context, repo string, recs []*graveler.ValueRecord) error
	commit(ctx context.Context, repo string) error
	// written returns the bytes and objects written to the blob store so
	// far for repo (-1, -1: not measurable).
	written(repo string) (int64, int64)
	Close() error
}

func (b *bench) commitScaling(ctx context.Context, s scalingFlags) error {
	var t scalingTarget
	switch {
	case b.embedded:
		lt, err := openLibraryTarget(ctx, b.endpoints, b.runID, s.nodeCacheBytes)
		if err != nil {
			return err
		}
		t = lt
	case b.g != nil:
		if m := slices.Max(s.n); m > scalingRemoteMaxN {
			return fmt.Errorf("commit-scaling against --server builds heads through staging, up to n=%d; n=%d needs --embedded", scalingRemoteMaxN, m)
		}
		t = &remoteTarget{g: b.g, dirs: map[string]string{}}
	default:
		return errors.New("commit-scaling needs gravelerd (--server or --embedded)")
	}
	defer t.Close()
	key := func(i int) []byte { return b.w.key("s", 0, i) }
	data := b.w.data()
	medians := map[string][]float64{} // "k layout" -> median commit ms per n
	seq := 0
	for _, n := range s.n {
		repo := b.repo(fmt.Sprintf("scaling-n%d", n))
		start := time.Now()
		b0, o0 := t.written(repo)
		if err := t.build(ctx, repo, n, key, func(i int) []byte { return identity(-1, i) }, data); err != nil {
			return fmt.Errorf("commit-scaling: build n=%d: %w", n, err)
		}
		b1, o1 := t.written(repo)
		bytes, objects := b1-max(b0, 0), o1-max(o0, 0)
		if b1 < 0 {
			bytes, objects = -1, -1
		}
		fmt.Fprintf(b.out, "commit-scaling: head of n=%d built in %s, bytes_written=%d objects_written=%d\n",
			n, time.Since(start).Round(time.Millisecond), bytes, objects)
		for _, k := range s.k {
			for _, layout := range []string{"random", "contiguous"} {
				var ms []float64
				for range scalingRounds {
					seq++
					idx := scalingKeys(layout, n, k)
					recs := make([]*graveler.ValueRecord, len(idx))
					for j, i := range idx {
						recs[j] = &graveler.ValueRecord{Key: key(i), Value: &graveler.Value{Identity: identity(seq, i), Data: data}}
					}
					if err := t.stage(ctx, repo, recs); err != nil {
						return fmt.Errorf("commit-scaling: stage n=%d k=%d: %w", n, k, err)
					}
					b0, o0 := t.written(repo)
					start := time.Now()
					// Labelled so that --cpuprofile can be read for the
					// commits alone (go tool pprof -tagfocus phase=commit);
					// the goroutines a commit starts carry the label too.
					var err error
					pprof.Do(ctx, pprof.Labels("phase", "commit"), func(ctx context.Context) {
						err = t.commit(ctx, repo)
					})
					if err != nil {
						return fmt.Errorf("commit-scaling: commit n=%d k=%d: %w", n, k, err)
					}
					took := time.Since(start)
					b1, o1 := t.written(repo)
					bytes, objects := b1-b0, o1-o0
					if b0 < 0 {
						bytes, objects = -1, -1
					}
					ms = append(ms, float64(took.Microseconds())/1000)
					fmt.Fprintf(b.out, "SCALING n=%d k=%d layout=%s commit_ms=%d bytes_written=%d objects_written=%d\n",
						n, k, layout, took.Milliseconds(), bytes, objects)
				}
				slices.Sort(ms)
				c := fmt.Sprintf("k=%d layout=%s", k, layout)
				medians[c] = append(medians[c], ms[len(ms)/2])
			}
		}
	}
	if len(s.n) > 1 {
		first, last := s.n[0], s.n[len(s.n)-1]
		for _, k := range s.k {
			for _, layout := range []string{"random", "contiguous"} {
				m := medians[fmt.Sprintf("k=%d layout=%s", k, layout)]
				fmt.Fprintf(b.out, "RATIO commit-scaling k=%d layout=%s median commit time n=%d/n=%d=%.2fx (%.1f vs %.1f ms)\n",
					k, layout, last, first, m[len(m)-1]/max(m[0], 0.001), m[len(m)-1], m[0])
			}
		}
	}
	return nil
}

// scalingKeys returns k distinct indexes below n, in ascending order:
// scattered uniformly (random) or one run at a random place (contiguous).
func scalingKeys(layout string, n, k int) []int {
	if layout == "contiguous" {
		start := rand.IntN(n - k + 1)
		out := make([]int, k)
		for j := range out {
			out[j] = start + j
		}
		return out
	}
	seen := make(map[int]bool, k)
	out := make([]int, 0, k)
	for len(out) < k {
		if i := rand.IntN(n); !seen[i] {
			seen[i] = true
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// countingBlobs counts the objects written to a blob store and their bytes.
type countingBlobs struct {
	committed.BlobStore
	bytes, objects atomic.Int64
}

func (c *countingBlobs) Put(ctx context.Context, ns graveler.StorageNamespace, name string, data []byte) error {
	err := c.BlobStore.Put(ctx, ns, name, data)
	if err == nil {
		c.objects.Add(1)
		c.bytes.Add(int64(len(data)))
	}
	return err
}

// libraryTarget is the Graveler library on the embedded etcd, under a key
// prefix of its own, with committed data in file:// namespaces in a
// temporary directory.
type libraryTarget struct {
	g       *graveler.Graveler
	store   kv.Store
	blobs   committed.BlobStore
	counter *countingBlobs
	dir     string
}

func openLibraryTarget(ctx context.Context, endpoints []string, runID string, nodeCacheBytes int) (*libraryTarget, error) {
	dir, err := os.MkdirTemp("", "gravelerbench-scaling-")
	if err != nil {
		return nil, err
	}
	store, err := etcdkv.New(ctx, etcdkv.Config{Endpoints: endpoints, Prefix: "/gravelerbench-scaling/" + runID})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("gravelerbench: etcd: %w", err)
	}
	counter := &countingBlobs{BlobStore: committed.NewBucketStore(committed.BucketConfig{})}
	// The range cache in front, as in gravelerd: a commit's reads of the
	// ranges it rewrites come from local files, and its writes are counted
	// as they reach the store.
	blobs, err := committed.NewCachedBlobStore(counter, committed.CacheConfig{Dir: filepath.Join(dir, "cache")})
	if err != nil {
		os.RemoveAll(dir)
		return nil, errors.Join(fmt.Errorf("gravelerbench: range cache: %w", err), counter.Close(), store.Close())
	}
	// Fenced against GC sweeps as in gravelerd: its two reads per commit
	// are part of what a commit costs.
	g := graveler.New(ref.New(store, ref.Config{}), staging.New(store, staging.Config{}),
		gcfence.Wrap(committed.NewManager(blobs, committed.Config{NodeCacheBytes: nodeCacheBytes}), blobs, gcfence.New(store, gcfence.Config{})), graveler.Config{})
	return &libraryTarget{g: g, store: store, blobs: blobs, counter: counter, dir: dir}, nil
}

func (l *libraryTarget) build(ctx context.Context, repo string, n int, key, id func(int) []byte, data []byte) error {
	ns := graveler.StorageNamespace("file://" + filepath.ToSlash(filepath.Join(l.dir, "blobs", repo)))
	if _, err := l.g.CreateRepository(ctx, graveler.RepositoryID(repo), ns, "main"); err != nil {
		return err
	}
	it := &generatedEntries{n: n, i: -1, key: key, id: id, data: data}
	_, err := l.g.CommitSorted(ctx, graveler.RepositoryID(repo), "main", it, graveler.CommitParams{
		Committer: "gravelerbench", Message: fmt.Sprintf("bulk head of %d entries", n)})
	return err
}

func (l *libraryTarget) stage(ctx context.Context, repo string, recs []*graveler.ValueRecord) error {
	for start := 0; start < len(recs); start += scalingBatch {
		if err := l.g.SetBatch(ctx, graveler.RepositoryID(repo), "main", recs[start:min(start+scalingBatch, len(recs))]); err != nil {
			return err
		}
	}
	return nil
}

func (l *libraryTarget) commit(ctx context.Context, repo string) error {
	_, err := l.g.Commit(ctx, graveler.RepositoryID(repo), "main", graveler.CommitParams{Committer: "gravelerbench", Message: "commit-scaling"})
	return err
}

// written counts for every repository at once: commit-scaling measures
// one at a time.
func (l *libraryTarget) written(string) (int64, int64) {
	return l.counter.bytes.Load(), l.counter.objects.Load()
}

func (l *libraryTarget) Close() error {
	err := errors.Join(l.blobs.Close(), l.store.Close())
	os.RemoveAll(l.dir)
	return err
}

// generatedEntries yields n entries key(i) = (id(i), data) in order; key
// must sort as i does.
type generatedEntries struct {
	n, i    int
	key, id func(int) []byte
	data    []byte
	rec     graveler.ValueRecord
	val     graveler.Value
}

func (g *generatedEntries) Next() bool {
	if g.i+1 >= g.n {
		return false
	}
	g.i++
	g.val = graveler.Value{Identity: g.id(g.i), Data: g.data}
	g.rec = graveler.ValueRecord{Key: g.key(g.i), Value: &g.val}
	return true
}
func (g *generatedEntries) Value() *graveler.ValueRecord { return &g.rec }
func (g *generatedEntries) SeekGE(graveler.Key)          {}
func (g *generatedEntries) Err() error                   { return nil }
func (g *generatedEntries) Close()                       {}

// remoteTarget is gravelerd over gRPC. dirs maps a repository to its
// storage namespace's local directory, when it has one.
type remoteTarget struct {
	g    *grav
	dirs map[string]string
}

func (r *remoteTarget) build(ctx context.Context, repo string, n int, key, id func(int) []byte, data []byte) error {
	if err := r.g.createRepository(ctx, repo); err != nil {
		return err
	}
	resp, err := r.g.c(0).GetRepository(ctx, &pb.GetRepositoryRequest{Name: client.Repository(repo)})
	if err != nil {
		return err
	}
	if u, err := url.Parse(resp.GetRepository().GetStorageNamespace()); err == nil && u.Scheme == "file" {
		if fi, err := os.Stat(filepath.FromSlash(u.Path)); err == nil && fi.IsDir() {
			r.dirs[repo] = filepath.FromSlash(u.Path)
		}
	}
	for start := 0; start < n; start += scalingRemoteChunk {
		end := min(start+scalingRemoteChunk, n)
		recs := make([]*graveler.ValueRecord, 0, end-start)
		for i := start; i < end; i++ {
			recs = append(recs, &graveler.ValueRecord{Key: key(i), Value: &graveler.Value{Identity: id(i), Data: data}})
		}
		if err := r.stage(ctx, repo, recs); err != nil {
			return err
		}
		if err := r.commit(ctx, repo); err != nil {
			return err
		}
	}
	return nil
}

func (r *remoteTarget) stage(ctx context.Context, repo string, recs []*graveler.ValueRecord) error {
	const par = 4
	errc := make(chan error, par)
	for p := range par {
		go func() {
			var err error
			for start := p * scalingBatch; start < len(recs) && err == nil; start += par * scalingBatch {
				req := &pb.BatchPutEntriesRequest{Branch: client.Branch(repo, "main")}
				for _, rec := range recs[start:min(start+scalingBatch, len(recs))] {
					req.Entries = append(req.Entries, &pb.Entry{Key: rec.Key, Value: &pb.Value{Identity: rec.Identity, Data: rec.Data}})
				}
				_, err = r.g.c(p).BatchPutEntries(ctx, req)
			}
			errc <- err
		}()
	}
	var errs []error
	for range par {
		errs = append(errs, <-errc)
	}
	return errors.Join(errs...)
}

func (r *remoteTarget) commit(ctx context.Context, repo string) error {
	return r.g.commit(ctx, 0, repo, "main")
}

// written sums the files under the repository's namespace directory;
// objects are content addressed and never rewritten in place, so the
// difference between two calls is what was written in between.
func (r *remoteTarget) written(repo string) (int64, int64) {
	dir, ok := r.dirs[repo]
	if !ok {
		return -1, -1
	}
	var bytes, objects int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.ToSlash(path[len(dir):]) == "/"+graveler.NamespaceMarker {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		bytes += fi.Size()
		objects++
		return nil
	})
	if err != nil {
		return -1, -1
	}
	return bytes, objects
}

func (r *remoteTarget) Close() error { return nil }
