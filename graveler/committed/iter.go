package committed

import (
	"bytes"
	"context"
	"errors"

	"graveler/graveler"
)

// cursor walks a tree record by record, but stops before each subtree it
// enters (at its header: the entry naming it in its parent), so a caller
// can skip the whole subtree without fetching it; descend enters it one
// level. States: done (empty stack or err), at a header (it == nil: the
// top frame's current child), or on a record (it != nil, rec set).
type cursor struct {
	ctx   context.Context
	m     *Manager
	ns    graveler.StorageNamespace
	id    graveler.MetaRangeID
	root  *treeNode
	stack []frame
	it    *rangeIter
	rec   *graveler.ValueRecord
	err   error
	// reloaded: the root was read again from the store once, after an
	// object it led to was missing (see Manager.reloadRoot).
	reloaded bool
	// ahead is how many ranges the next read of a range reads ahead
	// (Manager.readAhead), 0 for none: a listing reads ahead, a diff,
	// which skips the subtrees both sides share, does not.
	ahead int
}

// frame is a node being walked; n.children[i] is the current subtree.
type frame struct {
	n *treeNode
	i int
}

func newCursor(ctx context.Context, m *Manager, ns graveler.StorageNamespace, id graveler.MetaRangeID, root *treeNode) *cursor {
	c := &cursor{ctx: ctx, m: m, ns: ns, id: id, root: root, stack: []frame{{n: root}}}
	c.normalize()
	return c
}

func (c *cursor) done() bool { return c.err != nil || len(c.stack) == 0 }

func (c *cursor) top() *frame { return &c.stack[len(c.stack)-1] }

// atHeader reports whether the cursor is before an unread subtree;
// header() describes it and headerLevel() is its level (0: a range).
func (c *cursor) atHeader() bool { return !c.done() && c.it == nil }
func (c *cursor) header() *RangeDescriptor {
	t := c.top()
	return &t.n.children[t.i]
}
func (c *cursor) headerLevel() int { return c.top().n.level - 1 }

// lowKey is the least key at or after the cursor: its record's or its
// header's MinKey; ok is false when done.
func (c *cursor) lowKey() (graveler.Key, bool) {
	switch {
	case c.done():
		return nil, false
	case c.it != nil:
		return c.rec.Key, true
	default:
		return c.header().MinKey, true
	}
}

// skip moves past the current subtree (unread, or the open range) to the
// header of the next one.
func (c *cursor) skip() {
	c.it, c.rec = nil, nil
	c.top().i++
	c.normalize()
}

// normalize pops the nodes walked to their end.
func (c *cursor) normalize() {
	for len(c.stack) > 0 && c.top().i >= len(c.top().n.children) {
		c.stack = c.stack[:len(c.stack)-1]
		if len(c.stack) > 0 {
			c.top().i++
		}
	}
}

func (c *cursor) fail(err error) {
	c.err = err
	c.it, c.rec = nil, nil
}

// descend enters the subtree at the header: a node's first child's
// header, or a range's first record at or after key (nil: its first).
func (c *cursor) descend(key graveler.Key) {
	if err := c.ctx.Err(); err != nil {
		c.fail(err)
		return
	}
	t := c.top()
	d := &t.n.children[t.i]
	if t.n.level > 1 {
		n, err := c.m.loadChild(c.ctx, c.ns, d, t.n.level)
		if err != nil {
			if c.retry(err) {
				c.descend(key)
				return
			}
			c.fail(err)
			return
		}
		c.stack = append(c.stack, frame{n: n})
		return
	}
	if c.ahead > 0 {
		if c.m.readAhead(c.ctx, c.ns, t.n.children[t.i:], c.ahead) {
			c.ahead = min(2*c.ahead, readAheadRanges)
		}
		if err := c.ctx.Err(); err != nil {
			c.fail(err)
			return
		}
	}
	f, err := c.m.loadRange(c.ctx, c.ns, d)
	if err != nil {
		if c.retry(err) {
			c.descend(key)
			return
		}
		c.fail(err)
		return
	}
	c.it = newRangeIter(f)
	if key != nil {
		c.it.SeekGE(key)
	}
	if c.it.Next() {
		c.rec = c.it.Value()
	} else {
		c.skip()
	}
}

// retry reports whether a failed load is worth one more try: an object
// missing where a cached root led, the first time. The root is read
// again from the store, and the path walked so far is followed again
// through it: the same ID has the same shape, only (perhaps) other
// copies of its objects.
func (c *cursor) retry(err error) bool {
	if c.reloaded || c.id == "" || !errors.Is(err, ErrBlobNotFound) {
		return false
	}
	c.reloaded = true
	root, rerr := c.m.reloadRoot(c.ctx, c.ns, c.id)
	if rerr != nil {
		return false
	}
	stack := []frame{{n: root, i: c.stack[0].i}}
	for k := 1; k < len(c.stack); k++ {
		p := stack[k-1]
		if p.i >= len(p.n.children) || len(p.n.children) != len(c.stack[k-1].n.children) {
			return false
		}
		n, err := c.m.loadChild(c.ctx, c.ns, &p.n.children[p.i], p.n.level)
		if err != nil {
			return false
		}
		stack = append(stack, frame{n: n, i: c.stack[k].i})
	}
	c.root, c.stack = root, stack
	return true
}

// record returns the current record, reading down from a header; nil
// when done or failed.
func (c *cursor) record() *graveler.ValueRecord {
	for !c.done() {
		if c.it != nil {
			return c.rec
		}
		c.descend(nil)
	}
	return nil
}

// advance moves past the current record; at a range's end the cursor
// stops at the next subtree's header.
func (c *cursor) advance() {
	if c.it == nil {
		return
	}
	if c.it.Next() {
		c.rec = c.it.Value()
		return
	}
	c.skip()
}

// seekGE positions before the first record >= key, descending from the
// root. When key falls at or before a subtree's MinKey the cursor stays
// at that subtree's header, unread.
func (c *cursor) seekGE(key graveler.Key) {
	if c.err != nil {
		return
	}
	c.it, c.rec = nil, nil
	if c.ahead > 0 {
		c.ahead = readAheadStart
	}
	c.stack = append(c.stack[:0], frame{n: c.root})
	for {
		t := c.top()
		t.i = t.n.find(key)
		if t.i == len(t.n.children) {
			// Only at the root: a parent chose this node for key.
			c.normalize()
			return
		}
		if bytes.Compare(key, t.n.children[t.i].MinKey) <= 0 {
			return
		}
		last := t.n.level == 1
		c.descend(key)
		if last || c.done() {
			return
		}
	}
}

// listIter is the ValueIterator over a tree.
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
