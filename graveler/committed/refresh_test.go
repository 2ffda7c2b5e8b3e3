package committed

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"graveler/graveler"
)

// touchCounter counts Stat and Touch calls by object name.
type touchCounter struct {
	BlobStore
	mu      sync.Mutex
	touched map[string]int
	stats   atomic.Int64
}

func (s *touchCounter) Stat(ctx context.Context, ns graveler.StorageNamespace, name string) (BlobInfo, error) {
	s.stats.Add(1)
	return s.BlobStore.Stat(ctx, ns, name)
}

func (s *touchCounter) Touch(ctx context.Context, ns graveler.StorageNamespace, name string) error {
	s.mu.Lock()
	s.touched[name]++
	s.mu.Unlock()
	return s.BlobStore.Touch(ctx, ns, name)
}

func (s *touchCounter) touches() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.touched {
		out[k] = v
	}
	return out
}

func fileNS(t *testing.T) (graveler.StorageNamespace, string) {
	dir := t.TempDir()
	return graveler.StorageNamespace((&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String()), dir
}

func fileMTime(t *testing.T, dir, name string) time.Time {
	t.Helper()
	info, err := os.Stat(filepath.Join(dir, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return info.ModTime()
}

func setMTime(t *testing.T, dir, name string, at time.Time) {
	t.Helper()
	if err := os.Chtimes(filepath.Join(dir, filepath.FromSlash(name)), at, at); err != nil {
		t.Fatal(err)
	}
}

// treeEdges maps every inner node of tree id (by ID) to the blobs that
// hold its children (their own, or their packs), and returns the blobs
// of the whole tree.
func treeEdges(t *testing.T, blobs BlobStore, ns graveler.StorageNamespace, id graveler.MetaRangeID) (edges map[string][]string, all map[string]bool) {
	t.Helper()
	edges, all = map[string][]string{}, map[string]bool{metaRangeBlobName(id): true}
	var walk func(d RangeDescriptor, root bool)
	walk = func(d RangeDescriptor, root bool) {
		if _, ok := edges[string(d.ID)]; ok {
			return
		}
		var n *TreeNode
		var err error
		if root {
			n, err = ReadTreeNode(context.Background(), blobs, ns, graveler.MetaRangeID(d.ID))
		} else {
			n, err = ReadChildNode(context.Background(), blobs, ns, d)
		}
		if err != nil {
			t.Fatal(err)
		}
		edges[string(d.ID)] = nil
		for _, c := range n.Children {
			b := c.blobName(n.Level)
			edges[string(d.ID)] = append(edges[string(d.ID)], b)
			all[b] = true
			if n.Level > 1 {
				walk(c, false)
			}
		}
	}
	walk(RangeDescriptor{ID: graveler.RangeID(id)}, true)
	return edges, all
}

// multiLevelConfig makes trees of several levels from a few hundred keys:
// ranges of about 8 keys, nodes of about 4 children.
func multiLevelConfig() Config {
	cfg := tinyConfig
	cfg.MinNodeSize, cfg.MaxNodeSize, cfg.NodeMask = 1, 4<<10, 3
	return cfg
}

// rampedConfig is multiLevelConfig with ramps short enough to make most
// cuts (ranges of about 5 keys, nodes of about 3 children), so that
// property tests exercise them.
func rampedConfig() Config {
	cfg := multiLevelConfig()
	cfg.RangeRamp, cfg.NodeRamp = 300, 250
	return cfg
}

// TestApplyRefreshesReusedRanges: every stored object a new node names
// without this write having written it (a subtree passed through from the
// base, at any level) is touched when it is older than half the GC grace,
// left alone when younger; objects deeper in a passed-through subtree are
// not asked about (the base's tree protects them); and a missing one
// fails the write instead of giving the new tree a hole.
func TestApplyRefreshesReusedRanges(t *testing.T) {
	ctx := context.Background()
	ns, dir := fileNS(t)
	blobs := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { blobs.Close() })
	cfg := multiLevelConfig()
	cfg.GCGrace = 6 * time.Hour
	// Object by object; TestApplyRefreshesReusedPacks is the same for packs.
	cfg.Unpacked = true
	recs := numbered(400, "v")
	base := write(t, NewManager(blobs, cfg), ns, recs)
	baseEdges, allBase := treeEdges(t, blobs, ns, base)
	root, err := ReadTreeNode(ctx, blobs, ns, base)
	if err != nil {
		t.Fatal(err)
	}
	if root.Level < 3 {
		t.Fatalf("base has %d levels, want at least 3", root.Level)
	}
	var all []string
	for name := range allBase {
		all = append(all, name)
	}
	now := time.Now()
	old, young := now.Add(-10*time.Hour), now.Add(-time.Hour)
	youngName := ""

	// A restarted gravelerd: nothing remembered about the objects.
	counter := &touchCounter{BlobStore: blobs, touched: map[string]int{}}
	m := NewManager(counter, cfg)
	last := recs[len(recs)-1]
	change := func(m *Manager, v string) (graveler.MetaRangeID, error) {
		id, _, err := m.Apply(ctx, ns, base, newSliceIter([]graveler.ValueRecord{rec(string(last.Key), v, v)}), graveler.ApplyOptions{})
		return id, err
	}
	// Learn which base objects the new tree's new nodes name (by applying
	// the change once through another Manager), then age them all again.
	probe, err := change(NewManager(blobs, cfg), "new")
	if err != nil {
		t.Fatal(err)
	}
	after, _ := treeEdges(t, blobs, ns, probe)
	direct := map[string]bool{}
	levels := map[string]bool{}
	for parent, children := range after {
		if _, inBase := baseEdges[parent]; inBase {
			continue
		}
		for _, c := range children {
			if allBase[c] {
				direct[c] = true
				if strings.HasPrefix(c, metarangesPrefix) {
					levels["node"] = true
				} else {
					levels["range"] = true
				}
			}
		}
	}
	if !levels["node"] || !levels["range"] {
		t.Fatalf("the change passes through %v, want both ranges and nodes", levels)
	}
	for name := range direct {
		youngName = name
		break
	}
	for _, name := range all {
		setMTime(t, dir, name, old)
	}
	setMTime(t, dir, youngName, young)

	changed, err := change(m, "new")
	if err != nil {
		t.Fatal(err)
	}
	if changed != probe {
		t.Fatalf("the same change gave %s, then %s", probe, changed)
	}
	touched := counter.touches()
	for _, name := range all {
		mt := fileMTime(t, dir, name)
		switch {
		case name == youngName:
			if !mt.Equal(young) || touched[name] != 0 {
				t.Errorf("an object 1h old (grace 6h) was touched: %v -> %v", young, mt)
			}
		case direct[name]:
			if mt.Before(now.Add(-time.Minute)) || touched[name] != 1 {
				t.Errorf("%s, named by a new node, is still %v old (touched %d times)", name, now.Sub(mt).Round(time.Minute), touched[name])
			}
		case touched[name] != 0:
			t.Errorf("%s, not named by a new node, was touched", name)
		}
	}
	if len(direct) < 4 {
		t.Fatalf("only %d objects passed through", len(direct))
	}

	// The same commit again from this Manager: it knows the objects are
	// fresh and asks the store nothing.
	stats := counter.stats.Load()
	if _, err := change(m, "newer"); err != nil {
		t.Fatal(err)
	}
	if n := counter.stats.Load() - stats; n != 0 {
		t.Errorf("a second Apply over fresh objects made %d Stats", n)
	}

	// A passed-through object that is gone fails the write: a range, and
	// an inner node.
	for _, prefix := range []string{rangesPrefix, metarangesPrefix} {
		var gone string
		for name := range direct {
			if strings.HasPrefix(name, prefix) && name != youngName {
				gone = name
				break
			}
		}
		data, err := blobs.Get(ctx, ns, gone)
		if err != nil {
			t.Fatal(err)
		}
		// A blob of the test's own namespace, not a kv record.
		if err := blobs.Delete(ctx, ns, gone); err != nil {
			t.Fatal(err)
		}
		_, err = change(NewManager(blobs, cfg), "third")
		if !errors.Is(err, ErrBlobNotFound) || !strings.Contains(err.Error(), gone) {
			t.Fatalf("Apply over a base whose %s is gone = %v, want ErrBlobNotFound naming it", gone, err)
		}
		if err := blobs.Put(ctx, ns, gone, data); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLongApplyRefreshesItsOwnRanges: ranges an Apply wrote more than half
// the grace before its metarange are touched before the metarange is
// written, so a commit that takes long still references only young
// objects.
func TestLongApplyRefreshesItsOwnRanges(t *testing.T) {
	ctx := context.Background()
	ns, _ := fileNS(t)
	blobs := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { blobs.Close() })
	var skew atomic.Int64
	cfg := tinyConfig
	cfg.GCGrace = 6 * time.Hour
	cfg.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	// Object by object; TestLongApplyRefreshesItsOwnPacks is the same for
	// packs.
	cfg.Unpacked = true
	counter := &touchCounter{BlobStore: blobs, touched: map[string]int{}}
	m := NewManager(counter, cfg)
	recs := numbered(400, "v")
	// The writer's clock jumps 4h once half the records are written: the
	// ranges written before look 4h old when the metarange is written.
	it := &hookIter{sliceIter: newSliceIter(recs), at: 200, fn: func() { skew.Store(int64(4 * time.Hour)) }}
	id, err := m.WriteMetaRangeByIterator(ctx, ns, it)
	if err != nil {
		t.Fatal(err)
	}
	ranges, err := ReadMetaRange(ctx, blobs, ns, id)
	if err != nil {
		t.Fatal(err)
	}
	touched := counter.touches()
	early := 0
	for _, r := range ranges {
		if string(r.MaxKey) < string(recs[200].Key) {
			early++
			if touched[rangeBlobName(r.ID)] != 1 {
				t.Errorf("range %s written 4h before its metarange was touched %d times, want 1", r.ID, touched[rangeBlobName(r.ID)])
			}
		} else if touched[rangeBlobName(r.ID)] != 0 {
			t.Errorf("range %s written just before its metarange was touched", r.ID)
		}
	}
	if early < 5 {
		t.Fatalf("only %d ranges written before the clock jumped", early)
	}
}

// hookIter calls fn once, before returning record at.
type hookIter struct {
	*sliceIter
	at   int
	fn   func()
	done bool
}

func (h *hookIter) Next() bool {
	if !h.done && h.i+1 == h.at {
		h.done = true
		h.fn()
	}
	return h.sliceIter.Next()
}

// TestApplyRefreshesReusedPacks is TestApplyRefreshesReusedRanges for
// packed trees: the packs holding the objects a new node names without
// this write having written them are touched when older than half the GC
// grace, left alone when younger; a pack holding only objects deeper in
// a passed-through subtree is not asked about; and a missing pack fails
// the write.
func TestApplyRefreshesReusedPacks(t *testing.T) {
	ctx := context.Background()
	ns, dir := fileNS(t)
	blobs := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { blobs.Close() })
	cfg := multiLevelConfig()
	cfg.GCGrace = 6 * time.Hour
	// Packs of a few objects each, so that a tree spans many.
	cfg.PackBytes = 2 << 10
	recs := numbered(400, "v")
	base := write(t, NewManager(blobs, cfg), ns, recs)
	baseEdges, allBase := treeEdges(t, blobs, ns, base)
	last := recs[len(recs)-1]
	change := func(m *Manager, v string) (graveler.MetaRangeID, error) {
		id, _, err := m.Apply(ctx, ns, base, newSliceIter([]graveler.ValueRecord{rec(string(last.Key), v, v)}), graveler.ApplyOptions{})
		return id, err
	}
	probe, err := change(NewManager(blobs, cfg), "new")
	if err != nil {
		t.Fatal(err)
	}
	after, _ := treeEdges(t, blobs, ns, probe)
	direct := map[string]bool{}
	for parent, children := range after {
		if _, inBase := baseEdges[parent]; inBase {
			continue
		}
		for _, c := range children {
			if allBase[c] {
				direct[c] = true
			}
		}
	}
	packs := 0
	for name := range allBase {
		if strings.HasPrefix(name, packsPrefix) {
			packs++
		}
	}
	if len(direct) < 3 || packs <= len(direct)+1 {
		t.Fatalf("%d of the base's %d packs named by new nodes: want several named and several not", len(direct), packs)
	}
	now := time.Now()
	old, young := now.Add(-10*time.Hour), now.Add(-time.Hour)
	youngName := ""
	for name := range direct {
		youngName = name
		break
	}
	for name := range allBase {
		setMTime(t, dir, name, old)
	}
	setMTime(t, dir, youngName, young)

	counter := &touchCounter{BlobStore: blobs, touched: map[string]int{}}
	m := NewManager(counter, cfg)
	if changed, err := change(m, "new"); err != nil || changed != probe {
		t.Fatalf("the same change gave %s, then %s, %v", probe, changed, err)
	}
	touched := counter.touches()
	for name := range allBase {
		mt := fileMTime(t, dir, name)
		switch {
		case name == youngName:
			if !mt.Equal(young) || touched[name] != 0 {
				t.Errorf("a pack 1h old (grace 6h) was touched: %v -> %v", young, mt)
			}
		case direct[name]:
			if mt.Before(now.Add(-time.Minute)) || touched[name] != 1 {
				t.Errorf("%s, holding objects a new node names, is still %v old (touched %d times)", name, now.Sub(mt).Round(time.Minute), touched[name])
			}
		case touched[name] != 0:
			t.Errorf("%s, holding no object a new node names, was touched", name)
		}
	}

	// A pack a new node would name that is gone fails the write.
	var gone string
	for name := range direct {
		if name != youngName {
			gone = name
			break
		}
	}
	data, err := blobs.Get(ctx, ns, gone)
	if err != nil {
		t.Fatal(err)
	}
	if err := blobs.Delete(ctx, ns, gone); err != nil {
		t.Fatal(err)
	}
	_, err = change(NewManager(blobs, cfg), "third")
	if !errors.Is(err, ErrBlobNotFound) || !strings.Contains(err.Error(), gone) {
		t.Fatalf("Apply over a base whose pack %s is gone = %v, want ErrBlobNotFound naming it", gone, err)
	}
	if err := blobs.Put(ctx, ns, gone, data); err != nil {
		t.Fatal(err)
	}
}

// TestLongApplyRefreshesItsOwnPacks is TestLongApplyRefreshesItsOwnRanges
// for packs: a pack sealed more than half the grace before the root is
// touched before the root is written. Each object is a pack of its own
// here, so that a range's pack is sealed when the range is cut.
func TestLongApplyRefreshesItsOwnPacks(t *testing.T) {
	ctx := context.Background()
	ns, _ := fileNS(t)
	blobs := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { blobs.Close() })
	var skew atomic.Int64
	cfg := tinyConfig
	cfg.GCGrace = 6 * time.Hour
	cfg.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	cfg.PackBytes = 1
	counter := &touchCounter{BlobStore: blobs, touched: map[string]int{}}
	m := NewManager(counter, cfg)
	recs := numbered(400, "v")
	it := &hookIter{sliceIter: newSliceIter(recs), at: 200, fn: func() { skew.Store(int64(4 * time.Hour)) }}
	id, err := m.WriteMetaRangeByIterator(ctx, ns, it)
	if err != nil {
		t.Fatal(err)
	}
	ranges, err := ReadMetaRange(ctx, blobs, ns, id)
	if err != nil {
		t.Fatal(err)
	}
	touched := counter.touches()
	early := 0
	for _, r := range ranges {
		if !r.Loc.Packed() {
			t.Fatalf("range %s stored on its own", r.ID)
		}
		pack := packsPrefix + r.Loc.Pack
		if string(r.MaxKey) < string(recs[200].Key) {
			early++
			if touched[pack] != 1 {
				t.Errorf("the pack of range %s, sealed 4h before the root, was touched %d times, want 1", r.ID, touched[pack])
			}
		} else if touched[pack] != 0 {
			t.Errorf("the pack of range %s, sealed just before the root, was touched", r.ID)
		}
	}
	if early < 5 {
		t.Fatalf("only %d ranges written before the clock jumped", early)
	}
}
