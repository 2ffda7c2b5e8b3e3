package committed_test

import (
	"fmt"
	"strings"
	"testing"

	"graveler/graveler"
	"graveler/graveler/committed"
)

// rampRecords are n entries of about 230 encoded bytes, a little more
// than a typical object's: large enough that the masks alone, which count
// records, make ranges and nodes well past the ramps' bounds.
func rampRecords(n int, salt string) []graveler.ValueRecord {
	out := make([]graveler.ValueRecord, n)
	for i := range out {
		k := fmt.Sprintf("data/2026/11/part-%08d.parquet", i)
		out[i] = graveler.ValueRecord{Key: graveler.Key(k), Value: &graveler.Value{
			Identity: []byte(salt + k),
			Data:     []byte(salt + k + strings.Repeat("m", 150)),
		}}
	}
	return out
}

// TestRampBoundsNodeSizes: under the default configuration every range
// and inner node but the last of its level ends by the time its records
// reach the minimum plus the ramp (and one record more), whatever its
// entries' size; cut by the masks alone, the same entries make nodes past
// that bound.
func TestRampBoundsNodeSizes(t *testing.T) {
	recs := rampRecords(20000, "v")
	over := func(cfg committed.Config) (ranges, nodes, checked int) {
		blobs, ns := treeBackends()[0].open(t)
		id := mustWrite(t, committed.NewManager(blobs, cfg), ns, recs)
		shape := treeShape(t, blobs, ns, id)
		for level, objs := range shape {
			if level == rootLevel(t, blobs, ns, id) {
				continue
			}
			// The last object of a level may end with the stream, not by
			// the rule; every other one ended by it.
			var lastKey graveler.Key
			for _, d := range objs {
				if string(d.MaxKey) > string(lastKey) {
					lastKey = d.MaxKey
				}
			}
			for _, d := range objs {
				if string(d.MaxKey) == string(lastKey) {
					continue
				}
				checked++
				// A child entry here is at most ~150 bytes, a record ~250.
				if level == 0 && d.EstimatedSize > committed.DefaultMinRangeSize+committed.DefaultRangeRamp+250 {
					ranges++
				}
				if level > 0 && d.EstimatedSize > committed.DefaultMinNodeSize+committed.DefaultNodeRamp+150 {
					nodes++
				}
			}
		}
		return ranges, nodes, checked
	}
	ranges, nodes, checked := over(committed.Config{})
	if ranges != 0 || nodes != 0 || checked < 1000 {
		t.Errorf("with the ramps %d ranges and %d nodes (of %d) are past their bound", ranges, nodes, checked)
	}
	ranges, nodes, _ = over(committed.Config{RangeRamp: -1, NodeRamp: -1})
	if ranges == 0 || nodes == 0 {
		t.Errorf("cut by the masks alone, %d ranges and %d nodes are past the ramps' bound: the test shows nothing", ranges, nodes)
	}
}

// TestMaskTreesPassThroughUnderRamp: a tree written by the masks alone
// (as before the ramps) is changed in one key by a writer under the
// ramps, which writes the path to the change and the neighbours it cuts
// anew, and keeps every other subtree as it was: a mask's cut is a cut
// of the ramped rule too, so an old node that ends by the mask ends a
// new one wherever the new one reached the minimum size.
func TestMaskTreesPassThroughUnderRamp(t *testing.T) {
	for _, be := range treeBackends() {
		t.Run(be.name, func(t *testing.T) {
			blobs, ns := be.open(t)
			ms := &meteredStore{BlobStore: blobs}
			recs := rampRecords(20000, "v")
			old := committed.Config{RangeRamp: -1, NodeRamp: -1, Unpacked: true}
			base := mustWrite(t, committed.NewManager(ms, old), ns, recs)
			levels := rootLevel(t, blobs, ns, base)
			if levels < 2 {
				t.Fatalf("root of level %d, want at least 2", levels)
			}
			baseShape := treeShape(t, blobs, ns, base)
			for _, i := range []int{0, 7777, 13131, len(recs) - 1} {
				c := graveler.ValueRecord{Key: recs[i].Key, Value: &graveler.Value{Identity: []byte("new"), Data: []byte("x")}}
				m := committed.NewManager(ms, committed.Config{Unpacked: true})
				puts := ms.puts.Load()
				id := mustApply(t, m, ns, base, []graveler.ValueRecord{c})
				// The path, and the neighbours cut anew until a new node
				// ends where an old one did (about 4 KiB old ranges
				// become two or three new ones): a few objects a level.
				if wrote := int(ms.puts.Load() - puts); wrote > 12*(levels+1) {
					t.Errorf("change %d: wrote %d objects, a tree of %d levels", i, wrote, levels+1)
				}
				shape := treeShape(t, blobs, ns, id)
				for l := 0; l < levels; l++ {
					if _, fresh := sharedAndFresh(baseShape[l], shape[l]); fresh > 16 {
						t.Errorf("change %d: level %d has %d new objects of %d", i, l, fresh, len(shape[l]))
					}
				}
			}
		})
	}
}

// TestRampLongKeys: with keys of graveler.MaxKeyLen (1 KiB) an inner
// node's entry for a child is about 2 KiB, past the minimum node size on
// its own. A ramp from the minimum would cut nodes after one or two
// children, making the tree ever taller (3,000 keys made a root of level
// 24; 60,000 failed for want of levels), and ranges after a record or
// two. The ramps start later for long keys: the tree stays about as tall
// as the masks alone make it, and ranges hold several records.
func TestRampLongKeys(t *testing.T) {
	recs := make([]graveler.ValueRecord, 3000)
	for i := range recs {
		k := fmt.Sprintf("%08d", i) + strings.Repeat("p", graveler.MaxKeyLen-8)
		recs[i] = graveler.ValueRecord{Key: graveler.Key(k), Value: &graveler.Value{Identity: []byte("id"), Data: []byte("d")}}
	}
	shape := func(cfg committed.Config) (level, ranges int) {
		blobs, ns := treeBackends()[0].open(t)
		id := mustWrite(t, committed.NewManager(blobs, cfg), ns, recs)
		return rootLevel(t, blobs, ns, id), len(treeShape(t, blobs, ns, id)[0])
	}
	level, ranges := shape(committed.Config{})
	maskLevel, _ := shape(committed.Config{RangeRamp: -1, NodeRamp: -1})
	if level > maskLevel+1 {
		t.Errorf("3,000 keys of 1 KiB: root of level %d, %d cut by the masks alone", level, maskLevel)
	}
	if perRange := float64(len(recs)) / float64(ranges); perRange < 3 {
		t.Errorf("3,000 keys of 1 KiB: %.1f records a range", perRange)
	}
}
