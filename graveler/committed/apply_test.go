package committed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"graveler/graveler"
)

// randomChanges draws a sorted change set against base: new keys, overwrites,
// same-identity rewrites (with different data), deletes of present and of
// missing keys. It returns the changes, the expected tree and summary, and
// the expected diff from base.
func randomChanges(r *rand.Rand, base model, keySpace, n int) ([]graveler.ValueRecord, model, map[graveler.DiffType]int, map[string]graveler.DiffType) {
	want := base.clone()
	counts := map[graveler.DiffType]int{}
	diffs := map[string]graveler.DiffType{}
	byKey := map[string]graveler.ValueRecord{}
	for range n {
		k := fmt.Sprintf("k%05d", r.IntN(keySpace))
		if _, dup := byKey[k]; dup {
			continue
		}
		old, present := base[k]
		var c graveler.ValueRecord
		switch op := r.IntN(4); {
		case op == 0:
			c = tomb(k)
		case op == 1 && present:
			c = rec(k, string(old.Identity), "rewritten")
		default:
			c = rec(k, fmt.Sprintf("id-%d", r.Uint32()), fmt.Sprintf("d-%d", r.IntN(100)))
		}
		byKey[k] = c
		switch {
		case c.IsTombstone() && present:
			counts[graveler.DiffTypeRemoved]++
			diffs[k] = graveler.DiffTypeRemoved
			delete(want, k)
		case c.IsTombstone():
		case !present:
			counts[graveler.DiffTypeAdded]++
			diffs[k] = graveler.DiffTypeAdded
			want[k] = *c.Value
		case !bytes.Equal(old.Identity, c.Identity):
			counts[graveler.DiffTypeChanged]++
			diffs[k] = graveler.DiffTypeChanged
			want[k] = *c.Value
		}
	}
	var changes model = map[string]graveler.Value{}
	tombs := map[string]bool{}
	for k, c := range byKey {
		if c.IsTombstone() {
			tombs[k] = true
			changes[k] = graveler.Value{}
		} else {
			changes[k] = *c.Value
		}
	}
	recs := changes.records()
	for i := range recs {
		if tombs[string(recs[i].Key)] {
			recs[i].Value = nil
		}
	}
	return recs, want, counts, diffs
}

func TestApplyProperty(t *testing.T) {
	ctx := context.Background()
	// One-level trees and trees of several levels.
	for _, cfg := range []Config{tinyConfig, multiLevelConfig(), rampedConfig()} {
		m, _, ns := newTestManager(t, cfg)
		for iter := range 200 {
			r := rand.New(rand.NewPCG(uint64(iter), 42))
			keySpace := 10 + r.IntN(400)
			base := model{}
			for range r.IntN(keySpace) {
				k := fmt.Sprintf("k%05d", r.IntN(keySpace))
				base[k] = graveler.Value{Identity: []byte(fmt.Sprintf("b-%d", r.IntN(3))), Data: []byte(k)}
			}
			baseID := write(t, m, ns, base.records())
			changes, want, counts, diffs := randomChanges(r, base, keySpace, r.IntN(keySpace/2+1))
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("iteration %d (base %d keys, %d changes): %s", iter, len(base), len(changes), fmt.Sprintf(format, args...))
			}

			got, sum, err := m.Apply(ctx, ns, baseID, newSliceIter(changes), graveler.ApplyOptions{})
			if len(diffs) == 0 {
				if !errors.Is(err, graveler.ErrNoChanges) {
					fail("no effective changes: %v", err)
				}
				got, _, err = m.Apply(ctx, ns, baseID, newSliceIter(changes), graveler.ApplyOptions{AllowEmpty: true})
				if err != nil || got != baseID {
					fail("AllowEmpty: %q, %v; want base %q", got, err, baseID)
				}
			} else if err != nil {
				fail("Apply: %v", err)
			}
			for _, typ := range []graveler.DiffType{graveler.DiffTypeAdded, graveler.DiffTypeRemoved, graveler.DiffTypeChanged} {
				if sum.Count[typ] != counts[typ] {
					fail("summary %v = %d, want %d", typ, sum.Count[typ], counts[typ])
				}
			}
			it, err := m.List(ctx, ns, got)
			if err != nil {
				fail("List: %v", err)
			}
			if err := sameRecords(collect(t, it), want.records()); err != nil {
				fail("content: %v", err)
			}
			// The same entries written from scratch give the same metarange.
			if fresh := write(t, m, ns, want.records()); fresh != got {
				fail("Apply gave %q, writing the same entries gave %q", got, fresh)
			}
			d, err := m.Diff(ctx, ns, baseID, got)
			if err != nil {
				fail("Diff: %v", err)
			}
			gotDiffs := collectDiff(t, d)
			if len(gotDiffs) != len(diffs) {
				fail("%d diffs, want %d", len(gotDiffs), len(diffs))
			}
			for i, df := range gotDiffs {
				k := string(df.Key)
				if diffs[k] != df.Type || (i > 0 && bytes.Compare(gotDiffs[i-1].Key, df.Key) >= 0) {
					fail("diff %d: %v %q", i, df.Type, k)
				}
				wv, inWant := want[k]
				bv, inBase := base[k]
				if inWant != (df.Value != nil) || (inWant && (!bytes.Equal(wv.Identity, df.Value.Identity) || !bytes.Equal(wv.Data, df.Value.Data))) {
					fail("diff %q: value %v", k, df.Value)
				}
				if inBase != (df.LeftIdentity != nil) || !bytes.Equal(bv.Identity, df.LeftIdentity) {
					fail("diff %q: left identity %q", k, df.LeftIdentity)
				}
			}
			for _, id := range []graveler.MetaRangeID{baseID, got} {
				d, err := m.Diff(ctx, ns, id, id)
				if err != nil {
					fail("Diff(x, x): %v", err)
				}
				if g := collectDiff(t, d); len(g) != 0 {
					fail("Diff(x, x) = %d diffs", len(g))
				}
			}
			// A diff sought into the middle agrees with the full diff.
			if len(gotDiffs) > 1 {
				mid := gotDiffs[len(gotDiffs)/2].Key
				d, _ := m.Diff(ctx, ns, baseID, got)
				d.SeekGE(mid)
				if g := collectDiff(t, d); len(g) != len(gotDiffs)-len(gotDiffs)/2 || !bytes.Equal(g[0].Key, mid) {
					fail("Diff after SeekGE(%q): %d diffs", mid, len(g))
				}
			}
		}
	}
}

func TestApplyPassesUntouchedRangesThrough(t *testing.T) {
	ctx := context.Background()
	m, store, ns := newTestManager(t, tinyConfig)
	recs := numbered(5000, "v")
	baseID := write(t, m, ns, recs)
	// Read through a manager with cold caches so every range read shows.
	cold := NewManager(store, tinyConfig)
	baseMR, err := cold.loadMetaRange(ctx, ns, baseID)
	if err != nil {
		t.Fatal(err)
	}
	if len(baseMR.ranges) < 300 {
		t.Fatalf("%d ranges", len(baseMR.ranges))
	}
	cases := []struct {
		name    string
		changes []graveler.ValueRecord
	}{
		{"change", []graveler.ValueRecord{rec("key-002500", "new", "x")}},
		{"insert", []graveler.ValueRecord{rec("key-002500a", "new", "x")}},
		{"delete", []graveler.ValueRecord{tomb("key-002500")}},
		{"delete range end", []graveler.ValueRecord{tomb(string(baseMR.ranges[100].MaxKey))}},
		{"append", []graveler.ValueRecord{rec("zzz", "new", "x")}},
		{"prepend", []graveler.ValueRecord{rec("a", "new", "x")}},
	}
	for _, c := range cases {
		before := store.rangeGets.Load()
		id, _, err := cold.Apply(ctx, ns, baseID, newSliceIter(c.changes), graveler.ApplyOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		reads := store.rangeGets.Load() - before
		mr, err := cold.loadMetaRange(ctx, ns, id)
		if err != nil {
			t.Fatal(err)
		}
		shared := map[graveler.RangeID]bool{}
		for _, r := range baseMR.ranges {
			shared[r.ID] = true
		}
		fresh := 0
		for _, r := range mr.ranges {
			if !shared[r.ID] {
				fresh++
			}
		}
		if fresh > 2 || reads > 2 {
			t.Fatalf("%s: %d of %d ranges new, %d ranges read", c.name, fresh, len(mr.ranges), reads)
		}
		// Diff reads only the ranges that differ.
		before = store.rangeGets.Load()
		d, err := NewManager(store, tinyConfig).Diff(ctx, ns, baseID, id)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(collectDiff(t, d)); n != 1 {
			t.Fatalf("%s: %d diffs", c.name, n)
		}
		if reads := store.rangeGets.Load() - before; reads > 4 {
			t.Fatalf("%s: diff read %d ranges", c.name, reads)
		}
	}
}

func TestApplyIdenticalContentIdenticalID(t *testing.T) {
	ctx := context.Background()
	m, _, ns := newTestManager(t, tinyConfig)
	recs := numbered(1000, "v")
	direct := write(t, m, ns, recs)
	fromEmpty, sum, err := m.Apply(ctx, ns, "", newSliceIter(recs), graveler.ApplyOptions{})
	if err != nil || fromEmpty != direct || sum.Count[graveler.DiffTypeAdded] != 1000 {
		t.Fatalf("Apply from empty = %q, %v, %v; written %q", fromEmpty, sum, err, direct)
	}
	// Built in two halves, in either order.
	half, err := m.WriteMetaRangeByIterator(ctx, ns, newSliceIter(recs[:500]))
	if err != nil {
		t.Fatal(err)
	}
	both, _, err := m.Apply(ctx, ns, half, newSliceIter(recs[500:]), graveler.ApplyOptions{})
	if err != nil || both != direct {
		t.Fatalf("first half then second = %q, %v; want %q", both, err, direct)
	}
	half = write(t, m, ns, recs[500:])
	both, _, err = m.Apply(ctx, ns, half, newSliceIter(recs[:500]), graveler.ApplyOptions{})
	if err != nil || both != direct {
		t.Fatalf("second half then first = %q, %v; want %q", both, err, direct)
	}
	// Interleaved: every other key, then the rest.
	var even, odd []graveler.ValueRecord
	for i, r := range recs {
		if i%2 == 0 {
			even = append(even, r)
		} else {
			odd = append(odd, r)
		}
	}
	both, _, err = m.Apply(ctx, ns, write(t, m, ns, even), newSliceIter(odd), graveler.ApplyOptions{})
	if err != nil || both != direct {
		t.Fatalf("interleaved = %q, %v; want %q", both, err, direct)
	}
	if ok, err := m.Exists(ctx, ns, direct); err != nil || !ok {
		t.Fatalf("Exists = %v, %v", ok, err)
	}
}

// cutPast: a mask hit cuts wherever past the minimum; otherwise the ramp
// cuts with a chance of past/ramp, certainly from ramp bytes on, and not
// at all without a ramp.
func TestCutPast(t *testing.T) {
	const mask = 0xf
	r := rand.New(rand.NewPCG(1, 2))
	for _, ramp := range []int{1, 1000, 2048, 1 << 30} {
		for _, frac := range []float64{0, 0.25, 0.5, 0.9} {
			past := int(frac * float64(ramp))
			cuts, misses := 0, 0
			const n = 200000
			for range n {
				h := r.Uint64() | 1 // no mask hit
				if cutPast(h, mask, past, ramp) {
					cuts++
				}
				if !cutPast(h, mask, past, -1) {
					misses++
				}
				if !cutPast(h&^mask, mask, past, ramp) {
					t.Fatalf("ramp %d past %d: a mask hit did not cut", ramp, past)
				}
			}
			if misses != n {
				t.Fatalf("no ramp: %d of %d hashes without a mask hit cut", n-misses, n)
			}
			want := float64(past) / float64(ramp)
			if got := float64(cuts) / n; got < want-0.01 || got > want+0.01 {
				t.Errorf("ramp %d past %d: cut %.3f of the time, want %.3f", ramp, past, got, want)
			}
		}
		if !cutPast(^uint64(0)-mask+1, mask, ramp, ramp) && ramp > 0 {
			t.Errorf("ramp %d: no cut at the end of the ramp", ramp)
		}
		// Before the ramp starts (long keys), only the mask cuts.
		if cutPast(1, mask, -1, ramp) || cutPast(1, mask, -ramp, ramp) || !cutPast(0, mask, -1, ramp) {
			t.Errorf("ramp %d: before its start the ramp cut, or the mask did not", ramp)
		}
	}
}
