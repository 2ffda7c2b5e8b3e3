package committed

import (
	"bytes"
	"context"

	"graveler/graveler"
)

// Diff iterates the differences from left to right in key order. Whenever
// both sides stand at the start of ranges with the same ID, both ranges
// are skipped unread.
func (m *Manager) Diff(ctx context.Context, ns graveler.StorageNamespace, left, right graveler.MetaRangeID) (graveler.DiffIterator, error) {
	l, err := m.loadMetaRange(ctx, ns, left)
	if err != nil {
		return nil, err
	}
	r, err := m.loadMetaRange(ctx, ns, right)
	if err != nil {
		return nil, err
	}
	return &diffIter{l: newCursor(ctx, m, ns, l), r: newCursor(ctx, m, ns, r)}, nil
}

type diffIter struct {
	l, r *cursor
	val  *graveler.Diff
	err  error
}

func (d *diffIter) Next() bool {
	d.val = nil
	for d.err == nil {
		if d.l.atHeader() && d.r.atHeader() && d.l.header().ID == d.r.header().ID {
			d.l.skipRange()
			d.r.skipRange()
			continue
		}
		lr, rr := d.l.record(), d.r.record()
		if d.err = firstErr(d.l.err, d.r.err); d.err != nil {
			return false
		}
		var cmp int
		switch {
		case lr == nil && rr == nil:
			return false
		case lr == nil:
			cmp = 1
		case rr == nil:
			cmp = -1
		default:
			cmp = bytes.Compare(lr.Key, rr.Key)
		}
		switch {
		case cmp < 0:
			d.val = &graveler.Diff{Type: graveler.DiffTypeRemoved, Key: lr.Key, LeftIdentity: lr.Identity}
			d.l.advance()
			return true
		case cmp > 0:
			d.val = &graveler.Diff{Type: graveler.DiffTypeAdded, Key: rr.Key, Value: rr.Value}
			d.r.advance()
			return true
		}
		d.l.advance()
		d.r.advance()
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
