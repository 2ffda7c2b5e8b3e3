package committed

import (
	"bytes"
	"context"
	"fmt"
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

// cutAfter is the boundary rule: given a range of size bytes whose last
// key is key, does the range end here?
func (c *Config) cutAfter(key []byte, size int) bool {
	return size >= c.MaxRangeSize || (size >= c.MinRangeSize && boundaryHash(key)&c.BoundaryMask == 0)
}

// writer turns a sorted stream of records (and of whole ranges passed
// through) into ranges and a metarange.
type writer struct {
	ctx    context.Context
	m      *Manager
	ns     graveler.StorageNamespace
	cur    *rangeBuilder
	ranges []RangeDescriptor
	last   graveler.Key
}

func (m *Manager) newWriter(ctx context.Context, ns graveler.StorageNamespace) *writer {
	return &writer{ctx: ctx, m: m, ns: ns, cur: newRangeBuilder(m.cfg.BlockSize, nil)}
}

// atBoundary reports whether the next record would start a new range.
func (w *writer) atBoundary() bool { return w.cur.empty() }

func (w *writer) add(key, identity, data []byte) error {
	if len(key) == 0 {
		return fmt.Errorf("committed: empty key: %w", graveler.ErrInvalidKey)
	}
	if w.last != nil && bytes.Compare(w.last, key) >= 0 {
		return fmt.Errorf("committed: key %q not after %q: %w", key, w.last, graveler.ErrInvalidArgument)
	}
	w.cur.add(key, identity, data)
	w.last = append(w.last[:0], key...)
	if w.m.cfg.cutAfter(key, w.cur.size) {
		return w.flush()
	}
	return nil
}

// passThrough appends a stored range as is. Only at a boundary, so the
// result is what writing its records would have produced.
func (w *writer) passThrough(r RangeDescriptor) {
	w.ranges = append(w.ranges, r)
	w.last = append(w.last[:0], r.MaxKey...)
}

func (w *writer) flush() error {
	if w.cur.empty() {
		return nil
	}
	b := w.cur
	desc := RangeDescriptor{
		MinKey:        b.first,
		MaxKey:        append(graveler.Key(nil), b.lastKey...),
		Count:         b.count,
		EstimatedSize: b.size,
	}
	data := b.finish()
	w.cur = newRangeBuilder(w.m.cfg.BlockSize, b.scratch())
	desc.ID = graveler.RangeID(contentID(data))
	name := rangeBlobName(desc.ID)
	// The time before the write: the object's is no older.
	at := w.m.cfg.Now()
	if err := w.m.blobs.Put(w.ctx, w.ns, name, data); err != nil {
		return fmt.Errorf("committed: write range %s: %w", desc.ID, err)
	}
	w.m.fresh.set(rangeCacheKey(w.ns, name), at, 1)
	w.ranges = append(w.ranges, desc)
	return nil
}

// finish writes the metarange; no ranges give the empty tree "".
func (w *writer) finish() (graveler.MetaRangeID, error) {
	if err := w.flush(); err != nil {
		return "", err
	}
	if len(w.ranges) == 0 {
		return "", nil
	}
	if err := w.m.refresh(w.ctx, w.ns, w.ranges); err != nil {
		return "", err
	}
	data := encodeMetaRange(w.ranges, w.m.cfg.BlockSize)
	id := graveler.MetaRangeID(contentID(data))
	if err := w.m.blobs.Put(w.ctx, w.ns, metaRangeBlobName(id), data); err != nil {
		return "", fmt.Errorf("committed: write metarange %s: %w", id, err)
	}
	w.m.metaRanges.add(rangeCacheKey(w.ns, string(id)), &metaRange{ranges: w.ranges}, 1)
	return id, nil
}

// refresh makes sure every range a new metarange references is stored and
// was modified within half the GC grace period, touching those older.
//
// A range is referenced without being written when Apply passes it
// through from the base, and a long Apply may have written a range long
// before its metarange. The collector keeps an unmarked object only while
// it is younger than the grace, so a metarange whose commit is recorded
// after a collection marked must reference only young objects. A range
// found missing fails the write (wrapping ErrBlobNotFound) rather than
// give a commit a hole.
func (m *Manager) refresh(ctx context.Context, ns graveler.StorageNamespace, ranges []RangeDescriptor) error {
	half := m.cfg.GCGrace / 2
	now := m.cfg.Now()
	var stale []string
	seen := make(map[graveler.RangeID]bool, len(ranges))
	for _, r := range ranges {
		if seen[r.ID] {
			continue
		}
		seen[r.ID] = true
		name := rangeBlobName(r.ID)
		if at, ok := m.fresh.get(rangeCacheKey(ns, name)); ok && now.Sub(at) < half {
			continue
		}
		stale = append(stale, name)
	}
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
		return fmt.Errorf("committed: %s, referenced by the metarange being written: %w", name, err)
	}
	if m.cfg.Now().Sub(st.ModTime) < half {
		m.fresh.set(key, st.ModTime, 1)
		return nil
	}
	at := m.cfg.Now()
	if err := m.blobs.Touch(ctx, ns, name); err != nil {
		return fmt.Errorf("committed: refresh %s, referenced by the metarange being written: %w", name, err)
	}
	m.fresh.set(key, at, 1)
	return nil
}

// changeStream peeks at a sorted change iterator and rejects keys that
// are empty, out of order or repeated.
type changeStream struct {
	it   graveler.ValueIterator
	cur  *graveler.ValueRecord
	prev graveler.Key
	err  error
	done bool
}

func (s *changeStream) peek() *graveler.ValueRecord {
	if s.cur != nil || s.done || s.err != nil {
		return s.cur
	}
	if !s.it.Next() {
		s.done = true
		s.err = s.it.Err()
		return nil
	}
	rec := s.it.Value()
	if len(rec.Key) == 0 {
		s.err = fmt.Errorf("committed: change with an empty key: %w", graveler.ErrInvalidKey)
		return nil
	}
	if s.prev != nil && bytes.Compare(s.prev, rec.Key) >= 0 {
		s.err = fmt.Errorf("committed: change %q not after %q: %w", rec.Key, s.prev, graveler.ErrInvalidArgument)
		return nil
	}
	s.prev = append(s.prev[:0], rec.Key...)
	s.cur = rec
	return rec
}

func (s *changeStream) pop() { s.cur = nil }

// Apply writes base with changes applied. A range no change falls in is
// passed through by reference, unread, whenever the writer is at a
// boundary and that range ended by the boundary rule (so writing its
// records would have cut it at the same place).
func (m *Manager) Apply(ctx context.Context, ns graveler.StorageNamespace, base graveler.MetaRangeID, changes graveler.ValueIterator, opts graveler.ApplyOptions) (graveler.MetaRangeID, graveler.DiffSummary, error) {
	summary := graveler.DiffSummary{Count: map[graveler.DiffType]int{}}
	mr, err := m.loadMetaRange(ctx, ns, base)
	if err != nil {
		return "", summary, err
	}
	w := m.newWriter(ctx, ns)
	cs := &changeStream{it: changes}
	changed := 0

	// applyMissing applies a change to a key base lacks.
	applyMissing := func(c *graveler.ValueRecord) error {
		if c.IsTombstone() {
			return nil
		}
		summary.Count[graveler.DiffTypeAdded]++
		changed++
		return w.add(c.Key, c.Identity, c.Data)
	}
	// applyExisting applies a change to a key base holds.
	applyExisting := func(key, identity, data []byte, c *graveler.ValueRecord) error {
		switch {
		case c.IsTombstone():
			summary.Count[graveler.DiffTypeRemoved]++
			changed++
			return nil
		case bytes.Equal(c.Identity, identity):
			return w.add(key, identity, data)
		default:
			summary.Count[graveler.DiffTypeChanged]++
			changed++
			return w.add(c.Key, c.Identity, c.Data)
		}
	}

	for i, r := range mr.ranges {
		if err := ctx.Err(); err != nil {
			return "", summary, err
		}
		next := cs.peek()
		if cs.err != nil {
			return "", summary, cs.err
		}
		untouched := next == nil || bytes.Compare(next.Key, r.MaxKey) > 0
		last := i == len(mr.ranges)-1
		if untouched && w.atBoundary() && (m.cfg.cutAfter(r.MaxKey, r.EstimatedSize) || last && next == nil) {
			w.passThrough(r)
			continue
		}
		f, err := m.loadRange(ctx, ns, r.ID)
		if err != nil {
			return "", summary, err
		}
		it := newRangeIter(f)
		for {
			key, identity, data, ok := it.nextRaw()
			if !ok {
				break
			}
			for c := cs.peek(); c != nil && bytes.Compare(c.Key, key) < 0; c = cs.peek() {
				if err := applyMissing(c); err != nil {
					return "", summary, err
				}
				cs.pop()
			}
			if cs.err != nil {
				return "", summary, cs.err
			}
			if c := cs.peek(); c != nil && bytes.Equal(c.Key, key) {
				err = applyExisting(key, identity, data, c)
				cs.pop()
			} else {
				err = w.add(key, identity, data)
			}
			if err != nil {
				return "", summary, err
			}
		}
	}
	for c := cs.peek(); c != nil; c = cs.peek() {
		if err := applyMissing(c); err != nil {
			return "", summary, err
		}
		cs.pop()
	}
	if cs.err != nil {
		return "", summary, cs.err
	}
	if changed == 0 {
		if !opts.AllowEmpty {
			return "", summary, graveler.ErrNoChanges
		}
		return base, summary, nil
	}
	id, err := w.finish()
	if err != nil {
		return "", summary, err
	}
	return id, summary, nil
}
