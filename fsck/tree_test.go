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
// children, so a small repository's trees have several levels.
var deepTrees = committed.Config{
	MinRangeSize: 1, MaxRangeSize: 4 << 10, BoundaryMask: 7, BlockSize: 128,
	MinNodeSize: 1, MaxNodeSize: 4 << 10, NodeMask: 1,
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
