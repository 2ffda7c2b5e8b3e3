package committed

import (
	"bytes"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"graveler/graveler"
)

// CacheConfig configures NewCachedBlobStore.
type CacheConfig struct {
	// Dir holds the cached objects, one file each; created if missing. It
	// belongs to one cache: files found there at start are adopted, and
	// files that look like cache entries may be evicted.
	Dir string
	// MaxBytes bounds the total size of the cached files (default 1 GiB).
	MaxBytes int64
	// Registerer, if set, receives the cache's metrics; Close unregisters them.
	Registerer prometheus.Registerer
}

// CacheStats counts what the cache did since it was created.
type CacheStats struct {
	// Hits are Gets served without reading the inner store: from a cached
	// file, or by sharing another Get's read of the same object.
	Hits uint64
	// Misses are Gets that read the inner store (including those that found
	// a damaged cache file).
	Misses uint64
	// Evictions are files removed to keep the cache within MaxBytes.
	Evictions uint64
	// Bytes is the total size of the cached files, headers included.
	Bytes int64
}

// DefaultCacheMaxBytes is the cache bound when CacheConfig.MaxBytes is 0.
const DefaultCacheMaxBytes int64 = 1 << 30

// A cache file is a header (magic, data length, CRC-32C of the data) and
// the data. The header catches files truncated or damaged on disk, which
// are then refetched instead of returned.
const (
	cacheMagic     = "GRC1"
	cacheHeaderLen = len(cacheMagic) + 8 + 4
	cacheTempPfx   = ".tmp-"
)

var cacheCRC = crc32.MakeTable(crc32.Castagnoli)

// CachedBlobStore keeps a bounded, least-recently-used copy of objects on
// local disk in front of another BlobStore. Objects are immutable and named
// by their content, so a cached copy never goes stale: nothing is
// invalidated except by Delete through this store. A file:// namespace's
// objects are files already and pass the cache by (fileNamespace). Safe
// for concurrent use.
type CachedBlobStore struct {
	inner BlobStore
	dir   string
	max   int64
	reg   prometheus.Registerer
	cols  []prometheus.Collector

	hits, misses, evictions atomic.Uint64
	bytes                   atomic.Int64

	mu       sync.Mutex
	lru      *list.List // of *cacheEntry, most recently used first
	index    map[string]*list.Element
	inflight map[string]*cacheCall
	// delGen counts Deletes, so a Get that read an object before it was
	// deleted does not put it back into the cache afterwards.
	delGen uint64
}

type cacheEntry struct {
	key  string
	size int64
}

// cacheCall is one read of the inner store that concurrent Gets of the
// same object wait for instead of each reading it.
type cacheCall struct {
	done    chan struct{}
	waiters int // guarded by CachedBlobStore.mu
	data    []byte
	err     error
}

// NewCachedBlobStore returns inner behind a disk cache in cfg.Dir. Get
// serves a cached copy when there is one and otherwise reads inner and
// caches the object (unless it alone exceeds MaxBytes); Put writes to inner
// and then caches; Delete removes from both; Exists, List, Stat, Touch and
// Close go to inner (a touch changes no content, so a cached copy stays
// good).
func NewCachedBlobStore(inner BlobStore, cfg CacheConfig) (BlobStore, error) {
	if inner == nil {
		return nil, errors.New("committed: cache needs an inner blob store")
	}
	if cfg.Dir == "" {
		return nil, errors.New("committed: cache needs a directory")
	}
	if cfg.MaxBytes < 0 {
		return nil, fmt.Errorf("committed: cache bound %d is negative", cfg.MaxBytes)
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultCacheMaxBytes
	}
	c := &CachedBlobStore{
		inner:    inner,
		dir:      cfg.Dir,
		max:      cfg.MaxBytes,
		lru:      list.New(),
		index:    map[string]*list.Element{},
		inflight: map[string]*cacheCall{},
	}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("committed: cache directory: %w", err)
	}
	if err := c.adopt(); err != nil {
		return nil, err
	}
	if cfg.Registerer != nil {
		if err := c.register(cfg.Registerer); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// adopt indexes the files a previous cache left in dir, least recently
// used (oldest modification time) last, then trims to the bound.
func (c *CachedBlobStore) adopt() error {
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("committed: cache directory: %w", err)
	}
	type found struct {
		key   string
		size  int64
		mtime time.Time
	}
	var files []found
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, cacheTempPfx) {
			// Left by a write that never finished.
			_ = os.Remove(filepath.Join(c.dir, name))
			continue
		}
		if !e.Type().IsRegular() || !cacheIsKey(name) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		files = append(files, found{name, info.Size(), info.ModTime()})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mtime.Before(files[j].mtime) })
	c.mu.Lock()
	defer c.mu.Unlock()
	var total int64
	for _, f := range files {
		c.index[f.key] = c.lru.PushFront(&cacheEntry{key: f.key, size: f.size})
		total += f.size
	}
	c.bytes.Store(total)
	c.evictLocked()
	return nil
}

func (c *CachedBlobStore) register(reg prometheus.Registerer) error {
	c.cols = []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "graveler_range_cache_hits_total",
			Help: "Range and metarange reads served by the local disk cache.",
		}, func() float64 { return float64(c.hits.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "graveler_range_cache_misses_total",
			Help: "Range and metarange reads that went to the blob store.",
		}, func() float64 { return float64(c.misses.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "graveler_range_cache_evictions_total",
			Help: "Files evicted from the local disk cache to stay within its size bound.",
		}, func() float64 { return float64(c.evictions.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "graveler_range_cache_bytes",
			Help: "Bytes held by the local disk cache.",
		}, func() float64 { return float64(c.bytes.Load()) }),
	}
	for i, col := range c.cols {
		if err := reg.Register(col); err != nil {
			for _, done := range c.cols[:i] {
				reg.Unregister(done)
			}
			c.cols = nil
			return fmt.Errorf("committed: cache metrics: %w", err)
		}
	}
	c.reg = reg
	return nil
}

// Stats returns the cache's counters.
func (c *CachedBlobStore) Stats() CacheStats {
	return CacheStats{
		Hits:      c.hits.Load(),
		Misses:    c.misses.Load(),
		Evictions: c.evictions.Load(),
		Bytes:     c.bytes.Load(),
	}
}

// cacheKey names the file for an object; the NUL keeps ("a", "b/c") and
// ("a/b", "c")-style pairs from colliding.
func cacheKey(ns graveler.StorageNamespace, name string) string {
	sum := sha256.Sum256([]byte(string(ns) + "\x00" + name))
	return hex.EncodeToString(sum[:])
}

func cacheIsKey(name string) bool {
	if len(name) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// fileNamespace reports a namespace whose objects the cache neither
// copies nor serves. They are files on this machine's disks (or mounted
// ones, which the kernel caches as well): a copy costs a second file
// creation on a miss, and a hit, which checks the copy's header, costs
// more than reading the object itself (BenchmarkBlobGet64KiB). On a busy
// machine a commit of 1,000 random keys into 10k entries spent half its
// time waiting for the copies of the ranges it read.
func fileNamespace(ns graveler.StorageNamespace) bool {
	return strings.HasPrefix(string(ns), "file:")
}

func (c *CachedBlobStore) Get(ctx context.Context, ns graveler.StorageNamespace, name string) ([]byte, error) {
	if err := ValidateBlobName(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if fileNamespace(ns) {
		return c.inner.Get(ctx, ns, name)
	}
	return c.get(ctx, cacheKey(ns, name), func(ctx context.Context) ([]byte, error) { return c.inner.Get(ctx, ns, name) })
}

// GetRange serves a slice of an object as Get serves an object, cached
// under a key of its own: packs are read a slice (an object) at a time,
// or several adjacent slices together (getSlices), never whole. Deleting
// a pack through this store leaves its cached slices to age out: each is
// an object its reader checks against its ID.
func (c *CachedBlobStore) GetRange(ctx context.Context, ns graveler.StorageNamespace, name string, offset, length int64) ([]byte, error) {
	if err := checkBlobRange(name, offset, length); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if fileNamespace(ns) {
		return c.inner.GetRange(ctx, ns, name, offset, length)
	}
	return c.get(ctx, sliceKey(ns, name, offset, length), func(ctx context.Context) ([]byte, error) { return c.inner.GetRange(ctx, ns, name, offset, length) })
}

func sliceKey(ns graveler.StorageNamespace, name string, offset, length int64) string {
	return cacheKey(ns, name+"\x00"+strconv.FormatInt(offset, 10)+"+"+strconv.FormatInt(length, 10))
}

// getSlices serves the adjacent slices of an object that begin at offset
// (a listing's run of ranges, Manager.readAhead), each cached under the
// key GetRange caches it under, so either finds what the other cached.
// When none is cached or being read, they are read from the inner store
// in one read (one GET where each slice would cost one); otherwise each
// is served as GetRange serves it.
func (c *CachedBlobStore) getSlices(ctx context.Context, ns graveler.StorageNamespace, name string, offset int64, lengths []int64) ([][]byte, error) {
	var total int64
	for _, l := range lengths {
		if err := checkBlobRange(name, offset+total, l); err != nil {
			return nil, err
		}
		total += l
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if fileNamespace(ns) {
		return readSlices(ctx, c.inner, ns, name, offset, lengths)
	}
	keys := make([]string, len(lengths))
	at := offset
	for i, l := range lengths {
		keys[i] = sliceKey(ns, name, at, l)
		at += l
	}
	c.mu.Lock()
	known := false
	for _, k := range keys {
		_, cached := c.index[k]
		_, reading := c.inflight[k]
		known = known || cached || reading
	}
	gen := c.delGen
	c.mu.Unlock()
	if known {
		out := make([][]byte, len(lengths))
		at = offset
		for i, l := range lengths {
			data, err := c.GetRange(ctx, ns, name, at, l)
			if err != nil {
				return nil, err
			}
			out[i] = data
			at += l
		}
		return out, nil
	}
	c.misses.Add(uint64(len(lengths)))
	data, err := c.inner.GetRange(ctx, ns, name, offset, total)
	if err != nil {
		return nil, err
	}
	out, err := splitSlices(name, offset, data, lengths)
	if err != nil {
		return nil, err
	}
	for i, d := range out {
		c.store(keys[i], d, &gen)
	}
	return out, nil
}

// reread reads an object from the store behind, past a cached copy, and
// replaces the copy with what it read (Manager.reloadRoot: a root cached
// before another writer replaced it, or before its namespace was emptied
// and written again).
func (c *CachedBlobStore) reread(ctx context.Context, ns graveler.StorageNamespace, name string) ([]byte, error) {
	if err := ValidateBlobName(name); err != nil {
		return nil, err
	}
	data, err := c.inner.Get(ctx, ns, name)
	if fileNamespace(ns) {
		return data, err
	}
	key := cacheKey(ns, name)
	if err != nil {
		if errors.Is(err, ErrBlobNotFound) {
			c.forget(key)
		}
		return nil, err
	}
	c.store(key, data, nil)
	return data, nil
}

// get returns the cached copy under key, or reads it with fetch (once for
// all concurrent callers) and caches it.
func (c *CachedBlobStore) get(ctx context.Context, key string, fetch func(context.Context) ([]byte, error)) ([]byte, error) {
	for {
		c.mu.Lock()
		if el, ok := c.index[key]; ok {
			c.lru.MoveToFront(el)
			c.mu.Unlock()
			if data, ok := c.readFile(key); ok {
				c.hits.Add(1)
				return data, nil
			}
			// Damaged or gone: forget it and read the object again.
			c.mu.Lock()
			if cur, ok := c.index[key]; ok && cur == el {
				c.removeLocked(el)
			}
			c.mu.Unlock()
			continue
		}
		if call, ok := c.inflight[key]; ok {
			call.waiters++
			c.mu.Unlock()
			select {
			case <-call.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if call.err == nil {
				c.hits.Add(1)
				return bytes.Clone(call.data), nil
			}
			if cacheIsCtxErr(call.err) && ctx.Err() == nil {
				continue // that reader gave up; this one has not
			}
			return nil, call.err
		}
		call := &cacheCall{done: make(chan struct{})}
		c.inflight[key] = call
		gen := c.delGen
		c.mu.Unlock()

		c.misses.Add(1)
		data, err := fetch(ctx)
		if err == nil {
			c.store(key, data, &gen)
		}
		c.mu.Lock()
		delete(c.inflight, key)
		shared := call.waiters > 0
		c.mu.Unlock()
		call.err = err
		if shared && err == nil {
			// The caller owns data and may change it; waiters copy this one.
			call.data = bytes.Clone(data)
		}
		close(call.done)
		return data, err
	}
}

func cacheIsCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// readFile returns a cached object if its file is whole.
func (c *CachedBlobStore) readFile(key string) ([]byte, bool) {
	p := filepath.Join(c.dir, key)
	raw, err := os.ReadFile(p)
	if err != nil || len(raw) < cacheHeaderLen || string(raw[:len(cacheMagic)]) != cacheMagic {
		return nil, false
	}
	n := binary.BigEndian.Uint64(raw[len(cacheMagic):])
	sum := binary.BigEndian.Uint32(raw[len(cacheMagic)+8:])
	data := raw[cacheHeaderLen:]
	if uint64(len(data)) != n || crc32.Checksum(data, cacheCRC) != sum {
		return nil, false
	}
	// Keep the modification time in step with use, so a restarted cache
	// adopts files in least-recently-used order. Best effort.
	now := time.Now()
	_ = os.Chtimes(p, now, now)
	return data, true
}

// store caches data under key, replacing any cached copy. With gen set,
// the copy is dropped if a Delete ran since gen was read. Failing to write
// the cache is not an error: the object is still in the inner store.
func (c *CachedBlobStore) store(key string, data []byte, gen *uint64) {
	size := int64(cacheHeaderLen) + int64(len(data))
	if size > c.max {
		c.forget(key)
		return
	}
	tmp, err := c.writeTemp(data)
	if err != nil {
		c.forget(key)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != nil && *gen != c.delGen {
		_ = os.Remove(tmp)
		return
	}
	// Renaming under the lock keeps the index and the directory in step.
	if err := os.Rename(tmp, filepath.Join(c.dir, key)); err != nil {
		_ = os.Remove(tmp)
		return
	}
	if el, ok := c.index[key]; ok {
		e := el.Value.(*cacheEntry)
		c.bytes.Add(size - e.size)
		e.size = size
		c.lru.MoveToFront(el)
	} else {
		c.index[key] = c.lru.PushFront(&cacheEntry{key: key, size: size})
		c.bytes.Add(size)
	}
	c.evictLocked()
}

func (c *CachedBlobStore) writeTemp(data []byte) (string, error) {
	f, err := os.CreateTemp(c.dir, cacheTempPfx+"*")
	if err != nil {
		return "", err
	}
	var hdr [cacheHeaderLen]byte
	copy(hdr[:], cacheMagic)
	binary.BigEndian.PutUint64(hdr[len(cacheMagic):], uint64(len(data)))
	binary.BigEndian.PutUint32(hdr[len(cacheMagic)+8:], crc32.Checksum(data, cacheCRC))
	_, err = f.Write(hdr[:])
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// evictLocked drops least recently used files until the cache fits.
func (c *CachedBlobStore) evictLocked() {
	for c.bytes.Load() > c.max {
		el := c.lru.Back()
		if el == nil {
			return
		}
		c.removeLocked(el)
		c.evictions.Add(1)
	}
}

func (c *CachedBlobStore) removeLocked(el *list.Element) {
	e := el.Value.(*cacheEntry)
	_ = os.Remove(filepath.Join(c.dir, e.key))
	c.lru.Remove(el)
	delete(c.index, e.key)
	c.bytes.Add(-e.size)
}

func (c *CachedBlobStore) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.index[key]; ok {
		c.removeLocked(el)
	}
}

func (c *CachedBlobStore) Put(ctx context.Context, ns graveler.StorageNamespace, name string, data []byte) error {
	if err := ValidateBlobName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := c.inner.Put(ctx, ns, name, data); err != nil {
		return err
	}
	if fileNamespace(ns) {
		// A copy would create a second file for every object a commit
		// writes (half a 10M-entry commit's system time).
		return nil
	}
	key := cacheKey(ns, name)
	if strings.HasPrefix(name, packsPrefix) || strings.HasPrefix(name, metarangesPrefix) {
		// Packs are read a slice at a time, never whole. A root is read
		// from the store once a commit names it: until then it may be
		// replaced by another writer's root of the same ID, whose packs
		// differ (see "Packs" in the package doc). Either way a copy
		// cached before is dropped, as the object was just replaced.
		c.drop(key)
		return nil
	}
	// Written ranges are often read soon after, and reading one back from
	// a remote store costs a request.
	c.store(key, data, nil)
	return nil
}

func (c *CachedBlobStore) Exists(ctx context.Context, ns graveler.StorageNamespace, name string) (bool, error) {
	return c.inner.Exists(ctx, ns, name)
}

func (c *CachedBlobStore) List(ctx context.Context, ns graveler.StorageNamespace, prefix string, fn func([]BlobInfo) error) error {
	return c.inner.List(ctx, ns, prefix, fn)
}

func (c *CachedBlobStore) Stat(ctx context.Context, ns graveler.StorageNamespace, name string) (BlobInfo, error) {
	return c.inner.Stat(ctx, ns, name)
}

func (c *CachedBlobStore) Touch(ctx context.Context, ns graveler.StorageNamespace, name string) error {
	return c.inner.Touch(ctx, ns, name)
}

func (c *CachedBlobStore) BeginWrites(ctx context.Context, ns graveler.StorageNamespace) (Syncer, error) {
	return c.inner.BeginWrites(ctx, ns)
}

func (c *CachedBlobStore) Delete(ctx context.Context, ns graveler.StorageNamespace, name string) error {
	if err := ValidateBlobName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// A blob, not a kv record: content-addressed and immutable.
	err := c.inner.Delete(ctx, ns, name)
	// Even if the inner delete failed, a missing cached copy only costs a read.
	c.drop(cacheKey(ns, name))
	return err
}

// drop removes the cached copy under key, and keeps a read under way from
// caching what it read before the object was replaced or deleted.
func (c *CachedBlobStore) drop(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.delGen++
	if el, ok := c.index[key]; ok {
		c.removeLocked(el)
	}
}

// Close unregisters the metrics and closes the inner store. The cached
// files stay for the next cache over the same directory.
func (c *CachedBlobStore) Close() error {
	c.mu.Lock()
	reg, cols := c.reg, c.cols
	c.reg, c.cols = nil, nil
	c.mu.Unlock()
	for _, col := range cols {
		reg.Unregister(col)
	}
	return c.inner.Close()
}
