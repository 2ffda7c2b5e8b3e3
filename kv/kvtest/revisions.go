package kvtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"graveler/kv"
)

// version returns the version a Get reports for key: the revision of the
// write that stored it.
func version(t testing.TB, s kv.Store, part, key string) int64 {
	t.Helper()
	_, pr := mustGet(t, s, part, key)
	return pr.Version()
}

// wantNoted checks that rec's last revision is want, and that the write
// advanced it (revisions only grow).
func wantNoted(t testing.TB, what string, rec *kv.Revisions, prev, want int64) {
	t.Helper()
	if got := rec.Last(); got != want || got <= prev {
		t.Fatalf("%s: noted revision %d, want %d (the version a get reports), after %d", what, got, want, prev)
	}
}

// testRevisions checks that every write notes, in its context's
// kv.Revisions, the revision a later Get reports for it, and that a delete
// notes a revision between the key's last version and the next write.
func testRevisions(t *testing.T, s kv.Store) {
	c, rec := kv.WithRevisions(ctx)
	prev := int64(0)
	step := func(what string, write func() error, part, key string) {
		t.Helper()
		if err := write(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		want := version(t, s, part, key)
		wantNoted(t, what, rec, prev, want)
		prev = want
	}
	step("set", func() error { return s.Set(c, p("rev"), p("a"), p("1")) }, "rev", "a")
	step("set again", func() error { return s.Set(c, p("rev"), p("a"), p("2")) }, "rev", "a")
	step("setif absent", func() error { return s.SetIf(c, p("rev"), p("b"), p("1"), kv.Absent) }, "rev", "b")
	_, pr := mustGet(t, s, "rev", "b")
	step("setif", func() error { return s.SetIf(c, p("rev"), p("b"), p("2"), pr) }, "rev", "b")

	// A write that did not apply notes nothing.
	if err := s.SetIf(c, p("rev"), p("b"), p("3"), pr); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("stale setif: %v", err)
	}
	if err := s.DeleteIf(c, p("rev"), p("b"), pr); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("stale deleteif: %v", err)
	}
	if got := rec.Last(); got != prev {
		t.Fatalf("a write that failed noted revision %d (last write %d)", got, prev)
	}

	// Deletes: after every version of the key, before the next write.
	deleted := func(what string, del func() error) {
		t.Helper()
		if err := del(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		rev := rec.Last()
		if rev <= prev {
			t.Fatalf("%s: noted revision %d, not after the key's last version %d", what, rev, prev)
		}
		step("set after "+what, func() error { return s.Set(c, p("rev"), p("after"), p(what)) }, "rev", "after")
		if prev <= rev {
			t.Fatalf("%s: noted revision %d, not before the next write's %d", what, rev, prev)
		}
	}
	_, pr = mustGet(t, s, "rev", "b")
	deleted("deleteif", func() error { return s.DeleteIf(c, p("rev"), p("b"), pr) })
	deleted("delete", func() error { return s.Delete(c, p("rev"), p("a")) })

	// SetAndRead: the revision of its last write, which its reads see.
	writes := []kv.Write{{Partition: p("rev"), Key: p("m1"), Value: p("1")}, {Partition: p("rev2"), Key: p("m2"), Value: p("2")}}
	got, err := kv.SetAndRead(c, s, writes, []kv.KeyRef{{Partition: p("rev"), Key: p("m1")}, {Partition: p("rev2"), Key: p("m2")}})
	if err != nil {
		t.Fatal(err)
	}
	want := max(got[0].Predicate.Version(), got[1].Predicate.Version())
	if want != max(version(t, s, "rev", "m1"), version(t, s, "rev2", "m2")) {
		t.Fatalf("set and read: its reads %v, %v are not what a get reports", got[0].Predicate, got[1].Predicate)
	}
	wantNoted(t, "set and read", rec, prev, want)
	prev = want

	// A partition drop writes after every key it removed.
	if _, err := kv.DropPartition(c, s, p("rev2")); err != nil {
		t.Fatal(err)
	}
	if rev := rec.Last(); rev <= prev {
		t.Fatalf("drop partition: noted revision %d, not after its keys' %d", rev, prev)
	}

	// Writes with no Revisions in their context are fine.
	mustSet(t, s, "rev", "plain", "v")
}

// testRevisionsEffect checks kv.Effect: the decisive write's revision is
// reported, not later writes', and scopes nest.
func testRevisionsEffect(t *testing.T, s kv.Store) {
	c, rec := kv.WithRevisions(ctx)
	if r := rec.Revision(); r != 0 {
		t.Fatalf("no write yet: revision %d", r)
	}
	if err := s.Set(c, p("eff"), p("before"), p("v")); err != nil {
		t.Fatal(err)
	}
	if r, want := rec.Revision(), version(t, s, "eff", "before"); r != want {
		t.Fatalf("no effect marked: revision %d, want the last write's %d", r, want)
	}
	inner, innerRec := kv.WithRevisions(c)
	err := kv.Effect(inner, func(c context.Context) error { return s.SetIf(c, p("eff"), p("k"), p("v"), kv.Absent) })
	if err != nil {
		t.Fatal(err)
	}
	effect := version(t, s, "eff", "k")
	if err := s.Set(c, p("eff"), p("after"), p("v")); err != nil {
		t.Fatal(err)
	}
	after := version(t, s, "eff", "after")
	if r, ok := rec.Effect(); !ok || r != effect || rec.Revision() != effect || rec.Last() != after {
		t.Fatalf("effect %d %v, revision %d, last %d; want effect %d, last %d", r, ok, rec.Revision(), rec.Last(), effect, after)
	}
	if r, ok := innerRec.Effect(); !ok || r != effect || innerRec.Last() != effect {
		t.Fatalf("inner scope: effect %d %v, last %d; want %d", r, ok, innerRec.Last(), effect)
	}
	// A decisive write that fails marks nothing.
	c2, rec2 := kv.WithRevisions(ctx)
	err = kv.Effect(c2, func(c context.Context) error { return s.SetIf(c, p("eff"), p("k"), p("v2"), kv.Absent) })
	if !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("setif on an existing key: %v", err)
	}
	if r, ok := rec2.Effect(); ok || rec2.Revision() != 0 {
		t.Fatalf("a failed decisive write marked revision %d", r)
	}
	// Without Revisions, Effect only writes.
	if err := kv.Effect(ctx, func(c context.Context) error { return s.Set(c, p("eff"), p("plain"), p("v")) }); err != nil {
		t.Fatal(err)
	}
}

// testRevisionsConcurrent: writes from many goroutines under one
// Revisions, and one decisive write among them, which is what Effect
// reports however the others interleave with it.
func testRevisionsConcurrent(t *testing.T, s kv.Store) {
	c, rec := kv.WithRevisions(ctx)
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n+1)
	for i := range n {
		wg.Go(func() {
			for j := range 5 {
				if err := s.Set(c, p("conc"), fmt.Appendf(nil, "k%d-%d", i, j), p("v")); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Go(func() {
		if err := kv.Effect(c, func(c context.Context) error { return s.Set(c, p("conc"), p("decisive"), p("v")) }); err != nil {
			errs <- err
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	highest := version(t, s, "conc", "decisive")
	for e, err := range s.Scan(ctx, p("conc"), kv.ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		highest = max(highest, e.Predicate.Version())
	}
	if r, ok := rec.Effect(); !ok || r != version(t, s, "conc", "decisive") {
		t.Fatalf("effect %d %v, want the decisive write's %d", r, ok, version(t, s, "conc", "decisive"))
	}
	if rec.Last() != highest {
		t.Fatalf("last %d, want the highest write's %d", rec.Last(), highest)
	}
}
