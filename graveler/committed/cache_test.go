package committed_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/committed/blobtest"
)

const cacheHdr = 16 // per-file header: magic, length, CRC-32C

func TestCachedBlobStoreSuite(t *testing.T) {
	for _, max := range []int64{0, 64 << 10} {
		t.Run(fmt.Sprintf("max=%d", max), func(t *testing.T) {
			blobtest.RunWithOptions(t, func(t *testing.T) (committed.BlobStore, graveler.StorageNamespace) {
				s, err := committed.NewCachedBlobStore(committed.NewBucketStore(committed.BucketConfig{}),
					committed.CacheConfig{Dir: t.TempDir(), MaxBytes: max})
				if err != nil {
					t.Fatal(err)
				}
				return s, "mem://cached"
			}, blobtest.Options{SlicesOutliveWrites: true})
		})
	}
	// A file:// namespace passes the cache by: the suite holds for it too.
	t.Run("ns=file", func(t *testing.T) {
		blobtest.Run(t, func(t *testing.T) (committed.BlobStore, graveler.StorageNamespace) {
			s, err := committed.NewCachedBlobStore(committed.NewBucketStore(committed.BucketConfig{}),
				committed.CacheConfig{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			return s, blobFileNS(t.TempDir())
		})
	})
}

// cacheInner is a real store with its Gets counted and, when gate is set,
// held after reading until gate is closed.
type cacheInner struct {
	committed.BlobStore
	gets    atomic.Int64
	reached chan struct{}
	gate    chan struct{}
}

func (c *cacheInner) Get(ctx context.Context, ns graveler.StorageNamespace, name string) ([]byte, error) {
	c.gets.Add(1)
	data, err := c.BlobStore.Get(ctx, ns, name)
	if c.gate != nil {
		c.reached <- struct{}{}
		<-c.gate
	}
	return data, err
}

func cacheNew(t *testing.T, inner committed.BlobStore, cfg committed.CacheConfig) *committed.CachedBlobStore {
	t.Helper()
	s, err := committed.NewCachedBlobStore(inner, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s.(*committed.CachedBlobStore)
}

func cacheFile(dir string, ns graveler.StorageNamespace, name string) string {
	sum := sha256.Sum256([]byte(string(ns) + "\x00" + name))
	return filepath.Join(dir, hex.EncodeToString(sum[:]))
}

// cacheDirBytes sums the sizes of the cache's files on disk.
func cacheDirBytes(t *testing.T, dir string) (total int64, files int) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		total += info.Size()
		files++
	}
	return total, files
}

func cacheMustGet(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace, name string, want []byte) {
	t.Helper()
	got, err := s.Get(context.Background(), ns, name)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Get(%q) = %d bytes, %v; want %d bytes", name, len(got), err, len(want))
	}
}

func TestCacheEvictionKeepsBound(t *testing.T) {
	ctx := context.Background()
	const ns = graveler.StorageNamespace("mem://evict")
	const objSize, fit = 1000, 10
	inner := committed.NewBucketStore(committed.BucketConfig{})
	for i := range 30 {
		if err := inner.Put(ctx, ns, fmt.Sprintf("r/%02d", i), bytes.Repeat([]byte{byte(i)}, objSize)); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	max := int64(fit * (objSize + cacheHdr))
	c := cacheNew(t, inner, committed.CacheConfig{Dir: dir, MaxBytes: max})
	defer c.Close()
	for i := range 30 {
		cacheMustGet(t, c, ns, fmt.Sprintf("r/%02d", i), bytes.Repeat([]byte{byte(i)}, objSize))
		// Object 0 stays in use, so it is never the least recently used.
		cacheMustGet(t, c, ns, "r/00", bytes.Repeat([]byte{0}, objSize))
		st := c.Stats()
		onDisk, _ := cacheDirBytes(t, dir)
		if st.Bytes > max || st.Bytes != onDisk {
			t.Fatalf("after %d gets: stats say %d bytes, disk holds %d, bound %d", i+1, st.Bytes, onDisk, max)
		}
	}
	st := c.Stats()
	if st.Misses != 30 || st.Hits != 30 || st.Evictions != 20 || st.Bytes != max {
		t.Fatalf("stats = %+v, want 30 misses, 30 hits, 20 evictions, %d bytes", st, max)
	}
	// The nine most recent and object 0 are cached; older ones are not.
	before := c.Stats()
	for i := 21; i < 30; i++ {
		cacheMustGet(t, c, ns, fmt.Sprintf("r/%02d", i), bytes.Repeat([]byte{byte(i)}, objSize))
	}
	cacheMustGet(t, c, ns, "r/00", bytes.Repeat([]byte{0}, objSize))
	if st := c.Stats(); st.Hits != before.Hits+10 || st.Misses != before.Misses {
		t.Fatalf("recent objects not all cached: %+v then %+v", before, st)
	}
	if _, err := os.Stat(cacheFile(dir, ns, "r/05")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("evicted object's file: %v", err)
	}
}

func TestCacheOversizedObjectNotCached(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := cacheNew(t, committed.NewBucketStore(committed.BucketConfig{}), committed.CacheConfig{Dir: dir, MaxBytes: 1000})
	defer c.Close()
	big := bytes.Repeat([]byte("b"), 1000) // 1000 + header > bound
	if err := c.Put(ctx, "mem://x", "big", big); err != nil {
		t.Fatal(err)
	}
	cacheMustGet(t, c, "mem://x", "big", big)
	cacheMustGet(t, c, "mem://x", "big", big)
	if st := c.Stats(); st.Misses != 2 || st.Hits != 0 || st.Bytes != 0 || st.Evictions != 0 {
		t.Fatalf("stats = %+v", st)
	}
	if _, files := cacheDirBytes(t, dir); files != 0 {
		t.Fatalf("%d files in the cache directory", files)
	}
	// Just fitting is cached.
	fits := bytes.Repeat([]byte("f"), 1000-cacheHdr)
	if err := c.Put(ctx, "mem://x", "fits", fits); err != nil {
		t.Fatal(err)
	}
	cacheMustGet(t, c, "mem://x", "fits", fits)
	if st := c.Stats(); st.Hits != 1 || st.Bytes != 1000 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestCacheAdoptsFilesOnRestart(t *testing.T) {
	ctx := context.Background()
	const ns = graveler.StorageNamespace("mem://adopt")
	dir := t.TempDir()
	first := cacheNew(t, committed.NewBucketStore(committed.BucketConfig{}), committed.CacheConfig{Dir: dir})
	var want [][]byte
	for i := range 5 {
		data := bytes.Repeat([]byte{byte('a' + i)}, 100*(i+1))
		want = append(want, data)
		if err := first.Put(ctx, ns, fmt.Sprintf("o%d", i), data); err != nil {
			t.Fatal(err)
		}
	}
	bytesBefore := first.Stats().Bytes
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	// Use order o0 oldest ... o4 newest, as modification times record it.
	base := time.Now().Add(-time.Hour)
	for i := range 5 {
		mt := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(cacheFile(dir, ns, fmt.Sprintf("o%d", i)), mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	// A crashed write's temporary file goes; unrelated files stay.
	if err := os.WriteFile(filepath.Join(dir, ".tmp-123"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "README"), []byte("not ours"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The new inner store is empty: every hit below comes from adopted files.
	second := cacheNew(t, committed.NewBucketStore(committed.BucketConfig{}), committed.CacheConfig{Dir: dir})
	if st := second.Stats(); st.Bytes != bytesBefore {
		t.Fatalf("adopted %d bytes, want %d", st.Bytes, bytesBefore)
	}
	for i := range 5 {
		cacheMustGet(t, second, ns, fmt.Sprintf("o%d", i), want[i])
	}
	if st := second.Stats(); st.Hits != 5 || st.Misses != 0 {
		t.Fatalf("stats = %+v", st)
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-123")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file survived: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "README")); err != nil {
		t.Fatalf("unrelated file: %v", err)
	}
	second.Close()

	// Restart with room for only the three most recently used (o2..o4).
	for i := range 5 {
		mt := base.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(cacheFile(dir, ns, fmt.Sprintf("o%d", i)), mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	max := int64(300+400+500) + 3*cacheHdr
	third := cacheNew(t, committed.NewBucketStore(committed.BucketConfig{}), committed.CacheConfig{Dir: dir, MaxBytes: max})
	defer third.Close()
	if st := third.Stats(); st.Bytes != max || st.Evictions != 2 {
		t.Fatalf("after adopting under a smaller bound: %+v", st)
	}
	for i := 2; i < 5; i++ {
		cacheMustGet(t, third, ns, fmt.Sprintf("o%d", i), want[i])
	}
	for i := range 2 {
		if _, err := third.Get(ctx, ns, fmt.Sprintf("o%d", i)); !errors.Is(err, committed.ErrBlobNotFound) {
			t.Fatalf("o%d: %v, want evicted at adoption (and absent from the empty inner store)", i, err)
		}
	}
}

func TestCacheConcurrentGetsOfOneObject(t *testing.T) {
	ctx := context.Background()
	const ns = graveler.StorageNamespace("mem://conc")
	inner := &cacheInner{BlobStore: committed.NewBucketStore(committed.BucketConfig{})}
	data := bytes.Repeat([]byte("range"), 20000)
	if err := inner.Put(ctx, ns, "hot", data); err != nil {
		t.Fatal(err)
	}
	c := cacheNew(t, inner, committed.CacheConfig{Dir: t.TempDir()})
	defer c.Close()
	const n = 32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got, err := c.Get(ctx, ns, "hot")
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("Get = %d bytes, %v", len(got), err)
				return
			}
			got[0] ^= 0xff // each caller owns its slice
		}()
	}
	close(start)
	wg.Wait()
	if g := inner.gets.Load(); g != 1 {
		t.Fatalf("inner store read %d times, want once", g)
	}
	if st := c.Stats(); st.Misses != 1 || st.Hits != n-1 {
		t.Fatalf("stats = %+v", st)
	}
	cacheMustGet(t, c, ns, "hot", data)
}

// TestCacheWaitersOutliveCancelledReader: when the Get doing the read is
// cancelled, Gets waiting for it read the object themselves.
func TestCacheWaitersOutliveCancelledReader(t *testing.T) {
	ctx := context.Background()
	const ns = graveler.StorageNamespace("mem://cancel")
	inner := &cacheInner{BlobStore: committed.NewBucketStore(committed.BucketConfig{}),
		reached: make(chan struct{}, 4), gate: make(chan struct{})}
	if err := inner.BlobStore.Put(ctx, ns, "o", []byte("data")); err != nil {
		t.Fatal(err)
	}
	// The leader's read reports its caller's cancellation.
	lctx, cancel := context.WithCancel(ctx)
	c := cacheNew(t, &cacheCtxInner{cacheInner: inner}, committed.CacheConfig{Dir: t.TempDir()})
	defer c.Close()
	leaderDone := make(chan error, 1)
	go func() {
		_, err := c.Get(lctx, ns, "o")
		leaderDone <- err
	}()
	<-inner.reached
	waiterDone := make(chan []byte, 1)
	go func() {
		got, err := c.Get(ctx, ns, "o")
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		waiterDone <- got
	}()
	cancel()
	inner.gate <- struct{}{} // release the leader only
	if err := <-leaderDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("leader: %v, want context.Canceled", err)
	}
	// The waiter either joined the cancelled read and retried, or arrived
	// after it; either way it reads the object itself.
	<-inner.reached
	close(inner.gate)
	if got := <-waiterDone; string(got) != "data" {
		t.Fatalf("waiter got %q", got)
	}
	if g := inner.gets.Load(); g != 2 {
		t.Fatalf("inner store read %d times, want 2", g)
	}
}

// cacheCtxInner reports the caller's context error after a held read.
type cacheCtxInner struct{ *cacheInner }

func (c *cacheCtxInner) Get(ctx context.Context, ns graveler.StorageNamespace, name string) ([]byte, error) {
	data, err := c.cacheInner.Get(ctx, ns, name)
	if cerr := ctx.Err(); cerr != nil {
		return nil, cerr
	}
	return data, err
}

func TestCacheDetectsDamagedFiles(t *testing.T) {
	ctx := context.Background()
	const ns = graveler.StorageNamespace("mem://damage")
	dir := t.TempDir()
	inner := &cacheInner{BlobStore: committed.NewBucketStore(committed.BucketConfig{})}
	c := cacheNew(t, inner, committed.CacheConfig{Dir: dir})
	defer c.Close()
	data := []byte("the range's bytes, several of them")
	if err := c.Put(ctx, ns, "r", data); err != nil {
		t.Fatal(err)
	}
	path := cacheFile(dir, ns, "r")
	damage := map[string]func(b []byte) []byte{
		"truncated":      func(b []byte) []byte { return b[:len(b)-5] },
		"flipped byte":   func(b []byte) []byte { b[len(b)-1] ^= 1; return b },
		"extended":       func(b []byte) []byte { return append(b, 'x') },
		"header only":    func(b []byte) []byte { return b[:cacheHdr] },
		"short header":   func(b []byte) []byte { return b[:7] },
		"empty":          func(b []byte) []byte { return nil },
		"bad magic":      func(b []byte) []byte { b[0] = 'X'; return b },
		"wrong checksum": func(b []byte) []byte { b[cacheHdr-1] ^= 0x80; return b },
	}
	for what, f := range damage {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := os.WriteFile(path, f(raw), 0o644); err != nil {
			t.Fatal(err)
		}
		before, gets := c.Stats(), inner.gets.Load()
		cacheMustGet(t, c, ns, "r", data)
		after := c.Stats()
		if after.Misses != before.Misses+1 || inner.gets.Load() != gets+1 {
			t.Fatalf("%s: not refetched: %+v then %+v", what, before, after)
		}
		// Rewritten whole: the next Get is a hit.
		cacheMustGet(t, c, ns, "r", data)
		if st := c.Stats(); st.Hits != after.Hits+1 || st.Bytes != int64(len(data)+cacheHdr) {
			t.Fatalf("%s: not cached again: %+v", what, st)
		}
	}
	// A file removed behind the cache's back is refetched too.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	cacheMustGet(t, c, ns, "r", data)
}

func TestCacheDelete(t *testing.T) {
	ctx := context.Background()
	const ns = graveler.StorageNamespace("mem://del")
	dir := t.TempDir()
	c := cacheNew(t, committed.NewBucketStore(committed.BucketConfig{}), committed.CacheConfig{Dir: dir})
	defer c.Close()
	if err := c.Put(ctx, ns, "d", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, ns, "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, ns, "d"); !errors.Is(err, committed.ErrBlobNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if _, files := cacheDirBytes(t, dir); files != 0 || c.Stats().Bytes != 0 {
		t.Fatalf("%d files, %+v left after Delete", files, c.Stats())
	}
}

// TestCacheDeleteDuringRead: a Get that read the object before a Delete
// finished must not leave it cached afterwards.
func TestCacheDeleteDuringRead(t *testing.T) {
	ctx := context.Background()
	const ns = graveler.StorageNamespace("mem://race")
	dir := t.TempDir()
	inner := &cacheInner{BlobStore: committed.NewBucketStore(committed.BucketConfig{}),
		reached: make(chan struct{}, 1), gate: make(chan struct{})}
	if err := inner.Put(ctx, ns, "o", []byte("old")); err != nil {
		t.Fatal(err)
	}
	c := cacheNew(t, inner, committed.CacheConfig{Dir: dir})
	defer c.Close()
	done := make(chan []byte, 1)
	go func() {
		got, err := c.Get(ctx, ns, "o")
		if err != nil {
			t.Errorf("Get: %v", err)
		}
		done <- got
	}()
	<-inner.reached
	if err := c.Delete(ctx, ns, "o"); err != nil {
		t.Fatal(err)
	}
	close(inner.gate)
	if got := <-done; string(got) != "old" {
		t.Fatalf("Get = %q", got)
	}
	if _, files := cacheDirBytes(t, dir); files != 0 || c.Stats().Bytes != 0 {
		t.Fatalf("deleted object cached: %d files, %+v", files, c.Stats())
	}
	inner.gate = nil
	if _, err := c.Get(ctx, ns, "o"); !errors.Is(err, committed.ErrBlobNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
}

func TestCacheMetrics(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	dir := t.TempDir()
	c := cacheNew(t, committed.NewBucketStore(committed.BucketConfig{}), committed.CacheConfig{Dir: dir, MaxBytes: 2 * (cacheHdr + 10), Registerer: reg})
	for i := range 3 {
		if err := c.Put(ctx, "mem://m", fmt.Sprintf("o%d", i), bytes.Repeat([]byte("x"), 10)); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"o0", "o2", "o2"} {
		if _, err := c.Get(ctx, "mem://m", name); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]float64{
		"graveler_range_cache_hits_total":      2,
		"graveler_range_cache_misses_total":    1,
		"graveler_range_cache_evictions_total": 2, // o0 at the third Put, o1 when o0 came back
		"graveler_range_cache_bytes":           2 * (cacheHdr + 10),
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		if m.GetCounter() != nil {
			got[mf.GetName()] = m.GetCounter().GetValue()
		} else {
			got[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s = %v, want %v (all: %v; stats %+v)", name, got[name], v, got, c.Stats())
		}
	}
	// A second cache on the same registry fails while the first is open,
	// and registers once it is closed.
	if _, err := committed.NewCachedBlobStore(committed.NewBucketStore(committed.BucketConfig{}), committed.CacheConfig{Dir: t.TempDir(), Registerer: reg}); err == nil {
		t.Fatal("second cache registered the same metrics")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	again := cacheNew(t, committed.NewBucketStore(committed.BucketConfig{}), committed.CacheConfig{Dir: dir, Registerer: reg})
	again.Close()
}

func TestCacheConfigErrors(t *testing.T) {
	inner := committed.NewBucketStore(committed.BucketConfig{})
	defer inner.Close()
	for _, cfg := range []committed.CacheConfig{
		{},
		{Dir: t.TempDir(), MaxBytes: -1},
	} {
		if _, err := committed.NewCachedBlobStore(inner, cfg); err == nil {
			t.Errorf("NewCachedBlobStore(%+v) succeeded", cfg)
		}
	}
	if _, err := committed.NewCachedBlobStore(nil, committed.CacheConfig{Dir: t.TempDir()}); err == nil {
		t.Error("nil inner store accepted")
	}
}

// BenchmarkBlobGet64KiB compares reading a 64 KiB object from a file://
// namespace with reading it through the disk cache (a hit every time).
func BenchmarkBlobGet64KiB(b *testing.B) {
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	ns := blobFileNS(b.TempDir())
	file := committed.NewBucketStore(committed.BucketConfig{})
	defer file.Close()
	if err := file.Put(ctx, ns, "ranges/r", data); err != nil {
		b.Fatal(err)
	}
	cached, err := committed.NewCachedBlobStore(file, committed.CacheConfig{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		s    committed.BlobStore
	}{{"file", file}, {"cached", cached}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := bc.s.Get(ctx, ns, "ranges/r"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCacheFileNamespaceBypassed: a file:// namespace's objects are
// neither copied into the cache when written nor when read (they are
// files already); other namespaces are written through and cached.
func TestCacheFileNamespaceBypassed(t *testing.T) {
	ctx := context.Background()
	nsDir := t.TempDir()
	fileNS := graveler.StorageNamespace("file://" + filepath.ToSlash(nsDir))
	inner := committed.NewBucketStore(committed.BucketConfig{})
	cacheDir := t.TempDir()
	c := cacheNew(t, inner, committed.CacheConfig{Dir: cacheDir, MaxBytes: 1 << 20})
	defer c.Close()
	data := bytes.Repeat([]byte("r"), 1000)
	if err := c.Put(ctx, fileNS, "ranges/a", data); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Bytes != 0 {
		t.Fatalf("a file:// Put was copied into the cache: %+v", st)
	}
	cacheMustGet(t, c, fileNS, "ranges/a", data)
	cacheMustGet(t, c, fileNS, "ranges/a", data)
	if st := c.Stats(); st != (committed.CacheStats{}) {
		t.Fatalf("file:// Gets went through the cache: %+v", st)
	}
	if ents, err := os.ReadDir(cacheDir); err != nil || len(ents) != 0 {
		t.Fatalf("cache directory after file:// Gets: %v, %v", ents, err)
	}
	// The cache serves what the namespace holds now, not a copy.
	if err := inner.Delete(ctx, fileNS, "ranges/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, fileNS, "ranges/a"); !errors.Is(err, committed.ErrBlobNotFound) {
		t.Fatalf("Get of a file:// object deleted behind the cache: %v", err)
	}
	if err := c.Put(ctx, "mem://through", "ranges/b", data); err != nil {
		t.Fatal(err)
	}
	cacheMustGet(t, c, "mem://through", "ranges/b", data)
	if st := c.Stats(); st.Hits != 1 || st.Misses != 0 || st.Bytes == 0 {
		t.Fatalf("a mem:// Put was not written through: %+v", st)
	}
}
