package committed

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"graveler/graveler"
)

// Defaults for Config's zero fields. The sizes were chosen by measuring
// commits of 1,000 keys onto heads of 10k to 10M entries (see
// docs/performance.md, "Committed tree", "Packs" and "Ramps"): with
// packs, the number of objects a commit writes no longer costs a blob
// each, so ranges and nodes are small (about 2 KiB), and the ramps bound
// them in bytes, since a scattered commit rewrites the ranges and nodes
// its changes fall in, in proportion to their size. Trees written under
// earlier defaults pass through writes under these, untouched subtrees
// whole (see "Boundaries" in the package doc).
const (
	DefaultMinRangeSize    = 1 << 10
	DefaultMaxRangeSize    = 64 << 10
	DefaultBoundaryMask    = 1<<4 - 1
	DefaultMinNodeSize     = 1 << 10
	DefaultMaxNodeSize     = 32 << 10
	DefaultNodeMask        = 1<<4 - 1
	DefaultRangeRamp       = 2 << 10
	DefaultNodeRamp        = 2 << 10
	DefaultBlockSize       = 4 << 10
	DefaultNodeCacheBytes  = 64 << 20
	DefaultRangeCacheBytes = 64 << 20
	DefaultGCGrace         = 6 * time.Hour
	// freshnessGeneration is half the objects a Manager remembers as
	// recently written or touched, to spare them a Stat (see freshness).
	freshnessGeneration = 1 << 19
	// refreshParallelism bounds the Stats and Touches one tree write has
	// in flight.
	refreshParallelism = 16
	// DefaultWriteParallelism bounds the object writes one tree write has
	// in flight; readAhead bounds the ranges Apply reads ahead of its walk.
	DefaultWriteParallelism = 16
	readAhead               = 16
)

// Config tunes tree boundaries and the in-memory caches. Zero fields take
// the defaults above. Tree IDs are reproducible only under one
// configuration of the sizes, masks, ramps and BlockSize.
type Config struct {
	// MinRangeSize: no content-defined cut before a range (leaf) holds
	// this many bytes of encoded records.
	MinRangeSize int
	// MaxRangeSize: a range is cut after the record that reaches this size.
	MaxRangeSize int
	// BoundaryMask: past MinRangeSize, a range ends after a key whose
	// boundary hash has these bits all zero (2^bits keys per cut on average).
	BoundaryMask uint64
	// MinNodeSize, MaxNodeSize and NodeMask are the same rule for inner
	// nodes, over their child entries, with a hash that differs per level.
	MinNodeSize int
	MaxNodeSize int
	NodeMask    uint64
	// RangeRamp and NodeRamp: past its minimum size, a range (node) is
	// also cut after a record with a chance that rises with its bytes
	// past the minimum (or past four entries' worth for long keys, see
	// rampStart), from 0 to certainty at this many, so that its size is
	// bounded in bytes rather than in records (see cutPast). Negative:
	// the mask alone.
	RangeRamp int
	NodeRamp  int
	// BlockSize is the target size of a data block within a range file.
	BlockSize int
	// WriteParallelism bounds the objects one Apply or tree write has in
	// flight at once (with Unpacked; packs are stored two at a time).
	WriteParallelism int
	// PackBytes: a writer seals the pack it fills once it holds this many
	// bytes of objects (default DefaultPackBytes).
	PackBytes int
	// Unpacked writes every range and inner node as an object of its
	// own, as versions before packs did, instead of in packs: one blob
	// store write per object rather than one per PackBytes. For
	// comparison and for tests; trees of either kind read the same.
	Unpacked bool
	// NodeCacheBytes bounds the decoded inner nodes kept, by stored size.
	NodeCacheBytes int
	// RangeCacheBytes bounds the decoded range files kept, by their size.
	RangeCacheBytes int
	// GCGrace is the grace period of the collector of unreferenced objects
	// (the cleaner's --gc-grace must be at least this): it never deletes an
	// object modified within it. A tree's ID is handed out only once every
	// child its new nodes reference was written or touched within
	// GCGrace/2, so a commit recorded within GCGrace/2 of receiving it
	// references only objects a collection that marked before the commit
	// keeps.
	GCGrace time.Duration
	// Now returns the current time (default time.Now), by which the
	// writer judges how old an object is.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.MinRangeSize <= 0 {
		c.MinRangeSize = DefaultMinRangeSize
	}
	if c.MaxRangeSize <= 0 {
		c.MaxRangeSize = max(DefaultMaxRangeSize, c.MinRangeSize)
	}
	if c.MaxRangeSize < c.MinRangeSize {
		c.MaxRangeSize = c.MinRangeSize
	}
	if c.BoundaryMask == 0 {
		c.BoundaryMask = DefaultBoundaryMask
	}
	if c.MinNodeSize <= 0 {
		c.MinNodeSize = DefaultMinNodeSize
	}
	if c.MaxNodeSize <= 0 {
		c.MaxNodeSize = max(DefaultMaxNodeSize, c.MinNodeSize)
	}
	if c.MaxNodeSize < c.MinNodeSize {
		c.MaxNodeSize = c.MinNodeSize
	}
	if c.NodeMask == 0 {
		c.NodeMask = DefaultNodeMask
	}
	if c.RangeRamp == 0 {
		c.RangeRamp = DefaultRangeRamp
	}
	if c.NodeRamp == 0 {
		c.NodeRamp = DefaultNodeRamp
	}
	if c.BlockSize <= 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.WriteParallelism <= 0 {
		c.WriteParallelism = DefaultWriteParallelism
	}
	if c.PackBytes <= 0 {
		c.PackBytes = DefaultPackBytes
	}
	if c.NodeCacheBytes <= 0 {
		c.NodeCacheBytes = DefaultNodeCacheBytes
	}
	if c.RangeCacheBytes <= 0 {
		c.RangeCacheBytes = DefaultRangeCacheBytes
	}
	if c.GCGrace <= 0 {
		c.GCGrace = DefaultGCGrace
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Manager implements graveler.CommittedManager over a BlobStore.
type Manager struct {
	blobs BlobStore
	cfg   Config
	nodes *lru[*treeNode]
	// ranges caches decoded ranges. loading and nodeLoading hold the
	// reads in flight, so that a range or node read ahead (or wanted by
	// several readers at once) is not read twice.
	ranges      *lru[*rangeFile]
	mu          sync.Mutex
	loading     map[string]*load[*rangeFile]
	nodeLoading map[string]*load[*treeNode]
	// fresh maps an object (rangeCacheKey of its blob name) to a time its
	// modification time is known to be no older than: when this Manager
	// wrote, touched or statted it.
	fresh *freshness
}

// load is a read in flight that others wanting the same object wait for.
type load[T any] struct {
	done chan struct{}
	v    T
	err  error
}

// loadShared returns the object cache holds under key, or reads it with
// read (which returns it and its size for the cache), once for every
// caller that wants it meanwhile: the others wait for that read. A
// waiter whose reader gave up (its context ended) while the waiter has
// not reads it again itself; no waiter is handed another's cancellation.
// So does one that waited on a run read ahead that did not decode its
// range (errNotReadAhead).
func loadShared[T any](ctx context.Context, m *Manager, inflight map[string]*load[T], cache *lru[T], key string, read func() (T, int, error)) (T, error) {
	if v, ok := cache.get(key); ok {
		return v, nil
	}
	m.mu.Lock()
	if l, ok := inflight[key]; ok {
		m.mu.Unlock()
		select {
		case <-l.done:
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err()
		}
		if l.err != nil && ctx.Err() == nil && (errors.Is(l.err, context.Canceled) || errors.Is(l.err, context.DeadlineExceeded) || errors.Is(l.err, errNotReadAhead)) {
			return loadShared(ctx, m, inflight, cache, key, read)
		}
		return l.v, l.err
	}
	// A load may have finished between the lookup above and the lock;
	// it adds to the cache before it leaves inflight.
	if v, ok := cache.get(key); ok {
		m.mu.Unlock()
		return v, nil
	}
	l := &load[T]{done: make(chan struct{})}
	inflight[key] = l
	m.mu.Unlock()
	var size int
	l.v, size, l.err = read()
	if l.err == nil {
		cache.add(key, l.v, size)
	}
	m.mu.Lock()
	delete(inflight, key)
	m.mu.Unlock()
	close(l.done)
	return l.v, l.err
}

var _ graveler.CommittedManager = (*Manager)(nil)

// NewManager returns a Manager storing trees in blobs.
func NewManager(blobs BlobStore, cfg Config) *Manager {
	cfg = cfg.withDefaults()
	return &Manager{
		blobs:       blobs,
		cfg:         cfg,
		nodes:       newLRU[*treeNode](cfg.NodeCacheBytes),
		ranges:      newLRU[*rangeFile](cfg.RangeCacheBytes),
		loading:     map[string]*load[*rangeFile]{},
		nodeLoading: map[string]*load[*treeNode]{},
		fresh:       newFreshness(freshnessGeneration),
	}
}

// loadRoot returns the root node of tree id; emptyNode for "".
func (m *Manager) loadRoot(ctx context.Context, ns graveler.StorageNamespace, id graveler.MetaRangeID) (*treeNode, error) {
	if id == "" {
		return emptyNode, nil
	}
	if err := checkMetaRangeID(id); err != nil {
		return nil, err
	}
	n, err := m.loadNode(ctx, ns, id, Location{})
	if errors.Is(err, ErrBlobNotFound) {
		return nil, fmt.Errorf("%w: %s", graveler.ErrMetaRangeNotFound, id)
	}
	return n, err
}

// loadNode returns a decoded inner node stored at loc (IDs come from
// checked parents or the caller).
func (m *Manager) loadNode(ctx context.Context, ns graveler.StorageNamespace, id graveler.MetaRangeID, loc Location) (*treeNode, error) {
	return loadShared(ctx, m, m.nodeLoading, m.nodes, nodeCacheKey(ns, string(id), loc), func() (*treeNode, int, error) {
		data, err := readStored(ctx, m.blobs, ns, metaRangeBlobName(id), loc)
		if err != nil {
			return nil, 0, fmt.Errorf("committed: read metarange %s: %w", id, err)
		}
		n, err := decodeStoredNode(data, string(id))
		if err != nil {
			return nil, 0, fmt.Errorf("committed: metarange %s: %w", id, err)
		}
		return n, n.stored, nil
	})
}

// nodeCacheKey keys a decoded inner node by where it is stored as well
// as by its ID: two copies of a node, in different packs, may place its
// children in different packs too, and a collector keeps the copies a
// live tree names, not every copy.
func nodeCacheKey(ns graveler.StorageNamespace, id string, loc Location) string {
	if !loc.Packed() {
		return rangeCacheKey(ns, id)
	}
	return rangeCacheKey(ns, id) + "\x00" + loc.Pack + "\x00" + strconv.FormatInt(loc.Offset, 10)
}

// loadChild loads child d of a node at level parent, checking that it is
// at the level the parent puts it.
func (m *Manager) loadChild(ctx context.Context, ns graveler.StorageNamespace, d *RangeDescriptor, parent int) (*treeNode, error) {
	n, err := m.loadNode(ctx, ns, graveler.MetaRangeID(d.ID), d.Loc)
	if err != nil {
		return nil, err
	}
	if n.level != parent-1 {
		return nil, fmt.Errorf("%w: metarange %s: level %d under a node of level %d", ErrCorrupt, d.ID, n.level, parent)
	}
	return n, nil
}

// loadRange returns the decoded range d names. Ranges are cached by ID
// alone: every copy of one holds the same bytes.
func (m *Manager) loadRange(ctx context.Context, ns graveler.StorageNamespace, d *RangeDescriptor) (*rangeFile, error) {
	// IDs come from decoded nodes, which checked them.
	id, loc := d.ID, d.Loc
	return loadShared(ctx, m, m.loading, m.ranges, rangeCacheKey(ns, string(id)), func() (*rangeFile, int, error) {
		f, err := m.readRange(ctx, ns, id, loc)
		if err != nil {
			return nil, 0, err
		}
		return f, len(f.data), nil
	})
}

func (m *Manager) readRange(ctx context.Context, ns graveler.StorageNamespace, id graveler.RangeID, loc Location) (*rangeFile, error) {
	data, err := readStored(ctx, m.blobs, ns, rangeBlobName(id), loc)
	if err != nil {
		return nil, fmt.Errorf("committed: read range %s: %w", id, err)
	}
	return decodeRange(id, data)
}

// decodeRange checks data, as read, against range id and decodes it.
func decodeRange(id graveler.RangeID, data []byte) (*rangeFile, error) {
	if contentID(data) != string(id) {
		return nil, fmt.Errorf("%w: range %s: content hash differs", ErrCorrupt, id)
	}
	f, err := parseRange(data)
	if err != nil {
		return nil, fmt.Errorf("committed: range %s: %w", id, err)
	}
	if f.version != leafVersion {
		return nil, fmt.Errorf("%w: range %s: an inner node's format", ErrCorrupt, id)
	}
	return f, nil
}

// Read-ahead of a listing (cursor.ahead): a listing that reads one
// range after another reads the ranges that follow it in the same pack
// with it, in one read. The run it reads doubles from readAheadStart up
// to readAheadRanges, so that a page of a few entries reads little more
// than it needs, while a long listing pays one read per run instead of
// one per range (a pread from a file, a GET from S3).
const (
	readAheadStart        = 2
	readAheadRanges       = 64
	readAheadBytes  int64 = 256 << 10
)

// errNotReadAhead is what a run's read leaves, for a reader that waited
// on it, for a range it did not decode (the read failed, the range failed
// its check, or the listing gave up): that reader reads the range itself,
// which reports why.
var errNotReadAhead = errors.New("committed: range not read ahead")

// readAhead reads, when ds[0] is a range neither cached nor being read,
// it and the ranges that follow it contiguously in the same pack and are
// neither (at most n ranges, readAheadBytes, and an eighth of the range
// cache, so that a run does not evict itself), in one read, and caches
// each. It reports whether it read. The run's ranges count as being read
// (Manager.loading) until it is done, so another reader that wants one
// waits for it instead of reading it again. Best effort: a range it does
// not cache is read on its own when wanted, which reports the error.
func (m *Manager) readAhead(ctx context.Context, ns graveler.StorageNamespace, ds []RangeDescriptor, n int) bool {
	first := ds[0].Loc
	if !first.Packed() || n < 2 {
		return false
	}
	limit := min(readAheadBytes, int64(m.cfg.RangeCacheBytes/8))
	var keys []string
	var loads []*load[*rangeFile]
	var lengths []int64
	end := first.Offset
	m.mu.Lock()
	for k := 0; k < len(ds) && k < n; k++ {
		l := ds[k].Loc
		if l.Pack != first.Pack || l.Offset != end || end+l.Length-first.Offset > limit {
			break
		}
		key := rangeCacheKey(ns, string(ds[k].ID))
		if _, busy := m.loading[key]; busy || m.ranges.has(key) {
			break
		}
		ld := &load[*rangeFile]{done: make(chan struct{}), err: errNotReadAhead}
		m.loading[key] = ld
		keys, loads, lengths = append(keys, key), append(loads, ld), append(lengths, l.Length)
		end += l.Length
	}
	if len(keys) < 2 {
		// Nobody can have joined these: m.mu was held throughout.
		for _, key := range keys {
			delete(m.loading, key)
		}
		m.mu.Unlock()
		return false
	}
	m.mu.Unlock()
	pieces, err := readSlices(ctx, m.blobs, ns, PackObjectName(first.Pack), first.Offset, lengths)
	// Last to first, so that the range the listing wants next is the most
	// recently used.
	for i := len(keys) - 1; err == nil && i >= 0; i-- {
		if ctx.Err() != nil {
			break
		}
		if f, derr := decodeRange(ds[i].ID, pieces[i]); derr == nil {
			loads[i].v, loads[i].err = f, nil
			m.ranges.add(keys[i], f, len(f.data))
		}
	}
	// As loadShared: cached before it leaves loading.
	m.mu.Lock()
	for _, key := range keys {
		delete(m.loading, key)
	}
	m.mu.Unlock()
	for _, ld := range loads {
		close(ld.done)
	}
	return err == nil
}

// sliceReader is a store that reads adjacent slices of one object at once
// and keeps each as the slice it is (CachedBlobStore caches each under
// the key GetRange would).
type sliceReader interface {
	getSlices(ctx context.Context, ns graveler.StorageNamespace, name string, offset int64, lengths []int64) ([][]byte, error)
}

// readSlices reads the adjacent slices of object name that begin at
// offset, of the lengths given, in one read of the store where it can,
// each slice in memory of its own.
func readSlices(ctx context.Context, blobs BlobStore, ns graveler.StorageNamespace, name string, offset int64, lengths []int64) ([][]byte, error) {
	if sr, ok := blobs.(sliceReader); ok {
		return sr.getSlices(ctx, ns, name, offset, lengths)
	}
	var total int64
	for _, l := range lengths {
		total += l
	}
	data, err := blobs.GetRange(ctx, ns, name, offset, total)
	if err != nil {
		return nil, err
	}
	return splitSlices(name, offset, data, lengths)
}

// splitSlices cuts data, read at offset, into slices of the lengths
// given, each a copy: a slice kept must not hold the others in memory.
func splitSlices(name string, offset int64, data []byte, lengths []int64) ([][]byte, error) {
	out := make([][]byte, len(lengths))
	var at int64
	for i, l := range lengths {
		if at+l > int64(len(data)) {
			return nil, fmt.Errorf("committed: %q at %d+%d: %w", name, offset+at, l, ErrShortBlob)
		}
		out[i] = bytes.Clone(data[at : at+l])
		at += l
	}
	return out, nil
}

// Get returns a committed value or graveler.ErrEntryNotFound.
func (m *Manager) Get(ctx context.Context, ns graveler.StorageNamespace, id graveler.MetaRangeID, key graveler.Key) (*graveler.Value, error) {
	n, err := m.loadRoot(ctx, ns, id)
	if err != nil {
		return nil, err
	}
	v, err := m.get(ctx, ns, n, key)
	if errors.Is(err, ErrBlobNotFound) && id != "" {
		// Perhaps a stale copy of the root: read it again (reloadRoot).
		if n, rerr := m.reloadRoot(ctx, ns, id); rerr == nil {
			return m.get(ctx, ns, n, key)
		}
	}
	return v, err
}

// reloadRoot reads root id again from the store itself, past any copy a
// cache keeps, and replaces the Manager's copy. A cached root may name
// packs that are gone: the same entries written again store a root of the
// same ID naming other packs, and a collector keeps the packs the stored
// root names (and those holding a live object) but not a replaced root's
// others once its tree is gone, as when a repository is deleted and
// another writes the same tree to the same namespace. The shape is the
// same, as the ID is; only where the objects are may differ.
func (m *Manager) reloadRoot(ctx context.Context, ns graveler.StorageNamespace, id graveler.MetaRangeID) (*treeNode, error) {
	name := metaRangeBlobName(id)
	var data []byte
	var err error
	if rr, ok := m.blobs.(rereader); ok {
		data, err = rr.reread(ctx, ns, name)
	} else {
		data, err = m.blobs.Get(ctx, ns, name)
	}
	if errors.Is(err, ErrBlobNotFound) {
		return nil, fmt.Errorf("committed: read metarange %s: %w: %w", id, graveler.ErrMetaRangeNotFound, err)
	}
	if err != nil {
		return nil, fmt.Errorf("committed: read metarange %s: %w", id, err)
	}
	n, err := decodeStoredNode(data, string(id))
	if err != nil {
		return nil, fmt.Errorf("committed: metarange %s: %w", id, err)
	}
	m.nodes.set(rangeCacheKey(ns, string(id)), n, n.stored)
	return n, nil
}

// rereader is a store that keeps copies of objects (CachedBlobStore) and
// can read one again from the store behind it, replacing its copy.
type rereader interface {
	reread(ctx context.Context, ns graveler.StorageNamespace, name string) ([]byte, error)
}

// get looks key up in the tree under root n.
func (m *Manager) get(ctx context.Context, ns graveler.StorageNamespace, n *treeNode, key graveler.Key) (*graveler.Value, error) {
	var err error
	for {
		i := n.find(key)
		if i == len(n.children) || bytes.Compare(key, n.children[i].MinKey) < 0 {
			return nil, graveler.ErrEntryNotFound
		}
		d := &n.children[i]
		if n.level > 1 {
			if n, err = m.loadChild(ctx, ns, d, n.level); err != nil {
				return nil, err
			}
			continue
		}
		f, err := m.loadRange(ctx, ns, d)
		if err != nil {
			return nil, err
		}
		it := newRangeIter(f)
		it.SeekGE(key)
		if !it.Next() || !bytes.Equal(it.Value().Key, key) {
			return nil, graveler.ErrEntryNotFound
		}
		v := it.Value().Value
		return &graveler.Value{Identity: bytes.Clone(v.Identity), Data: bytes.Clone(v.Data)}, nil
	}
}

// List iterates a tree in key order, reading each node and range when the
// iterator first needs it.
func (m *Manager) List(ctx context.Context, ns graveler.StorageNamespace, id graveler.MetaRangeID) (graveler.ValueIterator, error) {
	root, err := m.loadRoot(ctx, ns, id)
	if err != nil {
		return nil, err
	}
	c := newCursor(ctx, m, ns, id, root)
	c.ahead = readAheadStart
	return &listIter{c: c, pending: true}, nil
}

// Exists reports whether a tree is stored; the empty tree always is.
func (m *Manager) Exists(ctx context.Context, ns graveler.StorageNamespace, id graveler.MetaRangeID) (bool, error) {
	if id == "" {
		return true, nil
	}
	if err := checkMetaRangeID(id); err != nil {
		return false, err
	}
	if _, ok := m.nodes.get(rangeCacheKey(ns, string(id))); ok {
		return true, nil
	}
	return m.blobs.Exists(ctx, ns, metaRangeBlobName(id))
}

// WriteMetaRangeByIterator writes the entries of a sorted iterator as a
// tree, level by level as the stream goes, its objects written
// concurrently. A tombstone or a key out of order is an error wrapping
// graveler.ErrInvalidArgument. No entries give the empty tree "".
func (m *Manager) WriteMetaRangeByIterator(ctx context.Context, ns graveler.StorageNamespace, it graveler.ValueIterator) (graveler.MetaRangeID, error) {
	w := m.newWriter(ctx, ns)
	defer w.abort()
	for it.Next() {
		rec := it.Value()
		if rec.IsTombstone() {
			return "", fmt.Errorf("committed: tombstone for %q: %w", rec.Key, graveler.ErrInvalidArgument)
		}
		if err := w.add(rec.Key, rec.Identity, rec.Data); err != nil {
			return "", err
		}
	}
	if err := it.Err(); err != nil {
		return "", err
	}
	return w.finish()
}

// lru is a mutex-guarded least-recently-used map bounded by total cost.
type lru[V any] struct {
	mu    sync.Mutex
	limit int
	used  int
	order *list.List // front = most recent
	items map[string]*list.Element
}

type lruItem[V any] struct {
	key  string
	val  V
	cost int
}

func newLRU[V any](limit int) *lru[V] {
	return &lru[V]{limit: limit, order: list.New(), items: map[string]*list.Element{}}
}

func (c *lru[V]) get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*lruItem[V]).val, true
	}
	var zero V
	return zero, false
}

// add inserts an item; the newest item stays even if it alone exceeds the
// limit, so a huge range can still be iterated. An item already there is
// kept as it is.
func (c *lru[V]) add(key string, val V, cost int) { c.put(key, val, cost, false) }

// has reports whether key is cached, without counting as a use.
func (c *lru[V]) has(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.items[key]
	return ok
}

// set inserts an item or replaces the value of the one there.
func (c *lru[V]) set(key string, val V, cost int) { c.put(key, val, cost, true) }

func (c *lru[V]) put(key string, val V, cost int, replace bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		c.order.MoveToFront(e)
		if replace {
			e.Value.(*lruItem[V]).val = val
		}
		return
	}
	c.items[key] = c.order.PushFront(&lruItem[V]{key: key, val: val, cost: cost})
	c.used += cost
	for c.used > c.limit && c.order.Len() > 1 {
		e := c.order.Back()
		it := e.Value.(*lruItem[V])
		c.order.Remove(e)
		delete(c.items, it.key)
		c.used -= it.cost
	}
}
