package graveler

import "bytes"

// combinedIterator merges sorted ValueIterators into one: for a key held by
// more than one source, the first source (lowest index) wins and the
// others' records are skipped. Sources are given newest first (staging
// token, sealed tokens newest first, then the committed tree), so the
// winner is the key's current value. With hideTombstones a tombstone is
// consumed without being returned, hiding the older values beneath it.
//
// A source is advanced lazily, at the start of the next Next, so the
// record Value returns stays valid until then, as the Iterator contract
// promises, without copying it.
type combinedIterator struct {
	its            []ValueIterator
	heads          []*ValueRecord
	pending        []int
	hideTombstones bool
	val            *ValueRecord
	err            error
}

func newCombinedIterator(hideTombstones bool, its ...ValueIterator) *combinedIterator {
	c := &combinedIterator{its: its, heads: make([]*ValueRecord, len(its)), hideTombstones: hideTombstones}
	c.pendAll()
	return c
}

func (c *combinedIterator) pendAll() {
	c.pending = c.pending[:0]
	for i := range c.its {
		c.pending = append(c.pending, i)
	}
}

func (c *combinedIterator) Next() bool {
	for {
		for _, i := range c.pending {
			if c.its[i].Next() {
				c.heads[i] = c.its[i].Value()
				continue
			}
			c.heads[i] = nil
			if err := c.its[i].Err(); err != nil && c.err == nil {
				c.err = err
			}
		}
		c.pending = c.pending[:0]
		if c.err != nil {
			c.val = nil
			return false
		}
		win := -1
		for i, h := range c.heads {
			if h != nil && (win < 0 || bytes.Compare(h.Key, c.heads[win].Key) < 0) {
				win = i
			}
		}
		if win < 0 {
			c.val = nil
			return false
		}
		rec := c.heads[win]
		for i, h := range c.heads {
			if h != nil && bytes.Equal(h.Key, rec.Key) {
				c.pending = append(c.pending, i)
			}
		}
		if c.hideTombstones && rec.IsTombstone() {
			continue
		}
		c.val = rec
		return true
	}
}

func (c *combinedIterator) Value() *ValueRecord { return c.val }

func (c *combinedIterator) SeekGE(key Key) {
	for _, it := range c.its {
		it.SeekGE(key)
	}
	clear(c.heads)
	c.pendAll()
	c.val = nil
}

func (c *combinedIterator) Err() error { return c.err }

func (c *combinedIterator) Close() {
	for _, it := range c.its {
		it.Close()
	}
}

// uncommittedDiffIterator walks a branch's staged changes (all its tokens
// combined, tombstones included) and compares each with the head commit,
// which it seeks per key: the cost follows the number of staged entries,
// not the size of the tree.
type uncommittedDiffIterator struct {
	staged    ValueIterator
	committed ValueIterator
	val       *Diff
	err       error
}

func (d *uncommittedDiffIterator) Next() bool {
	for d.err == nil && d.staged.Next() {
		rec := d.staged.Value()
		d.committed.SeekGE(rec.Key)
		var base *ValueRecord
		if d.committed.Next() && bytes.Equal(d.committed.Value().Key, rec.Key) {
			base = d.committed.Value()
		} else if err := d.committed.Err(); err != nil {
			d.err = err
			break
		}
		switch {
		case rec.IsTombstone() && base == nil:
			continue // deleting what was never committed changes nothing
		case rec.IsTombstone():
			d.val = &Diff{Type: DiffTypeRemoved, Key: rec.Key, LeftIdentity: bytes.Clone(base.Identity)}
		case base == nil:
			d.val = &Diff{Type: DiffTypeAdded, Key: rec.Key, Value: rec.Value}
		case bytes.Equal(base.Identity, rec.Identity):
			continue // re-written with the same identity: no change
		default:
			d.val = &Diff{Type: DiffTypeChanged, Key: rec.Key, Value: rec.Value, LeftIdentity: bytes.Clone(base.Identity)}
		}
		return true
	}
	if d.err == nil {
		d.err = d.staged.Err()
	}
	d.val = nil
	return false
}

func (d *uncommittedDiffIterator) Value() *Diff { return d.val }

func (d *uncommittedDiffIterator) SeekGE(key Key) {
	d.staged.SeekGE(key)
	d.val = nil
}

func (d *uncommittedDiffIterator) Err() error { return d.err }

func (d *uncommittedDiffIterator) Close() {
	d.staged.Close()
	d.committed.Close()
}

// keySuccessor returns the smallest key greater than every key with prefix
// p, or nil when there is none (p is all 0xff).
func keySuccessor(p Key) Key {
	s := bytes.Clone(p)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] != 0xff {
			s[i]++
			return s[:i+1]
		}
	}
	return nil
}
