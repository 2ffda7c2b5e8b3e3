package committed

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"graveler/graveler"
)

// mergeFixture: base holds k000..k199 (identity "b"); dest and source each
// change some keys. Conflicts: k010 (both set, differently), k020 (dest
// deletes, source sets), k030 (dest sets, source deletes). Same change on
// both sides: k040 (both set "same"), k050 (both delete).
func mergeFixture(t *testing.T, m *Manager, ns graveler.StorageNamespace) (dest, source, base graveler.MetaRangeID) {
	ctx := context.Background()
	base = write(t, m, ns, keys(200, "b"))
	apply := func(changes ...graveler.ValueRecord) graveler.MetaRangeID {
		id, _, err := m.Apply(ctx, ns, base, newSliceIter(changes), graveler.ApplyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	dest = apply(rec("a-dest-only", "d", "d"), rec("k005", "d", "d"), rec("k010", "d", "d"), tomb("k020"),
		rec("k030", "d", "d"), rec("k040", "same", "x"), tomb("k050"))
	source = apply(rec("k010", "s", "s"), rec("k020", "s", "s"), tomb("k030"), rec("k040", "same", "x"),
		tomb("k050"), tomb("k060"), rec("k070", "s", "s"), rec("k150x", "s", "s"))
	return dest, source, base
}

func keys(n int, identity string) []graveler.ValueRecord {
	out := make([]graveler.ValueRecord, n)
	for i := range out {
		out[i] = rec(fmt.Sprintf("k%03d", i), identity, "data")
	}
	return out
}

func TestMergeStrategies(t *testing.T) {
	ctx := context.Background()
	m, _, ns := newTestManager(t, tinyConfig)
	dest, source, base := mergeFixture(t, m, ns)

	_, _, err := m.Merge(ctx, ns, dest, source, base, graveler.MergeStrategyNone)
	conflict, ok := errors.AsType[*graveler.MergeConflictError](err)
	if !ok || !errors.Is(err, graveler.ErrMergeConflict) {
		t.Fatalf("Merge with conflicts: %v", err)
	}
	if conflict.Total != 3 || len(conflict.Keys) != 3 || string(conflict.Keys[0]) != "k010" || string(conflict.Keys[1]) != "k020" || string(conflict.Keys[2]) != "k030" {
		t.Fatalf("conflict = %+v", conflict)
	}

	check := func(strategy graveler.MergeStrategy, want map[string]string, counts map[graveler.DiffType]int) {
		t.Helper()
		id, sum, err := m.Merge(ctx, ns, dest, source, base, strategy)
		if err != nil {
			t.Fatalf("strategy %d: %v", strategy, err)
		}
		for typ, n := range counts {
			if sum.Count[typ] != n {
				t.Fatalf("strategy %d: %v = %d, want %d (%v)", strategy, typ, sum.Count[typ], n, sum.Count)
			}
		}
		for k, identity := range want {
			v, err := m.Get(ctx, ns, id, graveler.Key(k))
			switch {
			case identity == "" && !errors.Is(err, graveler.ErrEntryNotFound):
				t.Fatalf("strategy %d: %s = %v, %v; want absent", strategy, k, v, err)
			case identity != "" && (err != nil || string(v.Identity) != identity):
				t.Fatalf("strategy %d: %s = %v, %v; want %s", strategy, k, v, err, identity)
			}
		}
		it, _ := m.List(ctx, ns, id)
		if n := len(collect(t, it)); n != 200+2-3+boolInt(want["k020"] != "")-boolInt(want["k030"] == "") {
			t.Fatalf("strategy %d: %d entries", strategy, n)
		}
	}
	common := map[string]string{"a-dest-only": "d", "k005": "d", "k040": "same", "k050": "", "k060": "", "k070": "s", "k150x": "s", "k199": "b"}
	with := func(extra map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range common {
			out[k] = v
		}
		for k, v := range extra {
			out[k] = v
		}
		return out
	}
	// Non-conflicting source changes onto dest: k060 removed, k070 changed, k150x added.
	check(graveler.MergeStrategyDestWins, with(map[string]string{"k010": "d", "k020": "", "k030": "d"}),
		map[graveler.DiffType]int{graveler.DiffTypeAdded: 1, graveler.DiffTypeRemoved: 1, graveler.DiffTypeChanged: 1})
	check(graveler.MergeStrategySourceWins, with(map[string]string{"k010": "s", "k020": "s", "k030": ""}),
		map[graveler.DiffType]int{graveler.DiffTypeAdded: 2, graveler.DiffTypeRemoved: 2, graveler.DiffTypeChanged: 2})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestMergeNoChangesAndFastForward(t *testing.T) {
	ctx := context.Background()
	m, _, ns := newTestManager(t, tinyConfig)
	base := write(t, m, ns, keys(100, "b"))
	source, _, err := m.Apply(ctx, ns, base, newSliceIter([]graveler.ValueRecord{rec("k050", "s", "s"), rec("z", "s", "s")}), graveler.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dest, source, base graveler.MetaRangeID }{
		{base, base, base}, {source, base, base}, {source, source, base}, {"", "", ""}, {base, "", ""},
	} {
		if _, _, err := m.Merge(ctx, ns, c.dest, c.source, c.base, graveler.MergeStrategyNone); !errors.Is(err, graveler.ErrNoChanges) {
			t.Fatalf("Merge(%.6s, %.6s, %.6s): %v", c.dest, c.source, c.base, err)
		}
	}
	// Dest already holds source's changes (made separately): nothing to merge.
	dest, _, err := m.Apply(ctx, ns, base, newSliceIter([]graveler.ValueRecord{rec("k050", "s", "s"), rec("z", "s", "s")}), graveler.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Merge(ctx, ns, dest, source, base, graveler.MergeStrategyNone); !errors.Is(err, graveler.ErrNoChanges) {
		t.Fatalf("merging already-present changes: %v", err)
	}
	// Fast-forward.
	id, sum, err := m.Merge(ctx, ns, base, source, base, graveler.MergeStrategyNone)
	if err != nil || id != source || sum.Count[graveler.DiffTypeAdded] != 1 || sum.Count[graveler.DiffTypeChanged] != 1 {
		t.Fatalf("fast-forward = %.8s, %v, %v", id, sum, err)
	}
	// Into and from the empty tree.
	id, sum, err = m.Merge(ctx, ns, "", source, "", graveler.MergeStrategyNone)
	if err != nil || id != source || sum.Count[graveler.DiffTypeAdded] != 101 {
		t.Fatalf("merge into empty = %.8s, %v, %v", id, sum, err)
	}
	other := write(t, m, ns, []graveler.ValueRecord{rec("k050", "o", "o")})
	if _, _, err := m.Merge(ctx, ns, other, source, "", graveler.MergeStrategyNone); !errors.Is(err, graveler.ErrMergeConflict) {
		t.Fatalf("unrelated trees with a shared key: %v", err)
	}
	id, _, err = m.Merge(ctx, ns, other, source, "", graveler.MergeStrategyDestWins)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := m.Get(ctx, ns, id, graveler.Key("k050")); err != nil || string(v.Identity) != "o" {
		t.Fatalf("dest wins: %v, %v", v, err)
	}
}

func TestMergeConflictKeysBounded(t *testing.T) {
	ctx := context.Background()
	m, _, ns := newTestManager(t, tinyConfig)
	base := write(t, m, ns, keys(300, "b"))
	var d, s []graveler.ValueRecord
	for _, r := range keys(300, "") {
		d = append(d, rec(string(r.Key), "d", ""))
		s = append(s, rec(string(r.Key), "s", ""))
	}
	dest, _, _ := m.Apply(ctx, ns, base, newSliceIter(d), graveler.ApplyOptions{})
	source, _, _ := m.Apply(ctx, ns, base, newSliceIter(s), graveler.ApplyOptions{})
	_, _, err := m.Merge(ctx, ns, dest, source, base, graveler.MergeStrategyNone)
	c, ok := errors.AsType[*graveler.MergeConflictError](err)
	if !ok || c.Total != 300 || len(c.Keys) != maxConflictKeys || string(c.Keys[99]) != "k099" {
		t.Fatalf("%v", err)
	}
}

// TestMergeProperty checks Merge against a three-way model on random trees.
func TestMergeProperty(t *testing.T) {
	ctx := context.Background()
	// One-level trees and trees of several levels.
	for _, cfg := range []Config{tinyConfig, multiLevelConfig(), rampedConfig()} {
		m, _, ns := newTestManager(t, cfg)
		for iter := range 100 {
			r := rand.New(rand.NewPCG(uint64(iter), 7))
			space := 20 + r.IntN(200)
			base := model{}
			for range r.IntN(space) {
				k := fmt.Sprintf("k%05d", r.IntN(space))
				base[k] = graveler.Value{Identity: []byte("b"), Data: []byte(k)}
			}
			baseID := write(t, m, ns, base.records())
			branch := func() (graveler.MetaRangeID, model) {
				changes, want, _, _ := randomChanges(r, base, space, r.IntN(space/3+1))
				id, _, err := m.Apply(ctx, ns, baseID, newSliceIter(changes), graveler.ApplyOptions{AllowEmpty: true})
				if err != nil {
					t.Fatal(err)
				}
				return id, want
			}
			destID, dest := branch()
			srcID, src := branch()
			strategy := graveler.MergeStrategy(r.IntN(3))

			want := dest.clone()
			conflicts := 0
			for _, k := range unionKeys(base, dest, src) {
				bv, inB := base[k]
				dv, inD := dest[k]
				sv, inS := src[k]
				same := func(a graveler.Value, inA bool, b graveler.Value, inB bool) bool {
					return inA == inB && (!inA || string(a.Identity) == string(b.Identity))
				}
				if same(bv, inB, sv, inS) || same(dv, inD, sv, inS) {
					continue
				}
				if !same(bv, inB, dv, inD) {
					conflicts++
					if strategy != graveler.MergeStrategySourceWins {
						continue
					}
				}
				if inS {
					want[k] = sv
				} else {
					delete(want, k)
				}
			}
			id, _, err := m.Merge(ctx, ns, destID, srcID, baseID, strategy)
			switch {
			case conflicts > 0 && strategy == graveler.MergeStrategyNone:
				c, ok := errors.AsType[*graveler.MergeConflictError](err)
				if !ok || c.Total != conflicts {
					t.Fatalf("iteration %d: want %d conflicts, got %v", iter, conflicts, err)
				}
				continue
			case errors.Is(err, graveler.ErrNoChanges):
				it, _ := m.List(ctx, ns, destID)
				if sameRecords(collect(t, it), want.records()) != nil {
					t.Fatalf("iteration %d: ErrNoChanges but the merge changes dest", iter)
				}
				continue
			case err != nil:
				t.Fatalf("iteration %d: %v", iter, err)
			}
			it, _ := m.List(ctx, ns, id)
			if err := sameRecords(collect(t, it), want.records()); err != nil {
				t.Fatalf("iteration %d (strategy %d): %v", iter, strategy, err)
			}
		}
	}
}

func unionKeys(ms ...model) []string {
	seen := model{}
	for _, m := range ms {
		for k := range m {
			seen[k] = graveler.Value{}
		}
	}
	var out []string
	for _, r := range seen.records() {
		out = append(out, string(r.Key))
	}
	return out
}
