package committed

import (
	"bytes"
	"context"

	"graveler/graveler"
)

// Diff iterates the differences from left to right in key order. Whenever
// both sides stand at the start of subtrees with the same ID (at any
// level), both are skipped unread; otherwise a side descends one level at
// a time, so equal subtrees further down are still found.
func (m *Manager) Diff(ctx context.Context, ns graveler.StorageNamespace, left, right graveler.MetaRangeID) (graveler.DiffIterator, error) {
	l, err := m.loadRoot(ctx, ns, left)
	if err != nil {
		return nil, err
	}
	r, err := m.loadRoot(ctx, ns, right)
	if err != nil {
		return nil, err
	}
	return &diffIter{l: newCursor(ctx, m, ns, left, l), r: newCursor(ctx, m, ns, right, r)}, nil
}

type diffIter struct {
	l, r *cursor
	val  *graveler.Diff
	err  error
}

func (d *diffIter) Next() bool {
	d.val = nil
	l, r := d.l, d.r
	for d.err == nil {
		if l.atHeader() && r.atHeader() && l.header().ID == r.header().ID && l.headerLevel() == r.headerLevel() {
			l.skip()
			r.skip()
			continue
		}
		lk, lok := l.lowKey()
		rk, rok := r.lowKey()
		if d.err = firstErr(l.err, r.err); d.err != nil {
			return false
		}
		var cmp int
		switch {
		case !lok && !rok:
			return false
		case !lok:
			cmp = 1
		case !rok:
			cmp = -1
		default:
			cmp = bytes.Compare(lk, rk)
		}
		// A side at a header whose subtree may hold the next difference
		// descends one level: the higher one first, so that subtrees of
		// one level meet and equal ones are skipped.
		switch {
		case cmp < 0 && l.atHeader():
			l.descend(nil)
			continue
		case cmp > 0 && r.atHeader():
			r.descend(nil)
			continue
		case cmp == 0 && (l.atHeader() || r.atHeader()):
			ll, rl := -1, -1
			if l.atHeader() {
				ll = l.headerLevel()
			}
			if r.atHeader() {
				rl = r.headerLevel()
			}
			if ll >= rl {
				l.descend(nil)
			}
			if rl >= ll {
				r.descend(nil)
			}
			continue
		}
		lr, rr := l.rec, r.rec
		switch {
		case cmp < 0:
			d.val = &graveler.Diff{Type: graveler.DiffTypeRemoved, Key: lr.Key, LeftIdentity: lr.Identity}
			l.advance()
			return true
		case cmp > 0:
			d.val = &graveler.Diff{Type: graveler.DiffTypeAdded, Key: rr.Key, Value: rr.Value}
			r.advance()
			return true
		}
		l.advance()
		r.advance()
		if !bytes.Equal(lr.Identity, rr.Identity) {
			d.val = &graveler.Diff{Type: graveler.DiffTypeChanged, Key: rr.Key, Value: rr.Value, LeftIdentity: lr.Identity}
			return true
		}
	}
	return false
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (d *diffIter) Value() *graveler.Diff { return d.val }

func (d *diffIter) SeekGE(key graveler.Key) {
	d.l.seekGE(key)
	d.r.seekGE(key)
	d.val = nil
	d.err = firstErr(d.l.err, d.r.err)
}

func (d *diffIter) Err() error { return d.err }
func (d *diffIter) Close()     {}
