package committed

import (
	"context"
	"errors"
	"testing"

	"graveler/graveler"
)

// leafView lists a tree's ranges, for tests written against one-level trees.
type leafView struct {
	ranges []RangeDescriptor
}

// loadMetaRange returns the ranges of tree id in key order, read from the
// store (not counted as range reads).
func (m *Manager) loadMetaRange(ctx context.Context, ns graveler.StorageNamespace, id graveler.MetaRangeID) (*leafView, error) {
	ranges, err := ReadMetaRange(ctx, m.blobs, ns, id)
	if err != nil {
		return nil, err
	}
	return &leafView{ranges: ranges}, nil
}

// TestTreeNodeMatchesParentEntry: a verified inner node or range agrees
// with the entry its parent holds for it, and any difference (bounds,
// count, size, level) is ErrCorrupt.
func TestTreeNodeMatchesParentEntry(t *testing.T) {
	ctx := context.Background()
	m, store, ns := newTestManager(t, multiLevelConfig())
	id := write(t, m, ns, numbered(400, "v"))
	root, err := ReadTreeNode(ctx, store, ns, id)
	if err != nil {
		t.Fatal(err)
	}
	if root.Level < 3 {
		t.Fatalf("root of level %d", root.Level)
	}
	d := root.Children[len(root.Children)/2]
	child, err := ReadChildNode(ctx, store, ns, d)
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Matches(d, root.Level); err != nil {
		t.Fatalf("intact node: %v", err)
	}
	bad := []func(d *RangeDescriptor) int{
		func(d *RangeDescriptor) int { d.Count++; return root.Level },
		func(d *RangeDescriptor) int { d.EstimatedSize++; return root.Level },
		func(d *RangeDescriptor) int { d.MinKey = append(d.MinKey.Copy(), 'x'); return root.Level },
		func(d *RangeDescriptor) int { d.MaxKey = graveler.Key("a"); return root.Level },
		func(d *RangeDescriptor) int { return root.Level + 1 },
	}
	for i, f := range bad {
		e := d
		level := f(&e)
		if err := child.Matches(e, level); !errors.Is(err, ErrCorrupt) {
			t.Errorf("change %d: %v, want ErrCorrupt", i, err)
		}
	}
	// A range against its level-1 node's entry.
	n := child
	for n.Level > 1 {
		if n, err = ReadChildNode(ctx, store, ns, n.Children[0]); err != nil {
			t.Fatal(err)
		}
	}
	r := n.Children[0]
	s, err := VerifyRange(ctx, store, ns, r.ID, r.Loc)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Matches(r); err != nil {
		t.Fatalf("intact range: %v", err)
	}
	r.EstimatedSize++
	if err := s.Matches(r); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("range size differs: %v", err)
	}
}
