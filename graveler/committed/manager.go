package committed

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"graveler/graveler"
)

// Defaults for Config's zero fields.
const (
	DefaultMinRangeSize       = 64 << 10
	DefaultMaxRangeSize       = 8 << 20
	DefaultBoundaryMask       = 1<<12 - 1
	DefaultBlockSize          = 32 << 10
	DefaultMetaRangeCacheSize = 1024
	DefaultRangeCacheBytes    = 64 << 20
	DefaultGCGrace            = 6 * time.Hour
	// freshnessEntries bounds how many objects a Manager remembers as
	// recently written or touched, to spare them a Stat.
	freshnessEntries = 1 << 16
	// refreshParallelism bounds the Stats and Touches one metarange write
	// has in flight.
	refreshParallelism = 16
)

// Config tunes range boundaries and the in-memory caches. Zero fields take
// the defaults above. Range IDs are reproducible only under one
// configuration of MinRangeSize, MaxRangeSize, BoundaryMask and BlockSize.
type Config struct {
	// MinRangeSize: no content-defined cut before a range holds this many
	// bytes of encoded records.
	MinRangeSize int
	// MaxRangeSize: a range is cut after the record that reaches this size.
	MaxRangeSize int
	// BoundaryMask: past MinRangeSize, a range ends after a key whose
	// boundary hash has these bits all zero (2^bits keys per cut on average).
	BoundaryMask uint64
	// BlockSize is the target size of a data block within a range file.
	BlockSize int
	// MetaRangeCacheSize bounds the decoded metaranges kept, by count.
	MetaRangeCacheSize int
	// RangeCacheBytes bounds the decoded range files kept, by their size.
	RangeCacheBytes int
	// GCGrace is the grace period of the collector of unreferenced objects
	// (the cleaner's --gc-grace must be at least this): it never deletes an
	// object modified within it. A metarange is written only once every
	// range it references was written or touched within GCGrace/2, so a
	// commit recorded within GCGrace/2 of writing its metarange references
	// only objects a collection that marked before the commit keeps.
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
		c.MaxRangeSize = DefaultMaxRangeSize
	}
	if c.MaxRangeSize < c.MinRangeSize {
		c.MaxRangeSize = c.MinRangeSize
	}
	if c.BoundaryMask == 0 {
		c.BoundaryMask = DefaultBoundaryMask
	}
	if c.BlockSize <= 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.MetaRangeCacheSize <= 0 {
		c.MetaRangeCacheSize = DefaultMetaRangeCacheSize
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
	blobs      BlobStore
	cfg        Config
	metaRanges *lru[*metaRange]
	ranges     *lru[*rangeFile]
	// fresh maps an object (rangeCacheKey of its blob name) to a time its
	// modification time is known to be no older than: when this Manager
	// wrote, touched or statted it.
	fresh *lru[time.Time]
}

var _ graveler.CommittedManager = (*Manager)(nil)

// NewManager returns a Manager storing ranges and metaranges in blobs.
func NewManager(blobs BlobStore, cfg Config) *Manager {
	cfg = cfg.withDefaults()
	return &Manager{
		blobs:      blobs,
		cfg:        cfg,
		metaRanges: newLRU[*metaRange](cfg.MetaRangeCacheSize),
		ranges:     newLRU[*rangeFile](cfg.RangeCacheBytes),
		fresh:      newLRU[time.Time](freshnessEntries),
	}
}

// loadMetaRange returns the decoded metarange; nil for the empty tree.
func (m *Manager) loadMetaRange(ctx context.Context, ns graveler.StorageNamespace, id graveler.MetaRangeID) (*metaRange, error) {
	if id == "" {
		return &metaRange{}, nil
	}
	if err := checkMetaRangeID(id); err != nil {
		return nil, err
	}
	key := rangeCacheKey(ns, string(id))
	if mr, ok := m.metaRanges.get(key); ok {
		return mr, nil
	}
	data, err := m.blobs.Get(ctx, ns, metaRangeBlobName(id))
	if errors.Is(err, ErrBlobNotFound) {
		return nil, fmt.Errorf("%w: %s", graveler.ErrMetaRangeNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("committed: read metarange %s: %w", id, err)
	}
	if contentID(data) != string(id) {
		return nil, fmt.Errorf("%w: metarange %s: content hash differs", ErrCorrupt, id)
	}
	mr, err := decodeMetaRange(data)
	if err != nil {
		return nil, fmt.Errorf("committed: metarange %s: %w", id, err)
	}
	m.metaRanges.add(key, mr, 1)
	return mr, nil
}

func (m *Manager) loadRange(ctx context.Context, ns graveler.StorageNamespace, id graveler.RangeID) (*rangeFile, error) {
	// IDs come from decoded metaranges, which checked them.
	key := rangeCacheKey(ns, string(id))
	if f, ok := m.ranges.get(key); ok {
		return f, nil
	}
	data, err := m.blobs.Get(ctx, ns, rangeBlobName(id))
	if err != nil {
		return nil, fmt.Errorf("committed: read range %s: %w", id, err)
	}
	if contentID(data) != string(id) {
		return nil, fmt.Errorf("%w: range %s: content hash differs", ErrCorrupt, id)
	}
	f, err := parseRange(data)
	if err != nil {
		return nil, fmt.Errorf("committed: range %s: %w", id, err)
	}
	m.ranges.add(key, f, len(data))
	return f, nil
}

// Get returns a committed value or graveler.ErrEntryNotFound.
func (m *Manager) Get(ctx context.Context, ns graveler.StorageNamespace, id graveler.MetaRangeID, key graveler.Key) (*graveler.Value, error) {
	mr, err := m.loadMetaRange(ctx, ns, id)
	if err != nil {
		return nil, err
	}
	i := mr.find(key)
	if i == len(mr.ranges) || bytes.Compare(key, mr.ranges[i].MinKey) < 0 {
		return nil, graveler.ErrEntryNotFound
	}
	f, err := m.loadRange(ctx, ns, mr.ranges[i].ID)
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

// List iterates a metarange in key order, reading each range when the
// iterator first needs it.
func (m *Manager) List(ctx context.Context, ns graveler.StorageNamespace, id graveler.MetaRangeID) (graveler.ValueIterator, error) {
	mr, err := m.loadMetaRange(ctx, ns, id)
	if err != nil {
		return nil, err
	}
	return &listIter{c: newCursor(ctx, m, ns, mr), pending: true}, nil
}

// Exists reports whether a metarange is stored; the empty tree always is.
func (m *Manager) Exists(ctx context.Context, ns graveler.StorageNamespace, id graveler.MetaRangeID) (bool, error) {
	if id == "" {
		return true, nil
	}
	if err := checkMetaRangeID(id); err != nil {
		return false, err
	}
	if _, ok := m.metaRanges.get(rangeCacheKey(ns, string(id))); ok {
		return true, nil
	}
	return m.blobs.Exists(ctx, ns, metaRangeBlobName(id))
}

// WriteMetaRangeByIterator writes the entries of a sorted iterator. A
// tombstone or a key out of order is an error wrapping
// graveler.ErrInvalidArgument. No entries give the empty tree "".
func (m *Manager) WriteMetaRangeByIterator(ctx context.Context, ns graveler.StorageNamespace, it graveler.ValueIterator) (graveler.MetaRangeID, error) {
	w := m.newWriter(ctx, ns)
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
