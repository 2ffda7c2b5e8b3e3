package graveler

import (
	"bytes"
	"slices"
)

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
	// stop, when set, is asked after each tombstone hidden; true ends the
	// iteration there, with stoppedAt the tombstone's key (a listing
	// page's read budget).
	stop      func() bool
	stoppedAt Key
	val       *ValueRecord
	err       error
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
			if c.stop != nil && c.stop() {
				c.stoppedAt, c.val = bytes.Clone(rec.Key), nil
				return false
			}
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
	c.val, c.stoppedAt = nil, nil
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

// Range tombstones (RangeStager). A token's own range tombstones turn the
// entries it staged before them into tombstones (the StagingManager does
// that), so each token's iterator is its own change set. What a range
// tombstone also deletes, the keys under its prefix in older tokens and in
// the head, is applied here: an older source is filtered by the prefixes
// of every newer token (rangeFilter), and a commit, which needs one delete
// per key it removes, gets them from the tree (rangeDeletes).

// covering returns the shortest of prefixes that key starts with.
func covering(prefixes []Key, key Key) (Key, bool) {
	var best Key
	found := false
	for _, p := range prefixes {
		if bytes.HasPrefix(key, p) && (!found || len(p) < len(best)) {
			best, found = p, true
		}
	}
	return best, found
}

func compareKeys(a, b Key) int { return bytes.Compare(a, b) }

// minimalPrefixes sorts prefixes and drops every one that another one
// covers.
func minimalPrefixes(prefixes []Key) []Key {
	ps := slices.Clone(prefixes)
	slices.SortFunc(ps, compareKeys)
	out := ps[:0]
	for _, p := range ps {
		if len(out) > 0 && bytes.HasPrefix(p, out[len(out)-1]) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// rangeFilter hides the records of it under prefixes, seeking past each
// covered stretch instead of reading it: the cost of a deleted prefix is
// one seek, not one read per key.
type rangeFilter struct {
	ValueIterator
	prefixes []Key
	done     bool
}

func newRangeFilter(it ValueIterator, prefixes []Key) ValueIterator {
	if len(prefixes) == 0 {
		return it
	}
	return &rangeFilter{ValueIterator: it, prefixes: minimalPrefixes(prefixes)}
}

func (f *rangeFilter) Next() bool {
	for !f.done && f.ValueIterator.Next() {
		p, ok := covering(f.prefixes, f.ValueIterator.Value().Key)
		if !ok {
			return true
		}
		succ := keySuccessor(p)
		if succ == nil {
			break // every key after this one is under p
		}
		f.ValueIterator.SeekGE(succ)
	}
	f.done = true
	return false
}

func (f *rangeFilter) SeekGE(key Key) {
	f.done = false
	f.ValueIterator.SeekGE(key)
}

// rangeDeletes turns the keys of a tree under prefixes into tombstones and
// skips the rest by seeking: the deletes a commit applies for range
// tombstones.
type rangeDeletes struct {
	it       ValueIterator
	prefixes []Key // minimal, sorted
	val      *ValueRecord
	done     bool
}

func (d *rangeDeletes) Next() bool {
	d.val = nil
	for !d.done && d.it.Next() {
		rec := d.it.Value()
		if _, ok := covering(d.prefixes, rec.Key); ok {
			d.val = &ValueRecord{Key: rec.Key}
			return true
		}
		i, _ := slices.BinarySearchFunc(d.prefixes, rec.Key, compareKeys)
		if i == len(d.prefixes) {
			break
		}
		d.it.SeekGE(d.prefixes[i])
	}
	d.done = true
	return false
}

func (d *rangeDeletes) Value() *ValueRecord { return d.val }

func (d *rangeDeletes) SeekGE(key Key) {
	d.val, d.done = nil, false
	if len(d.prefixes) > 0 && bytes.Compare(key, d.prefixes[0]) < 0 {
		key = d.prefixes[0]
	}
	d.it.SeekGE(key)
}

func (d *rangeDeletes) Err() error { return d.it.Err() }
func (d *rangeDeletes) Close()     { d.it.Close() }

// countingIterator counts the records its source read: the source's own
// count when it keeps one (RecordCounter), else the records it returned.
type countingIterator struct {
	ValueIterator
	n int
}

func (c *countingIterator) Next() bool {
	ok := c.ValueIterator.Next()
	if ok {
		c.n++
	}
	return ok
}

func (c *countingIterator) RecordsRead() int {
	if rc, ok := c.ValueIterator.(RecordCounter); ok {
		return rc.RecordsRead()
	}
	return c.n
}

// readBudget bounds the stored records one listing page reads across its
// sources.
type readBudget struct {
	sources []*countingIterator
	limit   int
}

func (b *readBudget) count(it ValueIterator) ValueIterator {
	c := &countingIterator{ValueIterator: it}
	b.sources = append(b.sources, c)
	return c
}

func (b *readBudget) read() int {
	n := 0
	for _, s := range b.sources {
		n += s.RecordsRead()
	}
	return n
}

func (b *readBudget) exhausted() bool { return b != nil && b.limit > 0 && b.read() >= b.limit }
