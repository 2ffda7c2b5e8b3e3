package committed

import (
	"bytes"
	"context"
	"fmt"

	"graveler/graveler"
)

// maxConflictKeys bounds the keys a MergeConflictError names.
const maxConflictKeys = 100

// Merge applies onto destination the changes source made relative to
// base. A key that destination and source both changed, to different
// values, is a conflict, settled by strategy; with MergeStrategyNone the
// merge fails with *graveler.MergeConflictError before writing anything.
// graveler.ErrNoChanges when the result would equal destination.
func (m *Manager) Merge(ctx context.Context, ns graveler.StorageNamespace, destination, source, base graveler.MetaRangeID, strategy graveler.MergeStrategy) (graveler.MetaRangeID, graveler.DiffSummary, error) {
	summary := graveler.DiffSummary{Count: map[graveler.DiffType]int{}}
	switch strategy {
	case graveler.MergeStrategyNone, graveler.MergeStrategyDestWins, graveler.MergeStrategySourceWins:
	default:
		return "", summary, fmt.Errorf("committed: merge strategy %d: %w", strategy, graveler.ErrInvalidArgument)
	}
	// Load all three first so an unknown ID fails the same way on every path.
	for _, id := range []graveler.MetaRangeID{destination, source, base} {
		if _, err := m.loadRoot(ctx, ns, id); err != nil {
			return "", summary, err
		}
	}
	if source == destination || source == base {
		return "", summary, graveler.ErrNoChanges
	}
	if destination == base {
		// Fast-forward: the result is source; count what it changes.
		it, err := m.Diff(ctx, ns, destination, source)
		if err != nil {
			return "", summary, err
		}
		defer it.Close()
		n := 0
		for it.Next() {
			summary.Count[it.Value().Type]++
			n++
		}
		if err := it.Err(); err != nil {
			return "", summary, err
		}
		if n == 0 {
			return "", summary, graveler.ErrNoChanges
		}
		return source, summary, nil
	}
	if strategy == graveler.MergeStrategyNone {
		it, err := m.mergeChanges(ctx, ns, destination, source, base, strategy)
		if err != nil {
			return "", summary, err
		}
		for it.Next() {
		}
		if err := it.Err(); err != nil {
			return "", summary, err
		}
		if it.total > 0 {
			return "", summary, &graveler.MergeConflictError{Keys: it.conflicts, Total: it.total}
		}
	}
	it, err := m.mergeChanges(ctx, ns, destination, source, base, strategy)
	if err != nil {
		return "", summary, err
	}
	id, summary, err := m.Apply(ctx, ns, destination, it, graveler.ApplyOptions{})
	if err != nil {
		return "", summary, err
	}
	if it.total > 0 && strategy == graveler.MergeStrategyNone {
		// Only if the stored trees changed between the two passes.
		return "", summary, &graveler.MergeConflictError{Keys: it.conflicts, Total: it.total}
	}
	return id, summary, nil
}

func (m *Manager) mergeChanges(ctx context.Context, ns graveler.StorageNamespace, destination, source, base graveler.MetaRangeID, strategy graveler.MergeStrategy) (*mergeIter, error) {
	diff, err := m.Diff(ctx, ns, base, source)
	if err != nil {
		return nil, err
	}
	dmr, err := m.loadRoot(ctx, ns, destination)
	if err != nil {
		return nil, err
	}
	return &mergeIter{diff: diff, dest: newCursor(ctx, m, ns, destination, dmr), strategy: strategy}, nil
}

// mergeIter turns the diff base→source into the changes to apply onto
// destination, in key order, and records conflicts.
type mergeIter struct {
	diff      graveler.DiffIterator
	dest      *cursor
	strategy  graveler.MergeStrategy
	conflicts []graveler.Key
	total     int
	val       *graveler.ValueRecord
	err       error
}

func sameValue(a, b *graveler.Value) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return bytes.Equal(a.Identity, b.Identity)
}

func (it *mergeIter) Next() bool {
	it.val = nil
	for it.err == nil && it.diff.Next() {
		d := it.diff.Value()
		it.dest.seekGE(d.Key)
		var dv *graveler.Value
		if rec := it.dest.record(); rec != nil && bytes.Equal(rec.Key, d.Key) {
			dv = rec.Value
		}
		if it.err = it.dest.err; it.err != nil {
			return false
		}
		var bv *graveler.Value
		if d.Type != graveler.DiffTypeAdded {
			bv = &graveler.Value{Identity: d.LeftIdentity}
		}
		switch {
		case sameValue(dv, bv):
			// Destination left the key alone: take source's change.
		case sameValue(dv, d.Value):
			// Both made the same change.
			continue
		default:
			it.total++
			if len(it.conflicts) < maxConflictKeys {
				it.conflicts = append(it.conflicts, d.Key.Copy())
			}
			if it.strategy != graveler.MergeStrategySourceWins {
				continue
			}
		}
		it.val = &graveler.ValueRecord{Key: d.Key, Value: d.Value}
		return true
	}
	if it.err == nil {
		it.err = it.diff.Err()
	}
	return false
}

func (it *mergeIter) Value() *graveler.ValueRecord { return it.val }

// SeekGE is not needed by Apply, which reads changes once in order.
func (it *mergeIter) SeekGE(key graveler.Key) {
	it.diff.SeekGE(key)
	it.val = nil
}

func (it *mergeIter) Err() error { return it.err }
func (it *mergeIter) Close()     { it.diff.Close() }
