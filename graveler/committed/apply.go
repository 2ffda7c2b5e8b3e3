package committed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"time"

	"graveler/graveler"
)

// boundaryHash is the hash content-defined boundaries test: 64-bit FNV-1a of
// the key, finished with MurmurHash3's fmix64 so its low bits (the ones the
// mask keeps) depend on every bit of the key.
func boundaryHash(key []byte) uint64 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for _, c := range key {
		h ^= uint64(c)
		h *= prime64
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// levelHash is the boundary hash of inner nodes at level (>= 1): the key's
// hash mixed with the level, so that cuts at one level are independent of
// those below (whose last keys all passed the lower level's test).
func levelHash(key []byte, level int) uint64 {
	h := boundaryHash(key) + uint64(level)*0x9e3779b97f4a7c15
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// cutAfter is the boundary rule: does a node of level (0: a range) of size
// bytes whose last key is key end here?
func (c *Config) cutAfter(level int, key []byte, size int) bool {
	if level == 0 {
		return size >= c.MaxRangeSize || (size >= c.MinRangeSize && cutPast(boundaryHash(key), c.BoundaryMask, size-rampStart(c.MinRangeSize, key), c.RangeRamp))
	}
	return size >= c.MaxNodeSize || (size >= c.MinNodeSize && cutPast(levelHash(key, level), c.NodeMask, size-rampStart(c.MinNodeSize, key), c.NodeRamp))
}

// rampStart is where the ramp of a node whose last key is key begins: at
// its minimum size, or once it holds about four parent entries' worth of
// bytes for keys that long (an entry carries two keys and ~48 bytes),
// whichever is later. With long keys a node reaches its minimum in one
// or two entries, and a ramp from there would cut nearly every inner
// node after one child, making trees ever taller (a 1 KiB key makes a
// 2 KiB entry), and every range after a record or two, each costing its
// keys again in its index and its parent. Keys up to about 100 bytes
// ramp from the minimum.
func rampStart(min int, key []byte) int {
	return max(min, 4*(2*len(key)+48))
}

// cutPast is the content-defined test of a node past its minimum size,
// past bytes past the start of its ramp (negative before it): the hash's
// mask bits all zero, or its high 32 bits below a threshold that rises
// with past from 0 to certainty at ramp bytes.
//
// The mask alone cuts after a number of records, so a node's size grows
// with its entries' (ranges of 4 KiB for entries of 200 bytes) and is
// spread geometrically; a change lands in a node in proportion to its
// size, so the nodes a scattered commit rewrites are the largest ones.
// The ramp bounds a node by bytes and narrows the spread. A cut of the
// mask stays a cut, so trees written under the mask alone still end
// their subtrees where this rule may (an untouched one passes through a
// write). The mask's bits are the hash's lowest, the ramp's its highest:
// the two tests are independent.
func cutPast(h, mask uint64, past, ramp int) bool {
	if h&mask == 0 {
		return true
	}
	if ramp <= 0 || past < 0 {
		return false
	}
	if past >= ramp {
		return true
	}
	// past * 2^32 / ramp, in 128 bits: past < ramp, so the quotient fits.
	hi, lo := bits.Mul64(uint64(past), 1<<32)
	threshold, _ := bits.Div64(hi, lo, uint64(ramp))
	return h>>32 < threshold
}

// writer turns a sorted stream of records (and of whole subtrees passed
// through) into a tree: ranges, then inner nodes level by level as each
// lower node is cut. Objects are written by up to Config.WriteParallelism
// goroutines; the root only once they all are.
type writer struct {
	ctx    context.Context
	cancel context.CancelFunc
	m      *Manager
	ns     graveler.StorageNamespace
	leaf   *rangeBuilder
	last   graveler.Key
	// levels[l-1] is the node being filled at level l.
	levels []*pendingNode
	// refs are the objects the new nodes reference: written here (at is
	// the time before the write) or passed through (at is zero).
	refs refList
	// leafSize is a running average of the ranges' file sizes, by which a
	// new range's buffer is sized.
	leafSize int
	sem      chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	err      error
	done     bool
	// syncer makes the objects written durable before the root's ID is
	// handed out; taken before the first write (begin).
	syncer Syncer
	// pack gathers the objects written since the last pack was sealed
	// (nil before the first, and with Config.Unpacked); packSem bounds
	// the sealed packs being stored.
	pack    *packBuilder
	packSem chan struct{}
	// distrust: the base root as stored differs from the one the write
	// went by, so refresh asks the store about every passed-through
	// subtree (checkBase).
	distrust bool
}

type pendingNode struct {
	children []RangeDescriptor
	size     int
	// flushed counts the nodes of this level handed to the level above so
	// far (cut here or passed through).
	flushed int
}

// objectRef names the blob holding an object by the object's kind and
// ID, or its pack's name, rather than by the blob's name, so passing a
// subtree through builds no string.
type objectRef struct {
	node bool
	id   string
	pack string
	at   time.Time
}

// refList holds refs in fixed-size chunks: a large tree's commit passes
// tens of thousands of subtrees through, and growing one slice would copy
// them over and over.
type refList struct {
	chunks [][]objectRef
}

const refChunk = 1024

func (l *refList) add(r objectRef) {
	if k := len(l.chunks); k == 0 || len(l.chunks[k-1]) == refChunk {
		l.chunks = append(l.chunks, make([]objectRef, 0, refChunk))
	}
	k := len(l.chunks) - 1
	l.chunks[k] = append(l.chunks[k], r)
}

func (r objectRef) name() string {
	if r.pack != "" {
		return packsPrefix + r.pack
	}
	if r.node {
		return metarangesPrefix + r.id
	}
	return rangesPrefix + r.id
}

// appendFreshKey appends the key under which Manager.fresh knows r:
// rangeCacheKey(ns, r.name()).
func (r objectRef) appendFreshKey(dst []byte, ns graveler.StorageNamespace) []byte {
	dst = append(dst, ns...)
	dst = append(dst, 0)
	if r.pack != "" {
		return append(append(dst, packsPrefix...), r.pack...)
	}
	if r.node {
		dst = append(dst, metarangesPrefix...)
	} else {
		dst = append(dst, rangesPrefix...)
	}
	return append(dst, r.id...)
}

func (m *Manager) newWriter(ctx context.Context, ns graveler.StorageNamespace) *writer {
	ctx, cancel := context.WithCancel(ctx)
	return &writer{ctx: ctx, cancel: cancel, m: m, ns: ns, leaf: newRangeBuilder(m.cfg.BlockSize, nil), leafSize: m.cfg.MinRangeSize,
		sem: make(chan struct{}, m.cfg.WriteParallelism), packSem: make(chan struct{}, packsInFlight)}
}

func (w *writer) level(l int) *pendingNode {
	for len(w.levels) < l {
		w.levels = append(w.levels, &pendingNode{})
	}
	return w.levels[l-1]
}

// atBoundary reports whether a subtree at level (0: a range) may be
// appended whole: nothing is pending at its level or below.
func (w *writer) atBoundary(level int) bool {
	if !w.leaf.empty() {
		return false
	}
	for l := 1; l <= level && l <= len(w.levels); l++ {
		if len(w.levels[l-1].children) > 0 {
			return false
		}
	}
	return true
}

func (w *writer) add(key, identity, data []byte) error {
	if len(key) == 0 {
		return fmt.Errorf("committed: empty key: %w", graveler.ErrInvalidKey)
	}
	if w.last != nil && bytes.Compare(w.last, key) >= 0 {
		return fmt.Errorf("committed: key %q not after %q: %w", key, w.last, graveler.ErrInvalidArgument)
	}
	w.leaf.add(key, identity, data)
	w.last = append(w.last[:0], key...)
	if w.m.cfg.cutAfter(0, key, w.leaf.size) {
		return w.flushLeaf()
	}
	return nil
}

// passThrough appends a stored subtree at level as is. Only at a boundary
// (atBoundary), so the result is what writing its records would produce.
func (w *writer) passThrough(d RangeDescriptor, level int) error {
	w.refs.add(objectRef{node: level > 0, id: string(d.ID), pack: d.Loc.Pack})
	w.last = append(w.last[:0], d.MaxKey...)
	if level > 0 {
		w.level(level).flushed++
	}
	return w.addChild(level+1, d)
}

func (w *writer) flushLeaf() error {
	if w.leaf.empty() {
		return nil
	}
	b := w.leaf
	desc := RangeDescriptor{
		MinKey:        b.first,
		MaxKey:        append(graveler.Key(nil), b.lastKey...),
		Count:         b.count,
		EstimatedSize: b.size,
	}
	// The file goes to the store as built, uncopied; the next range gets
	// a buffer of its own, twice the average size: sizes past the
	// minimum are about geometric, so few ranges outgrow it.
	data := b.take()
	w.leafSize += (len(data) - w.leafSize) / 8
	w.leaf = newRangeBuilder(w.m.cfg.BlockSize, make([]byte, 0, 2*w.leafSize+256))
	desc.ID = graveler.RangeID(contentID(data))
	loc, err := w.put(objectRef{id: string(desc.ID)}, data)
	if err != nil {
		return err
	}
	desc.Loc = loc
	return w.addChild(1, desc)
}

func (w *writer) addChild(level int, d RangeDescriptor) error {
	p := w.level(level)
	p.children = append(p.children, d)
	p.size += nodeEntryLen(&d)
	if w.m.cfg.cutAfter(level, d.MaxKey, p.size) {
		return w.flushNode(level)
	}
	return nil
}

// flushNode cuts the node being filled at level and hands it to its parent.
func (w *writer) flushNode(level int) error {
	p := w.level(level)
	data, sid, size := encodeNode(level, p.children, w.m.cfg.BlockSize)
	id := graveler.MetaRangeID(sid)
	desc := RangeDescriptor{
		MinKey:        p.children[0].MinKey,
		MaxKey:        p.children[len(p.children)-1].MaxKey,
		ID:            graveler.RangeID(id),
		EstimatedSize: size,
	}
	n := &treeNode{level: level, children: p.children, size: size, stored: len(data)}
	desc.Count = n.count()
	// The node keeps its children; the next one starts with room for as
	// many and a half, so that it seldom grows.
	p.children, p.size = make([]RangeDescriptor, 0, len(p.children)+len(p.children)/2), 0
	p.flushed++
	loc, err := w.put(objectRef{node: true, id: string(id)}, data)
	if err != nil {
		return err
	}
	desc.Loc = loc
	w.m.nodes.add(nodeCacheKey(w.ns, string(id), loc), n, n.stored)
	if level+1 > maxLevel {
		// A child entry that fills a node alone cuts every level after
		// one child, without end: its key is far too long for the node
		// sizes.
		return fmt.Errorf("%w: committed: a tree of more than %d levels: the entry for key %q (%d bytes) fills a node of at most %d bytes alone",
			graveler.ErrInvalidArgument, maxLevel, desc.MaxKey[:min(len(desc.MaxKey), 64)], len(desc.MaxKey), w.m.cfg.MaxNodeSize)
	}
	return w.addChild(level+1, desc)
}

// put stores object ref: appended to the pack being filled, or (with
// Config.Unpacked) written on its own, and returns where it is stored. It
// fails with the first write error seen.
func (w *writer) put(ref objectRef, data []byte) (Location, error) {
	if err := w.failed(); err != nil {
		return Location{}, err
	}
	if err := w.begin(); err != nil {
		return Location{}, err
	}
	if w.m.cfg.Unpacked {
		return Location{}, w.store(w.sem, ref, data)
	}
	if w.pack == nil {
		w.pack = &packBuilder{id: newPackID()}
	}
	loc := w.pack.add(ref.id, ref.node, data)
	if w.pack.size >= w.m.cfg.PackBytes {
		return loc, w.sealPack()
	}
	return loc, nil
}

// sealPack starts storing the pack being filled, if any.
func (w *writer) sealPack() error {
	p := w.pack
	if p == nil {
		return nil
	}
	w.pack = nil
	return w.store(w.packSem, objectRef{pack: p.id}, p.finish())
}

// store starts writing one blob, holding a place in sem until it is
// written; it fails with the first write error seen.
func (w *writer) store(sem chan struct{}, ref objectRef, data []byte) error {
	select {
	case sem <- struct{}{}:
	case <-w.ctx.Done():
		if err := w.failed(); err != nil {
			return err
		}
		return w.ctx.Err()
	}
	// The time before the write: the object's is no older.
	at := w.m.cfg.Now()
	ref.at = at
	w.refs.add(ref)
	name := ref.name()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer func() { <-sem }()
		if err := w.m.blobs.Put(w.ctx, w.ns, name, data); err != nil {
			w.mu.Lock()
			if w.err == nil {
				w.err = fmt.Errorf("committed: write %s: %w", name, err)
				w.cancel()
			}
			w.mu.Unlock()
			return
		}
		w.m.fresh.set(rangeCacheKey(w.ns, name), at)
	}()
	return nil
}

func (w *writer) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// begin takes the writer's Syncer, before its first write or touch.
func (w *writer) begin() error {
	if w.syncer != nil {
		return nil
	}
	s, err := w.m.blobs.BeginWrites(w.ctx, w.ns)
	if err != nil {
		return fmt.Errorf("committed: %w", err)
	}
	w.syncer = s
	return nil
}

// abort stops the writes in flight of a writer not finished, and releases
// its Syncer.
func (w *writer) abort() {
	if !w.done {
		w.cancel()
		w.wg.Wait()
		w.done = true
	}
	if w.syncer != nil {
		_ = w.syncer.Close()
		w.syncer = nil
	}
}

// above reports whether anything was handed to a level above l: a node
// cut or passed through at l or higher.
func (w *writer) above(l int) bool {
	for k := l; k <= len(w.levels); k++ {
		if w.levels[k-1].flushed > 0 || k > l && len(w.levels[k-1].children) > 0 {
			return true
		}
	}
	return false
}

// finish cuts the nodes still being filled, level by level, and writes the
// root: the node being filled at the lowest level with nothing above it. It
// returns once every object is written; no records give the empty tree "".
func (w *writer) finish() (graveler.MetaRangeID, error) {
	defer w.abort()
	if err := w.flushLeaf(); err != nil {
		return "", err
	}
	for l := 1; ; l++ {
		p := w.level(l)
		if w.above(l) {
			if len(p.children) > 0 {
				if err := w.flushNode(l); err != nil {
					return "", err
				}
			}
			continue
		}
		if err := w.sealPack(); err != nil {
			return "", err
		}
		w.wg.Wait()
		if err := w.failed(); err != nil {
			return "", err
		}
		if len(p.children) == 0 {
			return "", nil
		}
		if err := w.begin(); err != nil {
			return "", err
		}
		data, sid, _ := encodeNode(l, p.children, w.m.cfg.BlockSize)
		id := graveler.MetaRangeID(sid)
		// The caller may record id in a commit as soon as this returns;
		// every object under it must survive a crash by then. A first sync
		// flushes the writes while refresh checks the children's times (a
		// 10M-entry commit's checks take about half as long as its sync);
		// the root is written only then, and a second sync covers it,
		// what refresh touched and any time its checks relied on. With
		// the writes flushed it has little left to do (0.2-0.7 ms on an
		// idle test disk; more where other writers keep the file system
		// busy). The root waits for the first sync because a root of the
		// same ID may be stored already, named by a recorded commit, and
		// Put replaces it: the replacement must name nothing a crash
		// could still lose.
		synced := make(chan error, 1)
		go func() { synced <- w.syncer.Sync(w.ctx) }()
		var serr error
		err := func() error {
			// Received even if refresh panics: abort must not close the
			// Syncer under the sync in flight.
			defer func() { serr = <-synced }()
			return w.m.refresh(w.ctx, w.ns, &w.refs, w.distrust)
		}()
		if err == nil && serr == nil {
			if perr := w.m.blobs.Put(w.ctx, w.ns, metaRangeBlobName(id), data); perr != nil {
				return "", fmt.Errorf("committed: write metarange %s: %w", id, perr)
			}
			serr = w.syncer.Sync(w.ctx)
		}
		if serr != nil {
			serr = fmt.Errorf("committed: make tree %s durable: %w", id, serr)
		}
		switch {
		case err != nil && serr != nil:
			return "", errors.Join(err, serr)
		case err != nil:
			return "", err
		case serr != nil:
			return "", serr
		}
		// The root is not cached here: until a commit names it, another
		// writer's root of the same ID may replace it, and this copy,
		// if its commit never lands, may name packs a collector deletes
		// (see "Packs" in the package doc). Readers load it from the
		// store.
		return id, nil
	}
}

// refresh makes sure every object the new nodes reference is stored and
// was modified within half the GC grace period, touching those older. It
// may run after the root is written: the collector's grace needs the
// children fresh when the commit record is stored, which follows it.
//
// A subtree is referenced without being written when Apply passes it
// through from the base, and a long write may have written its first
// objects long before its root. The collector keeps an unmarked object
// only while it is younger than the grace, so a root whose commit is
// recorded after a collection marked must reference only young objects.
// Only the children the new nodes name directly are refreshed: the
// descendants of a passed-through subtree belong to the base's tree,
// which a collection marks whole. A child found missing fails the write
// (wrapping ErrBlobNotFound) rather than give a commit a hole.
//
// With distrust, what the Manager remembers of a passed-through subtree's
// blob is not trusted: the store is asked about each (checkBase).
func (m *Manager) refresh(ctx context.Context, ns graveler.StorageNamespace, refs *refList, distrust bool) error {
	half := m.cfg.GCGrace / 2
	now := m.cfg.Now()
	var stale []string
	var key []byte
	for _, chunk := range refs.chunks {
		for _, r := range chunk {
			if !r.at.IsZero() && now.Sub(r.at) < half {
				continue
			}
			// A key built in place: a tree of a million entries has tens
			// of thousands of children to look up here.
			key = r.appendFreshKey(key[:0], ns)
			if at, ok := m.fresh.getBytes(key); ok && now.Sub(at) < half && (!distrust || !r.at.IsZero()) {
				continue
			}
			stale = append(stale, r.name())
		}
	}
	// An object named twice is asked about once.
	slices.Sort(stale)
	stale = slices.Compact(stale)
	if len(stale) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan string)
	)
	for range min(refreshParallelism, len(stale)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range next {
				if err := m.refreshOne(ctx, ns, name, half); err != nil {
					mu.Lock()
					if first == nil {
						first = err
						cancel()
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, name := range stale {
		if ctx.Err() != nil {
			break
		}
		next <- name
	}
	close(next)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// refreshOne touches one object unless it is younger than half.
func (m *Manager) refreshOne(ctx context.Context, ns graveler.StorageNamespace, name string, half time.Duration) error {
	key := rangeCacheKey(ns, name)
	st, err := m.blobs.Stat(ctx, ns, name)
	if err != nil {
		return fmt.Errorf("committed: %s, referenced by the tree being written: %w", name, err)
	}
	if m.cfg.Now().Sub(st.ModTime) < half {
		m.fresh.set(key, st.ModTime)
		return nil
	}
	at := m.cfg.Now()
	if err := m.blobs.Touch(ctx, ns, name); err != nil {
		return fmt.Errorf("committed: refresh %s, referenced by the tree being written: %w", name, err)
	}
	m.fresh.set(key, at)
	return nil
}

// changeStream reads a sorted change iterator ahead of the walk (copies
// of up to lookahead records) and rejects keys that are empty, out of
// order or repeated. For each change read it asks the prefetcher for the
// range the change falls in, so those reads overlap.
type changeStream struct {
	it   graveler.ValueIterator
	buf  []*graveler.ValueRecord
	head int
	prev graveler.Key
	err  error
	done bool
	pf   *prefetcher
}

const lookahead = 1024

func (s *changeStream) fill() {
	if s.head > 0 {
		n := copy(s.buf, s.buf[s.head:])
		clear(s.buf[n:])
		s.buf, s.head = s.buf[:n], 0
	}
	for !s.done && s.err == nil && len(s.buf) < lookahead {
		if !s.it.Next() {
			s.done = true
			s.err = s.it.Err()
			return
		}
		rec := s.it.Value()
		if len(rec.Key) == 0 {
			s.err = fmt.Errorf("committed: change with an empty key: %w", graveler.ErrInvalidKey)
			return
		}
		if s.prev != nil && bytes.Compare(s.prev, rec.Key) >= 0 {
			s.err = fmt.Errorf("committed: change %q not after %q: %w", rec.Key, s.prev, graveler.ErrInvalidArgument)
			return
		}
		s.prev = append(s.prev[:0], rec.Key...)
		// A copy: the iterator may reuse its record once moved on.
		c := &graveler.ValueRecord{Key: bytes.Clone(rec.Key)}
		if rec.Value != nil {
			c.Value = &graveler.Value{Identity: bytes.Clone(rec.Identity), Data: bytes.Clone(rec.Data)}
		}
		s.buf = append(s.buf, c)
		if s.pf != nil {
			s.pf.want(c.Key)
		}
	}
}

func (s *changeStream) peek() *graveler.ValueRecord {
	if s.head == len(s.buf) {
		s.fill()
	}
	if s.err != nil || s.head == len(s.buf) {
		return nil
	}
	return s.buf[s.head]
}

func (s *changeStream) pop() {
	s.buf[s.head] = nil
	s.head++
	if !s.done && len(s.buf)-s.head < lookahead/2 {
		s.fill()
	}
}

// prefetcher reads the ranges of base that changes fall in, and the inner
// nodes above them, ahead of the walk and readAhead at a time, into the
// Manager's caches. A failed read is left for the walk to meet and
// report.
//
// want runs in the walk's goroutine, as each change is read, so it never
// reads: it descends through the nodes already cached, and where a node
// is not it hands the node and the key to a reader, which reads the node
// and goes on down for the key and for every later key that arrived
// meanwhile wanting the same node. A commit of scattered keys into a big
// tree needs one node a level per change, most not in memory: read one
// after another by the walk, they were most of its time.
type prefetcher struct {
	ctx    context.Context
	cancel context.CancelFunc
	m      *Manager
	ns     graveler.StorageNamespace
	root   *treeNode
	ch     chan prefetch
	last   graveler.RangeID
	wg     sync.WaitGroup
	// mu guards pending: the keys waiting for a node being read, by the
	// node's cache key.
	mu      sync.Mutex
	pending map[string][]graveler.Key
}

// prefetch is a reader's job: range d, or node d of level (>= 1) and the
// keys it is wanted for (in pending under key).
type prefetch struct {
	d     RangeDescriptor
	level int
	key   string
}

func (m *Manager) newPrefetcher(ctx context.Context, ns graveler.StorageNamespace, root *treeNode) *prefetcher {
	ctx, cancel := context.WithCancel(ctx)
	p := &prefetcher{ctx: ctx, cancel: cancel, m: m, ns: ns, root: root, ch: make(chan prefetch, lookahead), pending: map[string][]graveler.Key{}}
	for range readAhead {
		p.wg.Go(func() {
			for {
				var j prefetch
				select {
				case <-p.ctx.Done():
					return
				case j = <-p.ch:
				}
				if j.level == 0 {
					_, _ = m.loadRange(p.ctx, ns, &j.d)
					continue
				}
				p.descend(j)
			}
		})
	}
	return p
}

// want asks for the range key falls in (or before), if base has one.
func (p *prefetcher) want(key graveler.Key) {
	p.route(p.root, key, func(d *RangeDescriptor) {
		if d.ID != p.last {
			p.last = d.ID
			p.send(prefetch{d: *d})
		}
	})
}

// route goes down from n for key through the nodes in the cache, without
// reading: the range it reaches goes to fetch, and a node not in the
// cache to a reader (descend), with key among the keys that want it.
func (p *prefetcher) route(n *treeNode, key graveler.Key, fetch func(*RangeDescriptor)) {
	for {
		i := n.find(key)
		if i == len(n.children) {
			return
		}
		d := &n.children[i]
		if n.level == 1 {
			fetch(d)
			return
		}
		ck := nodeCacheKey(p.ns, string(d.ID), d.Loc)
		child, ok := p.m.nodes.get(ck)
		if !ok {
			p.mu.Lock()
			keys, reading := p.pending[ck]
			p.pending[ck] = append(keys, key)
			p.mu.Unlock()
			if !reading && !p.send(prefetch{d: *d, level: n.level - 1, key: ck}) {
				p.mu.Lock()
				delete(p.pending, ck)
				p.mu.Unlock()
			}
			return
		}
		if child.level != n.level-1 {
			return // corrupt: the walk reports it
		}
		n = child
	}
}

// descend reads node j.d and routes the keys that wanted it on down,
// reading the ranges they reach here (the keys are in order: a range
// several want is read once) and handing the nodes below it that are not
// cached to readers of their own, so that the nodes under one are read
// side by side too.
func (p *prefetcher) descend(j prefetch) {
	n, err := p.m.loadChild(p.ctx, p.ns, &j.d, j.level+1)
	p.mu.Lock()
	keys := p.pending[j.key]
	delete(p.pending, j.key)
	p.mu.Unlock()
	if err != nil {
		return
	}
	var last graveler.RangeID
	for _, key := range keys {
		p.route(n, key, func(d *RangeDescriptor) {
			if d.ID != last {
				last = d.ID
				_, _ = p.m.loadRange(p.ctx, p.ns, d)
			}
		})
	}
}

// send queues j unless the readers are that far behind (the walk reads
// what was not read ahead).
func (p *prefetcher) send(j prefetch) bool {
	if p.ctx.Err() != nil {
		return false
	}
	select {
	case p.ch <- j:
		return true
	default:
		return false
	}
}

// stop ends the readers and waits for them. p.ch is never closed: the
// readers send to it too (descend), and one may be past its last look at
// ctx when stop begins.
func (p *prefetcher) stop() {
	p.cancel()
	p.wg.Wait()
}

// applier walks a base tree with a sorted change stream.
type applier struct {
	ctx     context.Context
	m       *Manager
	ns      graveler.StorageNamespace
	w       *writer
	cs      *changeStream
	summary graveler.DiffSummary
	changed int
}

// applyMissing applies a change to a key base lacks.
func (a *applier) applyMissing(c *graveler.ValueRecord) error {
	if c.IsTombstone() {
		return nil
	}
	a.summary.Count[graveler.DiffTypeAdded]++
	a.changed++
	return a.w.add(c.Key, c.Identity, c.Data)
}

// applyExisting applies a change to a key base holds.
func (a *applier) applyExisting(key, identity, data []byte, c *graveler.ValueRecord) error {
	switch {
	case c.IsTombstone():
		a.summary.Count[graveler.DiffTypeRemoved]++
		a.changed++
		return nil
	case bytes.Equal(c.Identity, identity):
		return a.w.add(key, identity, data)
	default:
		a.summary.Count[graveler.DiffTypeChanged]++
		a.changed++
		return a.w.add(c.Key, c.Identity, c.Data)
	}
}

// walk writes the subtree d at level (0: a range) with the changes up to
// its MaxKey applied. It passes d through by reference, unread, when no
// change falls in it, the writer is at a boundary at d's level and d
// ended by the boundary rule (or nothing at all follows it: lastSpine
// says no base entry does), so writing its records would have made the
// same subtree; otherwise it descends, to d's children or records.
func (a *applier) walk(d *RangeDescriptor, level int, lastSpine bool) error {
	if err := a.ctx.Err(); err != nil {
		return err
	}
	next := a.cs.peek()
	if a.cs.err != nil {
		return a.cs.err
	}
	untouched := next == nil || bytes.Compare(next.Key, d.MaxKey) > 0
	// A node on the base's right spine may have been cut by its rule at
	// the end of the stream with its last child still open (ended by the
	// stream, not by a rule), so its own cut says nothing of what more
	// entries after it would have made of it. Everywhere else a cut node
	// was cut mid-stream, after a child its own rule had closed.
	closed := a.m.cfg.cutAfter(level, d.MaxKey, d.EstimatedSize) && (level == 0 || !lastSpine)
	// The last subtree of the right spine, with no change after it, ends
	// the tree as it is, unless nothing was written before it at or above
	// its level (everything before it deleted): passed through, it would
	// then sit alone under a new root, where the same entries written in
	// bulk make it, or its children, the root. So it is descended into.
	rightEnd := lastSpine && next == nil && (level == 0 || a.w.above(level))
	if untouched && a.w.atBoundary(level) && (closed || rightEnd) {
		return a.w.passThrough(*d, level)
	}
	if level > 0 {
		n, err := a.m.loadChild(a.ctx, a.ns, d, level+1)
		if err != nil {
			return err
		}
		for i := range n.children {
			if err := a.walk(&n.children[i], level-1, lastSpine && i == len(n.children)-1); err != nil {
				return err
			}
		}
		return nil
	}
	f, err := a.m.loadRange(a.ctx, a.ns, d)
	if err != nil {
		return err
	}
	it := newRangeIter(f)
	for {
		key, identity, data, ok := it.nextRaw()
		if !ok {
			return nil
		}
		for c := a.cs.peek(); c != nil && bytes.Compare(c.Key, key) < 0; c = a.cs.peek() {
			if err := a.applyMissing(c); err != nil {
				return err
			}
			a.cs.pop()
		}
		if a.cs.err != nil {
			return a.cs.err
		}
		if c := a.cs.peek(); c != nil && bytes.Equal(c.Key, key) {
			err = a.applyExisting(key, identity, data, c)
			a.cs.pop()
		} else {
			err = a.w.add(key, identity, data)
		}
		if err != nil {
			return err
		}
	}
}

// Apply writes base with changes applied. Only the ranges changes fall in
// and the nodes above them are rewritten (and what the boundary rule
// shifts); every other subtree is passed through by reference, unread.
func (m *Manager) Apply(ctx context.Context, ns graveler.StorageNamespace, base graveler.MetaRangeID, changes graveler.ValueIterator, opts graveler.ApplyOptions) (graveler.MetaRangeID, graveler.DiffSummary, error) {
	summary := graveler.DiffSummary{Count: map[graveler.DiffType]int{}}
	root, err := m.loadRoot(ctx, ns, base)
	if err != nil {
		return "", summary, err
	}
	id, summary, err := m.apply(ctx, ns, base, root, changes, opts)
	if errors.Is(err, ErrBlobNotFound) && base != "" {
		// Perhaps the write went by a stale copy of the base's root,
		// whose passed-through subtrees it found missing: the changes
		// are consumed, so this write fails, and the next one goes by
		// the root as stored (reloadRoot).
		if stored, rerr := m.reloadRoot(ctx, ns, base); rerr == nil && stored.places != root.places {
			// Retryable, and not a missing object: what is stored is whole.
			err = fmt.Errorf("committed: base tree %s is stored with other packs than the copy this write read (%v); try again: %w", base, err, graveler.ErrUnavailable)
		}
	}
	return id, summary, err
}

// checkBase reads the base root a write walked from the store itself.
// The new tree names the places of the subtrees it passed through, which
// are those the root it read gives. Another writer may have replaced that
// root with one of its ID naming other packs, which is harmless while
// the packs of both live; but a root held since before its namespace was
// emptied and the same tree written there again names packs that are
// gone, and this Manager may remember them as fresh (it wrote them), so
// refresh would not ask. So when the stored root differs from the one
// read, refresh asks the store about every passed-through subtree rather
// than trust what it remembers.
func (m *Manager) checkBase(ctx context.Context, ns graveler.StorageNamespace, base graveler.MetaRangeID, root *treeNode, w *writer) error {
	if base == "" {
		return nil
	}
	stored, err := m.reloadRoot(ctx, ns, base)
	if err != nil {
		return err
	}
	w.distrust = stored.places != root.places
	return nil
}

func (m *Manager) apply(ctx context.Context, ns graveler.StorageNamespace, base graveler.MetaRangeID, root *treeNode, changes graveler.ValueIterator, opts graveler.ApplyOptions) (graveler.MetaRangeID, graveler.DiffSummary, error) {
	summary := graveler.DiffSummary{Count: map[graveler.DiffType]int{}}
	pf := m.newPrefetcher(ctx, ns, root)
	defer pf.stop()
	w := m.newWriter(ctx, ns)
	defer w.abort()
	a := &applier{ctx: ctx, m: m, ns: ns, w: w, cs: &changeStream{it: changes, pf: pf}, summary: summary}
	for i := range root.children {
		if err := a.walk(&root.children[i], root.level-1, i == len(root.children)-1); err != nil {
			return "", summary, err
		}
	}
	for c := a.cs.peek(); c != nil; c = a.cs.peek() {
		if err := a.applyMissing(c); err != nil {
			return "", summary, err
		}
		a.cs.pop()
	}
	if a.cs.err != nil {
		return "", summary, a.cs.err
	}
	if a.changed == 0 {
		if !opts.AllowEmpty {
			return "", summary, graveler.ErrNoChanges
		}
		return base, summary, nil
	}
	if err := m.checkBase(ctx, ns, base, root, w); err != nil {
		return "", summary, err
	}
	id, err := w.finish()
	if err != nil {
		return "", summary, err
	}
	return id, summary, nil
}
