package committed

import (
	"bytes"
	"context"

	"graveler/graveler"
)

// cursor walks a metarange record by record, but stops at each range's
// header before reading it, so a caller can skip the whole range without
// fetching it. States: done (ri == len(ranges)), at a header (it == nil), or
// on a record (it != nil, rec set).
type cursor struct {
	ctx context.Context
	m   *Manager
	ns  graveler.StorageNamespace
	mr  *metaRange
	ri  int
	it  *rangeIter
	rec *graveler.ValueRecord
	err error
}

func newCursor(ctx context.Context, m *Manager, ns graveler.StorageNamespace, mr *metaRange) *cursor {
	return &cursor{ctx: ctx, m: m, ns: ns, mr: mr}
}

func (c *cursor) done() bool { return c.err != nil || c.ri >= len(c.mr.ranges) }

// atHeader reports whether the cursor is before the first record of an
// unread range; header() describes it.
func (c *cursor) atHeader() bool           { return !c.done() && c.it == nil }
func (c *cursor) header() *RangeDescriptor { return &c.mr.ranges[c.ri] }

// skipRange moves past the range whose header the cursor is at.
func (c *cursor) skipRange() {
	c.ri++
	c.it = nil
	c.rec = nil
}

// open reads the current range and positions on its first record at or
// after key (nil key: its first record).
func (c *cursor) open(key graveler.Key) bool {
	if err := c.ctx.Err(); err != nil {
		c.err = err
		return false
	}
	f, err := c.m.loadRange(c.ctx, c.ns, c.mr.ranges[c.ri].ID)
	if err != nil {
		c.err = err
		return false
	}
	c.it = newRangeIter(f)
	if key != nil {
		c.it.SeekGE(key)
	}
	return true
}

// record returns the current record, reading the range if at a header;
// nil when done or failed.
func (c *cursor) record() *graveler.ValueRecord {
	for !c.done() {
		if c.it != nil {
			return c.rec
		}
		if !c.open(nil) {
			return nil
		}
		if c.it.Next() {
			c.rec = c.it.Value()
			return c.rec
		}
		c.skipRange()
	}
	return nil
}

// advance moves past the current record; at a range's end the cursor
// stops at the next range's header.
func (c *cursor) advance() {
	if c.it == nil {
		return
	}
	if c.it.Next() {
		c.rec = c.it.Value()
		return
	}
	c.skipRange()
}

// seekGE positions before the first record >= key. When key falls at or
// before a range's MinKey the cursor stays at that range's header, unread.
func (c *cursor) seekGE(key graveler.Key) {
	if c.err != nil {
		return
	}
	ri := c.mr.find(key)
	if ri >= len(c.mr.ranges) || bytes.Compare(key, c.mr.ranges[ri].MinKey) <= 0 {
		c.ri, c.it, c.rec = ri, nil, nil
		return
	}
	if ri != c.ri || c.it == nil {
		c.ri = ri
		if !c.open(key) {
			return
		}
	} else {
		c.it.SeekGE(key)
	}
	// The range's MaxKey is >= key, so a record is there.
	if c.it.Next() {
		c.rec = c.it.Value()
	} else {
		c.skipRange()
	}
}

// listIter is the ValueIterator over a metarange.
type listIter struct {
	c *cursor
	// pending: the cursor's current position has not been returned yet
	// (fresh or just sought).
	pending bool
	val     *graveler.ValueRecord
}

func (it *listIter) Next() bool {
	if !it.pending {
		it.c.advance()
	}
	it.pending = false
	it.val = it.c.record()
	return it.val != nil
}

func (it *listIter) Value() *graveler.ValueRecord { return it.val }

func (it *listIter) SeekGE(key graveler.Key) {
	it.c.seekGE(key)
	it.pending = true
	it.val = nil
}

func (it *listIter) Err() error { return it.c.err }
func (it *listIter) Close()     {}
