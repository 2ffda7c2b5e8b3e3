package fsck_test

import (
	"path/filepath"
	"strings"
	"testing"

	"graveler/fsck"
	"graveler/graveler"
	"graveler/graveler/committed"
)

// deepTrees cuts ranges of about 8 keys and inner nodes of about 2
// children, so a small repository's trees have several levels, each
// object stored on its own.
var deepTrees = committed.Config{
	MinRangeSize: 1, MaxRangeSize: 4 << 10, BoundaryMask: 7, BlockSize: 128,
	MinNodeSize: 1, MaxNodeSize: 4 << 10, NodeMask: 1, Unpacked: true,
}

// deepNode returns the blob name of the first inner node of level 1 under
// tree id, reached through the first child at every level, and the root's
// level.
func (w *world) deepNode(repo string, id graveler.MetaRangeID) (string, int) {
	w.t.Helper()
	root, err := committed.ReadTreeNode(w.ctx, w.blobs, w.ns(repo), id)
	w.must(err)
	n := root
	for n.Level > 1 {
		id = graveler.MetaRangeID(n.Children[0].ID)
		n, err = committed.ReadTreeNode(w.ctx, w.blobs, w.ns(repo), id)
		w.must(err)
	}
	return committed.MetaRangeObjectName(id), root.Level
}

// TestFsckInnerNodeDeepInATree: a damaged or missing inner node deep in a
// tree (shared by every commit of the repository) is found by default,
// once, as a damaged or missing metarange, and a healthy deep tree is
// healthy.
func TestFsckInnerNodeDeepInATree(t *testing.T) {
	blobs := committed.NewBucketStore(committed.BucketConfig{})
	t.Cleanup(func() { blobs.Close() })
	w := newWorldOn(t, blobs, "file://"+filepath.ToSlash(t.TempDir()), deepTrees)
	w.installation()
	name, levels := w.deepNode("sales", w.head("sales", "main").MetaRangeID)
	if levels < 3 {
		t.Fatalf("sales' tree has %d levels, want at least 3", levels)
	}
	for _, full := range []bool{false, true} {
		if rep := w.check(fsck.Config{Full: full}); !rep.Healthy || rep.Stats.MetaRanges <= rep.Stats.Commits {
			t.Fatalf("full=%v: a healthy installation of deep trees:\n%s", full, text(rep))
		}
	}

	ns := w.ns("sales")
	data, err := w.blobs.Get(w.ctx, ns, name)
	w.must(err)
	bad := append([]byte(nil), data...)
	bad[len(bad)/2] ^= 0x55
	w.must(w.blobs.Put(w.ctx, ns, name, bad))
	for _, full := range []bool{false, true} {
		f := only(t, w.check(fsck.Config{Full: full}), fsck.KindMetaRangeCorrupt, 1)[0]
		if !strings.Contains(f.Resource, strings.TrimPrefix(name, committed.MetaRangesPrefix)) || !strings.Contains(f.Detail, "inner node") {
			t.Fatalf("full=%v: finding %+v does not name the inner node", full, f)
		}
	}

	w.must(w.blobs.Delete(w.ctx, ns, name))
	f := only(t, w.check(fsck.Config{}), fsck.KindMetaRangeMissing, 1)[0]
	if !strings.Contains(f.Resource, strings.TrimPrefix(name, committed.MetaRangesPrefix)) {
		t.Fatalf("finding %+v does not name the inner node", f)
	}
}

// TestFsckPackedTrees: trees whose objects are stored in packs (as
// gravelerd writes them) are checked through the places their nodes give:
// a healthy one is healthy; a damaged range in a pack is found with
// --full, a damaged inner node by default; a missing pack is every object
// in it missing, each finding naming the pack.
func TestFsckPackedTrees(t *testing.T) {
	blobs := committed.NewBucketStore(committed.BucketConfig{})
	t.Cleanup(func() { blobs.Close() })
	cfg := deepTrees
	cfg.Unpacked = false
	cfg.PackBytes = 2 << 10
	w := newWorldOn(t, blobs, "file://"+filepath.ToSlash(t.TempDir()), cfg)
	w.installation()
	for _, full := range []bool{false, true} {
		if rep := w.check(fsck.Config{Full: full}); !rep.Healthy {
			t.Fatalf("full=%v: a healthy installation of packed trees:\n%s", full, text(rep))
		}
	}
	ns := w.ns("sales")
	id := w.head("sales", "main").MetaRangeID
	root, err := committed.ReadTreeNode(w.ctx, w.blobs, ns, id)
	w.must(err)
	// The last child of the last child at every level: an object only
	// the newest commit's tree names.
	var node committed.RangeDescriptor
	n := root
	for n.Level > 1 {
		node = n.Children[len(n.Children)-1]
		n, err = committed.ReadChildNode(w.ctx, w.blobs, ns, node)
		w.must(err)
	}
	leaf := n.Children[len(n.Children)-1]
	if !leaf.Loc.Packed() || !node.Loc.Packed() {
		t.Fatalf("objects stored on their own: %+v, %+v", leaf.Loc, node.Loc)
	}
	flip := func(d committed.RangeDescriptor) func() {
		name := committed.PackObjectName(d.Loc.Pack)
		data, err := w.blobs.Get(w.ctx, ns, name)
		w.must(err)
		bad := append([]byte(nil), data...)
		bad[d.Loc.Offset+d.Loc.Length/2] ^= 0x55
		w.must(w.blobs.Put(w.ctx, ns, name, bad))
		return func() { w.must(w.blobs.Put(w.ctx, ns, name, data)) }
	}

	undo := flip(leaf)
	if rep := w.check(fsck.Config{}); !rep.Healthy {
		t.Fatalf("without --full only existence is checked, yet:\n%s", text(rep))
	}
	f := only(t, w.check(fsck.Config{Full: true}), fsck.KindRangeCorrupt, 1)[0]
	if !strings.Contains(f.Resource, string(leaf.ID)) || !strings.Contains(f.Detail, leaf.Loc.Pack) {
		t.Fatalf("finding %+v does not name the range and its pack", f)
	}
	undo()

	undo = flip(node)
	f = only(t, w.check(fsck.Config{}), fsck.KindMetaRangeCorrupt, 1)[0]
	if !strings.Contains(f.Resource, string(node.ID)) || !strings.Contains(f.Detail, node.Loc.Pack) {
		t.Fatalf("finding %+v does not name the inner node and its pack", f)
	}
	undo()

	w.must(w.blobs.Delete(w.ctx, ns, committed.PackObjectName(leaf.Loc.Pack)))
	rep := w.check(fsck.Config{})
	missing := append(findings(rep, fsck.KindRangeMissing), findings(rep, fsck.KindMetaRangeMissing)...)
	if rep.Healthy || len(missing) == 0 || len(missing) != len(rep.Findings) {
		t.Fatalf("a missing pack:\n%s", text(rep))
	}
	for _, f := range missing {
		if !strings.Contains(f.Detail, leaf.Loc.Pack) {
			t.Fatalf("finding %+v does not name the missing pack", f)
		}
	}
}
