package staging_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/staging"
	"graveler/graveler/staging/stagingpb"
	"graveler/keys"
	"graveler/kv"
)

// Reset ranges (ResetPrefix), on every backend.

func TestResetRange(t *testing.T) {
	stores := []struct {
		name string
		new  func(t *testing.T) kv.Store
	}{
		{"memory", func(t *testing.T) kv.Store {
			s := kv.NewMemoryStore()
			t.Cleanup(func() { _ = s.Close() })
			return s
		}},
		{"etcd", func(t *testing.T) kv.Store { return etcdkvtest.NewStore(t) }},
	}
	tests := []struct {
		name string
		fn   func(*rangeEnv)
	}{
		{"HidesEarlierOnly", testResetHidesEarlierOnly},
		{"ReadAt", testResetReadAt},
		{"OlderTokensUntouched", testResetOlderTokensUntouched},
		{"EmptyPrefix", testResetEmptyPrefix},
		{"Limit", testResetLimit},
		{"ResetSubsumesResets", testResetSubsumesResets},
		{"DeleteSubsumesResets", testDeleteSubsumesResets},
		{"DeleteInsideReset", testDeleteInsideReset},
		{"RefusedByDeleteRange", testResetRefusedByDeleteRange},
		{"Sealed", testResetSealed},
		{"FormatVersions", testRangesFormatVersions},
		{"ReadsVersion1", testRangesReadsVersion1},
		{"RefusesNewerFormat", testRangesRefusesNewerFormat},
		{"Concurrent", testRangesConcurrent},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			store := s.new(t)
			for i, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					e := &rangeEnv{t: t, ctx: t.Context(), store: store, base: fmt.Sprintf("rr%02d-", i)}
					e.m = staging.New(store, staging.Config{})
					tc.fn(e)
				})
			}
		})
	}
}

type rangeEnv struct {
	t     *testing.T
	ctx   context.Context
	store kv.Store
	m     *staging.Manager
	base  string
}

func (e *rangeEnv) token(suffix string) graveler.StagingToken {
	return graveler.StagingToken(e.base + suffix)
}

func (e *rangeEnv) set(st graveler.StagingToken, key string, v *graveler.Value) {
	e.t.Helper()
	if err := e.m.Set(e.ctx, st, graveler.Key(key), v); err != nil {
		e.t.Fatalf("Set(%q): %v", key, err)
	}
}

func (e *rangeEnv) reset(st graveler.StagingToken, prefix string) {
	e.t.Helper()
	if err := e.m.ResetPrefix(e.ctx, st, graveler.Key(prefix)); err != nil {
		e.t.Fatalf("ResetPrefix(%q): %v", prefix, err)
	}
}

func (e *rangeEnv) deletePrefix(st graveler.StagingToken, prefix string) {
	e.t.Helper()
	if err := e.m.DeletePrefix(e.ctx, st, graveler.Key(prefix)); err != nil {
		e.t.Fatalf("DeletePrefix(%q): %v", prefix, err)
	}
}

// state is what Get says of key in st: "value:<data>", "tombstone" or
// "absent".
func (e *rangeEnv) state(st graveler.StagingToken, key string) string {
	e.t.Helper()
	v, err := e.m.Get(e.ctx, st, graveler.Key(key))
	switch {
	case errors.Is(err, graveler.ErrEntryNotFound):
		return "absent"
	case err != nil:
		e.t.Fatalf("Get(%q): %v", key, err)
	case v == nil:
		return "tombstone"
	}
	return "value:" + string(v.Data)
}

func (e *rangeEnv) wantStates(st graveler.StagingToken, want map[string]string) {
	e.t.Helper()
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range want {
			if !yield(k) {
				return
			}
		}
	}) {
		if got := e.state(st, k); got != want[k] {
			e.t.Errorf("Get(%q) = %s, want %s", k, got, want[k])
		}
	}
}

// listed is ListRanged as "key=value" / "key=tombstone" rows, and its
// prefixes.
func (e *rangeEnv) listed(st graveler.StagingToken) ([]string, []string) {
	e.t.Helper()
	it, prefixes, err := e.m.ListRanged(e.ctx, st)
	if err != nil {
		e.t.Fatal(err)
	}
	defer it.Close()
	var rows []string
	for it.Next() {
		r := it.Value()
		if r.Value == nil {
			rows = append(rows, string(r.Key)+"=tombstone")
		} else {
			rows = append(rows, string(r.Key)+"="+string(r.Value.Data))
		}
	}
	if err := it.Err(); err != nil {
		e.t.Fatal(err)
	}
	var ps []string
	for _, p := range prefixes {
		ps = append(ps, string(p))
	}
	return rows, ps
}

func (e *rangeEnv) wantList(st graveler.StagingToken, rows []string, prefixes []string) {
	e.t.Helper()
	gotRows, gotPrefixes := e.listed(st)
	if !slices.Equal(gotRows, rows) {
		e.t.Errorf("ListRanged rows = %q, want %q", gotRows, rows)
	}
	if !slices.Equal(gotPrefixes, prefixes) {
		e.t.Errorf("ListRanged prefixes = %q, want %q", gotPrefixes, prefixes)
	}
}

// record reads the token's ranges record as stored (nil: absent).
func (e *rangeEnv) record(st graveler.StagingToken) (*stagingpb.RangeTombstones, kv.Predicate) {
	e.t.Helper()
	data, pred, err := e.store.Get(e.ctx, keys.StagingPartition(string(st)), keys.StagingRanges())
	if errors.Is(err, kv.ErrNotFound) {
		return nil, pred
	}
	if err != nil {
		e.t.Fatal(err)
	}
	var m stagingpb.RangeTombstones
	if err := proto.Unmarshal(data, &m); err != nil {
		e.t.Fatal(err)
	}
	return &m, pred
}

// ranges describes the stored record as "prefix" (delete) and
// "prefix(reset)" items, in stored order.
func (e *rangeEnv) ranges(st graveler.StagingToken) (uint32, []string) {
	e.t.Helper()
	m, _ := e.record(st)
	if m == nil {
		return 0, nil
	}
	var out []string
	for _, r := range m.GetTombstones() {
		s := string(r.GetPrefix())
		if r.GetResetRange() {
			s += "(reset)"
		}
		out = append(out, s)
	}
	return m.GetFormatVersion(), out
}

func (e *rangeEnv) wantRanges(st graveler.StagingToken, version uint32, want ...string) {
	e.t.Helper()
	v, got := e.ranges(st)
	if v != version || !slices.Equal(got, want) {
		e.t.Errorf("ranges record: version %d %q, want version %d %q", v, got, version, want)
	}
}

// testResetHidesEarlierOnly: what the token staged under the prefix
// before the reset (values and tombstones) reads as never staged, in Get
// and in List; what it staged after, and what lies outside the prefix,
// stays; the reset is not a prefix ListRanged reports.
func testResetHidesEarlierOnly(e *rangeEnv) {
	st := e.token("a")
	e.set(st, "p/1", val("1"))
	e.set(st, "p/2", val("2"))
	e.set(st, "p/3", nil)
	e.set(st, "p", val("p"))
	e.set(st, "q/1", val("q"))
	e.reset(st, "p/")
	e.wantStates(st, map[string]string{"p/1": "absent", "p/2": "absent", "p/3": "absent", "p": "value:data-p", "q/1": "value:data-q"})
	e.wantList(st, []string{"p=data-p", "q/1=data-q"}, nil)

	e.set(st, "p/2", val("2b"))
	e.set(st, "p/4", nil)
	e.wantStates(st, map[string]string{"p/1": "absent", "p/2": "value:data-2b", "p/4": "tombstone"})
	e.wantList(st, []string{"p=data-p", "p/2=data-2b", "p/4=tombstone", "q/1=data-q"}, nil)

	// List's SeekGE into the hidden stretch lands past it.
	it, err := e.m.List(e.ctx, st)
	if err != nil {
		e.t.Fatal(err)
	}
	defer it.Close()
	it.SeekGE(graveler.Key("p/1"))
	if !it.Next() || string(it.Value().Key) != "p/2" {
		e.t.Fatalf("SeekGE(p/1) then Next = %v, want p/2", it.Value())
	}
}

// testResetReadAt: ReadAt returns an entry a reset range hides as a
// missing record, one a range tombstone deletes as a tombstone, and the
// rest as stored.
func testResetReadAt(e *rangeEnv) {
	st := e.token("a")
	e.set(st, "r/1", val("1"))
	e.set(st, "d/1", val("1"))
	e.set(st, "k", val("k"))
	e.reset(st, "r/")
	e.deletePrefix(st, "d/")
	e.set(st, "r/2", val("2"))
	var refs []kv.KeyRef
	names := []string{"r/1", "r/2", "d/1", "d/9", "k", "r/9"}
	for _, k := range names {
		ref, err := e.m.EntryRef(st, graveler.Key(k))
		if err != nil {
			e.t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	got, err := e.m.ReadAt(e.ctx, refs)
	if err != nil {
		e.t.Fatal(err)
	}
	want := []string{"absent", "value:data-2", "tombstone", "tombstone", "value:data-k", "absent"}
	for i, k := range names {
		s := "absent"
		if !got[i].Predicate.IsAbsent() {
			v, err := e.m.ParseEntry(st, graveler.Key(k), got[i])
			switch {
			case err != nil:
				e.t.Fatalf("ParseEntry(%q): %v", k, err)
			case v == nil:
				s = "tombstone"
			default:
				s = "value:" + string(v.Data)
			}
		}
		if s != want[i] {
			e.t.Errorf("ReadAt %q = %s, want %s", k, s, want[i])
		}
	}
}

// testResetOlderTokensUntouched: a reset range changes only its own
// token: an older token still stages its entries under the prefix, and
// no prefix is reported that a reader would apply to older tokens or to
// the head.
func testResetOlderTokensUntouched(e *rangeEnv) {
	older, newer := e.token("old"), e.token("new")
	e.set(older, "p/1", val("old"))
	e.set(older, "p/2", nil)
	e.set(newer, "p/1", val("new"))
	e.reset(newer, "p/")
	e.wantStates(older, map[string]string{"p/1": "value:data-old", "p/2": "tombstone"})
	e.wantStates(newer, map[string]string{"p/1": "absent", "p/2": "absent"})
	e.wantList(older, []string{"p/1=data-old", "p/2=tombstone"}, nil)
	e.wantList(newer, nil, nil)
}

// testResetEmptyPrefix: the empty prefix hides every entry staged before.
func testResetEmptyPrefix(e *rangeEnv) {
	st := e.token("a")
	e.set(st, "a", val("a"))
	e.set(st, "z/z", nil)
	e.reset(st, "")
	e.set(st, "b", val("b"))
	e.wantStates(st, map[string]string{"a": "absent", "z/z": "absent", "b": "value:data-b"})
	e.wantList(st, []string{"b=data-b"}, nil)
}

// testResetLimit: reset ranges and range tombstones share
// Config.MaxRangeTombstones; a range that subsumes others makes room.
func testResetLimit(e *rangeEnv) {
	m := staging.New(e.store, staging.Config{MaxRangeTombstones: 2})
	st := e.token("a")
	for _, p := range []string{"b/x/", "b/y/"} {
		if err := m.ResetPrefix(e.ctx, st, graveler.Key(p)); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := m.ResetPrefix(e.ctx, st, graveler.Key("c/")); !errors.Is(err, graveler.ErrTooManyRangeTombstones) {
		e.t.Fatalf("third reset range: %v, want ErrTooManyRangeTombstones", err)
	}
	if err := m.DeletePrefix(e.ctx, st, graveler.Key("c/")); !errors.Is(err, graveler.ErrTooManyRangeTombstones) {
		e.t.Fatalf("a delete over two reset ranges: %v, want ErrTooManyRangeTombstones", err)
	}
	e.wantRanges(st, 2, "b/x/(reset)", "b/y/(reset)")
	if err := m.ResetPrefix(e.ctx, st, graveler.Key("b/")); err != nil {
		e.t.Fatalf("a reset subsuming both: %v", err)
	}
	if err := m.DeletePrefix(e.ctx, st, graveler.Key("a/")); err != nil {
		e.t.Fatalf("a delete beside one reset range: %v", err)
	}
	if err := m.ResetPrefix(e.ctx, st, graveler.Key("c/")); !errors.Is(err, graveler.ErrTooManyRangeTombstones) {
		e.t.Fatalf("reset range past the limit: %v, want ErrTooManyRangeTombstones", err)
	}
	e.wantRanges(st, 2, "a/", "b/(reset)")
}

// testResetSubsumesResets: a reset range replaces the token's earlier
// reset ranges under its prefix, and hides what they hid and what was
// staged between them.
func testResetSubsumesResets(e *rangeEnv) {
	st := e.token("a")
	e.set(st, "p/a/1", val("1"))
	e.reset(st, "p/a/")
	e.set(st, "p/a/2", val("2"))
	e.set(st, "p/b/1", val("b"))
	e.reset(st, "p/c/")
	e.wantRanges(st, 2, "p/a/(reset)", "p/c/(reset)")
	e.reset(st, "p/")
	e.wantRanges(st, 2, "p/(reset)")
	e.set(st, "p/a/3", val("3"))
	e.wantStates(st, map[string]string{"p/a/1": "absent", "p/a/2": "absent", "p/b/1": "absent", "p/a/3": "value:data-3"})
	e.wantList(st, []string{"p/a/3=data-3"}, nil)
	// A narrower reset leaves a wider one in place.
	e.reset(st, "p/a/")
	e.wantRanges(st, 2, "p/(reset)", "p/a/(reset)")
	e.wantStates(st, map[string]string{"p/a/3": "absent"})
}

// testDeleteSubsumesResets: a range tombstone replaces the reset ranges
// under its prefix, deletes what they hid, and the record goes back to
// format version 1.
func testDeleteSubsumesResets(e *rangeEnv) {
	st := e.token("a")
	e.set(st, "p/a/1", val("1"))
	e.reset(st, "p/a/")
	e.set(st, "p/a/2", val("2"))
	e.reset(st, "q/")
	e.deletePrefix(st, "p/")
	e.wantRanges(st, 2, "p/", "q/(reset)")
	e.wantStates(st, map[string]string{"p/a/1": "tombstone", "p/a/2": "tombstone", "p/zz": "tombstone"})
	e.wantList(st, []string{"p/a/1=tombstone", "p/a/2=tombstone"}, []string{"p/"})
	e.deletePrefix(st, "")
	e.wantRanges(st, 1, "")
	e.wantList(st, []string{"p/a/1=tombstone", "p/a/2=tombstone"}, []string{""})
}

// testDeleteInsideReset: a range tombstone staged after a wider reset
// range deletes under its own prefix (also what the reset had hidden);
// the rest of the reset prefix stays hidden, and a key staged between the
// two survives outside the tombstone.
func testDeleteInsideReset(e *rangeEnv) {
	st := e.token("a")
	e.set(st, "p/a/1", val("a1"))
	e.set(st, "p/b/1", val("b1"))
	e.reset(st, "p/")
	e.set(st, "p/a/2", val("a2"))
	e.set(st, "p/b/2", val("b2"))
	e.deletePrefix(st, "p/a/")
	e.wantRanges(st, 2, "p/(reset)", "p/a/")
	e.wantStates(st, map[string]string{
		"p/a/1": "tombstone", "p/a/2": "tombstone", "p/a/9": "tombstone",
		"p/b/1": "absent", "p/b/2": "value:data-b2",
	})
	e.wantList(st, []string{"p/a/1=tombstone", "p/a/2=tombstone", "p/b/2=data-b2"}, []string{"p/a/"})
}

// testResetRefusedByDeleteRange: a reset range is refused, with nothing
// written, while a range tombstone of the token reaches into its prefix
// either way; a disjoint one does not stop it.
func testResetRefusedByDeleteRange(e *rangeEnv) {
	st := e.token("a")
	e.set(st, "p/a/1", val("1"))
	e.deletePrefix(st, "p/a/")
	before, pred := e.record(st)
	for _, p := range []string{"p/a/", "p/a/x/", "p/", ""} {
		err := e.m.ResetPrefix(e.ctx, st, graveler.Key(p))
		if !errors.Is(err, graveler.ErrRangeInScope) {
			e.t.Fatalf("ResetPrefix(%q) under a range tombstone of p/a/: %v, want ErrRangeInScope", p, err)
		}
	}
	after, pred2 := e.record(st)
	if pred != pred2 || !proto.Equal(before, after) {
		e.t.Fatalf("a refused reset changed the record: %v -> %v", before, after)
	}
	e.reset(st, "p/b/")
	e.wantRanges(st, 2, "p/a/", "p/b/(reset)")
	e.wantStates(st, map[string]string{"p/a/1": "tombstone"})
}

// testResetSealed: a retired token takes no reset range.
func testResetSealed(e *rangeEnv) {
	st := e.token("a")
	e.set(st, "p/1", val("1"))
	if err := e.store.Set(e.ctx, keys.StagingPartition(string(st)), keys.StagingSealed(), []byte{}); err != nil {
		e.t.Fatal(err)
	}
	if err := e.m.ResetPrefix(e.ctx, st, graveler.Key("p/")); !errors.Is(err, graveler.ErrStagingTokenSealed) {
		e.t.Fatalf("ResetPrefix in a sealed token: %v, want ErrStagingTokenSealed", err)
	}
	if m, _ := e.record(st); m != nil {
		e.t.Fatalf("a sealed token took a ranges record: %v", m)
	}
	e.wantStates(st, map[string]string{"p/1": "value:data-1"})
}

// testRangesFormatVersions: a record is written as format version 1 while
// it holds only range tombstones, so the previous release reads it, and
// as version 2 once it holds a reset range, which that release (reading
// 1..1) refuses instead of taking the reset for a delete.
func testRangesFormatVersions(e *rangeEnv) {
	if staging.RangesFormatVersion != 2 {
		e.t.Fatalf("RangesFormatVersion = %d, want 2", staging.RangesFormatVersion)
	}
	st := e.token("a")
	e.deletePrefix(st, "d/")
	e.wantRanges(st, 1, "d/")
	e.reset(st, "r/")
	e.wantRanges(st, 2, "d/", "r/(reset)")
	m, _ := e.record(st)
	if prev := uint32(1); m.GetFormatVersion() <= prev {
		e.t.Fatalf("a record with a reset range has format version %d, readable by a reader of 1..%d", m.GetFormatVersion(), prev)
	}
	e.deletePrefix(st, "r/")
	e.wantRanges(st, 1, "d/", "r/")
	for _, r := range func() []*stagingpb.RangeTombstone { m, _ := e.record(st); return m.GetTombstones() }() {
		if r.GetResetRange() {
			e.t.Fatalf("a version 1 record carries a reset range: %v", r)
		}
	}
}

// testRangesReadsVersion1: a version 1 record, as the previous release
// wrote it, reads as before: every range a tombstone, revision 0 meaning
// the record's own; a reset_range flag there is not version 1's and is
// not honoured.
func testRangesReadsVersion1(e *rangeEnv) {
	st := e.token("a")
	e.set(st, "p/1", val("1"))
	e.set(st, "q/1", val("1"))
	p := keys.StagingPartition(string(st))
	data, err := proto.Marshal(&stagingpb.RangeTombstones{FormatVersion: 1, Tombstones: []*stagingpb.RangeTombstone{
		{Prefix: []byte("p/")},
		{Prefix: []byte("q/"), ResetRange: true},
	}})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.store.Set(e.ctx, p, keys.StagingRanges(), data); err != nil {
		e.t.Fatal(err)
	}
	e.set(st, "p/2", val("2"))
	e.wantStates(st, map[string]string{"p/1": "tombstone", "q/1": "tombstone", "p/2": "value:data-2", "q/9": "tombstone"})
	e.wantList(st, []string{"p/1=tombstone", "p/2=data-2", "q/1=tombstone"}, []string{"p/", "q/"})
	// A reset over it is refused (its ranges are deletes); one beside it
	// rewrites the record as version 2, with the old ranges kept.
	if err := e.m.ResetPrefix(e.ctx, st, graveler.Key("q/")); !errors.Is(err, graveler.ErrRangeInScope) {
		e.t.Fatalf("reset over a version 1 tombstone: %v, want ErrRangeInScope", err)
	}
	e.reset(st, "r/")
	e.wantRanges(st, 2, "p/", "q/", "r/(reset)")
	e.wantStates(st, map[string]string{"p/1": "tombstone", "p/2": "value:data-2"})
}

// testRangesRefusesNewerFormat: a record newer than this build reads is
// refused by every reader and writer of it.
func testRangesRefusesNewerFormat(e *rangeEnv) {
	st := e.token("a")
	e.set(st, "p/1", val("1"))
	data, err := proto.Marshal(&stagingpb.RangeTombstones{FormatVersion: staging.RangesFormatVersion + 1})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.store.Set(e.ctx, keys.StagingPartition(string(st)), keys.StagingRanges(), data); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.m.Get(e.ctx, st, graveler.Key("p/1")); !errors.Is(err, staging.ErrUnknownFormat) {
		e.t.Errorf("Get: %v, want ErrUnknownFormat", err)
	}
	if _, _, err := e.m.ListRanged(e.ctx, st); !errors.Is(err, staging.ErrUnknownFormat) {
		e.t.Errorf("ListRanged: %v, want ErrUnknownFormat", err)
	}
	if err := e.m.ResetPrefix(e.ctx, st, graveler.Key("p/")); !errors.Is(err, staging.ErrUnknownFormat) {
		e.t.Errorf("ResetPrefix: %v, want ErrUnknownFormat", err)
	}
	if err := e.m.DeletePrefix(e.ctx, st, graveler.Key("p/")); !errors.Is(err, staging.ErrUnknownFormat) {
		e.t.Errorf("DeletePrefix: %v, want ErrUnknownFormat", err)
	}
}

// testRangesConcurrent: concurrent reset ranges and range tombstones of
// one token all land (each compare-and-swap is retried, none is lost).
func testRangesConcurrent(e *rangeEnv) {
	st := e.token("a")
	const n = 12
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			p := graveler.Key(fmt.Sprintf("k%02d/", i))
			if i%2 == 0 {
				errs[i] = e.m.ResetPrefix(e.ctx, st, p)
			} else {
				errs[i] = e.m.DeletePrefix(e.ctx, st, p)
			}
		})
	}
	wg.Wait()
	var want []string
	for i := range n {
		if errs[i] != nil {
			e.t.Fatalf("range %d: %v", i, errs[i])
		}
		s := fmt.Sprintf("k%02d/", i)
		if i%2 == 0 {
			s += "(reset)"
		}
		want = append(want, s)
	}
	e.wantRanges(st, 2, want...)
}

// BenchmarkResetPrefix discards every entry a token stages under a prefix
// on an embedded etcd, as a reset of the prefix does with no commit in
// flight: key by key (DropByPrefix, before) and by one reset range
// (ResetPrefix, after). Each iteration stages n keys into a fresh token
// first, outside the timer.
//
//	go test ./graveler/staging -run '^$' -bench ResetPrefix -benchtime 5x
func BenchmarkResetPrefix(b *testing.B) {
	store := etcdkvtest.NewStore(b)
	m := staging.New(store, staging.Config{})
	ctx := b.Context()
	v := &graveler.Value{Identity: make([]byte, 16), Data: make([]byte, 64)}
	tokens := 0
	for _, n := range []int{1000, 10000} {
		recs := make([]*graveler.ValueRecord, n)
		for i := range recs {
			recs[i] = &graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("p/%08d", i)), Value: v}
		}
		for _, mode := range []struct {
			name  string
			reset func(ctx context.Context, st graveler.StagingToken, prefix graveler.Key) error
		}{{"drop", m.DropByPrefix}, {"reset-range", m.ResetPrefix}} {
			b.Run(fmt.Sprintf("%s/keys=%d", mode.name, n), func(b *testing.B) {
				for range b.N {
					b.StopTimer()
					tokens++
					st := graveler.StagingToken(fmt.Sprintf("bench-reset-%d", tokens))
					if err := m.SetBatch(ctx, st, recs); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					if err := mode.reset(ctx, st, graveler.Key("p/")); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if _, err := m.Get(ctx, st, recs[n/2].Key); !errors.Is(err, graveler.ErrEntryNotFound) {
						b.Fatalf("after the reset: %v", err)
					}
					if err := m.Drop(ctx, st); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			})
		}
	}
}
