package staging_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/proto"

	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/staging"
	"graveler/graveler/staging/stagingpb"
	"graveler/keys"
	"graveler/kv"
)

// The suite runs against every kv.Store: each backend gets one store, and
// each test its own tokens on it.

func TestMemory(t *testing.T) {
	t.Parallel()
	s := kv.NewMemoryStore()
	t.Cleanup(func() { _ = s.Close() })
	runSuite(t, s)
}

func TestEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("embedded etcd")
	}
	t.Parallel()
	runSuite(t, etcdkvtest.NewStore(t))
}

type env struct {
	t     *testing.T
	ctx   context.Context
	store *countingStore
	m     *staging.Manager
	base  string
}

// token returns a token unique to this test (suffix distinguishes several).
func (e *env) token(suffix string) graveler.StagingToken {
	return graveler.StagingToken(e.base + suffix)
}

func (e *env) manager(cfg staging.Config) *staging.Manager { return staging.New(e.store, cfg) }

func val(s string) *graveler.Value {
	return &graveler.Value{Identity: []byte("id-" + s), Data: []byte("data-" + s)}
}

func (e *env) set(st graveler.StagingToken, key string, v *graveler.Value) {
	e.t.Helper()
	if err := e.m.Set(e.ctx, st, graveler.Key(key), v); err != nil {
		e.t.Fatalf("Set(%q): %v", key, err)
	}
}

// list reads a token's entries through m.
func (e *env) list(m *staging.Manager, st graveler.StagingToken) []*graveler.ValueRecord {
	e.t.Helper()
	it, err := m.List(e.ctx, st)
	if err != nil {
		e.t.Fatal(err)
	}
	defer it.Close()
	var out []*graveler.ValueRecord
	for it.Next() {
		out = append(out, it.Value())
	}
	if err := it.Err(); err != nil {
		e.t.Fatalf("List(%s): %v", st, err)
	}
	return out
}

func keysOf(recs []*graveler.ValueRecord) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Key)
	}
	return out
}

func sameValue(a, b *graveler.Value) bool {
	if a == nil || b == nil {
		return a == b
	}
	return bytes.Equal(a.Identity, b.Identity) && bytes.Equal(a.Data, b.Data)
}

func runSuite(t *testing.T, store kv.Store) {
	tests := []struct {
		name string
		fn   func(*env)
	}{
		{"SetGet", testSetGet},
		{"Overwrite", testOverwrite},
		{"SetBatch", testSetBatch},
		{"SetBatchValidation", testSetBatchValidation},
		{"DropKey", testDropKey},
		{"DropKeyUnderRanges", testDropKeyUnderRanges},
		{"DropByPrefix", testDropByPrefix},
		{"DropByPrefixChunks", testDropByPrefixChunks},
		{"Drop", testDrop},
		{"ListOrder", testListOrder},
		{"ListSeekGE", testListSeekGE},
		{"ListSeekGEModel", testListSeekGEModel},
		{"ListPages", testListPages},
		{"ListEmpty", testListEmpty},
		{"ListValuesStayValid", testListValuesStayValid},
		{"TokenIsolation", testTokenIsolation},
		{"InvalidInput", testInvalidInput},
		{"StoredRecords", testStoredRecords},
		{"ContextCanceled", testContextCanceled},
		{"Concurrent", testConcurrent},
		{"SetAndRead", testSetAndRead},
		{"SetAndReadShares", testSetAndReadShares},
		{"SetAndReadFailure", testSetAndReadFailure},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cs := &countingStore{Store: store}
			e := &env{t: t, ctx: t.Context(), store: cs, base: fmt.Sprintf("t%02d-", i)}
			e.m = staging.New(cs, staging.Config{})
			tc.fn(e)
		})
	}
}

func testSetGet(e *env) {
	t, st := e.t, e.token("x")
	e.set(st, "value", val("1"))
	e.set(st, "tomb", nil)
	v, err := e.m.Get(e.ctx, st, graveler.Key("value"))
	if err != nil || !sameValue(v, val("1")) {
		t.Errorf("Get(value) = %+v, %v", v, err)
	}
	v, err = e.m.Get(e.ctx, st, graveler.Key("tomb"))
	if err != nil || v != nil {
		t.Errorf("Get(tomb) = %+v, %v; want nil, nil", v, err)
	}
	_, err = e.m.Get(e.ctx, st, graveler.Key("missing"))
	if !errors.Is(err, graveler.ErrEntryNotFound) || !errors.Is(err, graveler.ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrEntryNotFound", err)
	}
	if err != nil && (!strings.Contains(err.Error(), "missing") || !strings.Contains(err.Error(), string(st)) || !strings.HasPrefix(err.Error(), "staging: ")) {
		t.Errorf("error %q should start with staging: and name key and token", err)
	}
	// A value without data.
	e.set(st, "nodata", &graveler.Value{Identity: []byte("i")})
	if v, err := e.m.Get(e.ctx, st, graveler.Key("nodata")); err != nil || string(v.Identity) != "i" || len(v.Data) != 0 {
		t.Errorf("Get(nodata) = %+v, %v", v, err)
	}
	// The largest valid value and key round-trip.
	big := &graveler.Value{Identity: bytes.Repeat([]byte{'i'}, graveler.MaxIdentityLen), Data: bytes.Repeat([]byte{0xff}, graveler.MaxValueDataLen)}
	bigKey := graveler.Key(bytes.Repeat([]byte{0xfe}, graveler.MaxKeyLen))
	if err := e.m.Set(e.ctx, st, bigKey, big); err != nil {
		t.Fatalf("Set(max sizes): %v", err)
	}
	if v, err := e.m.Get(e.ctx, st, bigKey); err != nil || !sameValue(v, big) {
		t.Errorf("Get(max sizes) = %v", err)
	}
}

func testOverwrite(e *env) {
	t, st := e.t, e.token("x")
	k := graveler.Key("k")
	for _, v := range []*graveler.Value{val("1"), val("2"), nil, val("3"), nil} {
		if err := e.m.Set(e.ctx, st, k, v); err != nil {
			t.Fatal(err)
		}
		got, err := e.m.Get(e.ctx, st, k)
		if err != nil || !sameValue(got, v) {
			t.Fatalf("after Set(%+v): Get = %+v, %v", v, got, err)
		}
	}
	if n := len(e.list(e.m, st)); n != 1 {
		t.Errorf("List has %d entries, want 1", n)
	}
}

func testSetBatch(e *env) {
	t, st := e.t, e.token("x")
	var recs []*graveler.ValueRecord
	want := map[string]*graveler.Value{}
	for i := range 300 {
		k := fmt.Sprintf("k%04d", i)
		var v *graveler.Value
		if i%3 != 0 {
			v = val(k)
		}
		recs = append(recs, &graveler.ValueRecord{Key: graveler.Key(k), Value: v})
		want[k] = v
	}
	rand.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	// Repeated keys: the last record wins, whatever the parallelism.
	recs = append(recs,
		&graveler.ValueRecord{Key: graveler.Key("dup"), Value: val("first")},
		&graveler.ValueRecord{Key: graveler.Key("k0000"), Value: val("again")},
		&graveler.ValueRecord{Key: graveler.Key("dup"), Value: nil},
		&graveler.ValueRecord{Key: graveler.Key("dup"), Value: val("last")},
	)
	want["dup"], want["k0000"] = val("last"), val("again")
	if err := e.m.SetBatch(e.ctx, st, recs); err != nil {
		t.Fatal(err)
	}
	got := e.list(e.m, st)
	if len(got) != len(want) {
		t.Fatalf("List has %d entries, want %d", len(got), len(want))
	}
	for _, r := range got {
		if !sameValue(r.Value, want[string(r.Key)]) {
			t.Errorf("%s = %+v, want %+v", r.Key, r.Value, want[string(r.Key)])
		}
	}
	if err := e.m.SetBatch(e.ctx, st, nil); err != nil {
		t.Errorf("empty batch: %v", err)
	}
	// Sequential writes (parallelism 1) behave the same.
	st1 := e.token("seq")
	if err := e.manager(staging.Config{WriteParallelism: 1}).SetBatch(e.ctx, st1, recs); err != nil {
		t.Fatal(err)
	}
	if v, err := e.m.Get(e.ctx, st1, graveler.Key("dup")); err != nil || !sameValue(v, val("last")) {
		t.Errorf("sequential batch: dup = %+v, %v", v, err)
	}
}

func testSetBatchValidation(e *env) {
	t := e.t
	good := func() []*graveler.ValueRecord {
		var recs []*graveler.ValueRecord
		for i := range 50 {
			recs = append(recs, &graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("k%02d", i)), Value: val("v")})
		}
		return recs
	}
	bad := []struct {
		name string
		rec  *graveler.ValueRecord
		want error
	}{
		{"nil record", nil, graveler.ErrInvalidArgument},
		{"empty key", &graveler.ValueRecord{Key: nil, Value: val("v")}, graveler.ErrInvalidKey},
		{"long key", &graveler.ValueRecord{Key: make(graveler.Key, graveler.MaxKeyLen+1), Value: val("v")}, graveler.ErrInvalidKey},
		{"no identity", &graveler.ValueRecord{Key: graveler.Key("x"), Value: &graveler.Value{Data: []byte("d")}}, graveler.ErrInvalidValue},
		{"data too large", &graveler.ValueRecord{Key: graveler.Key("x"), Value: &graveler.Value{Identity: []byte("i"), Data: make([]byte, graveler.MaxValueDataLen+1)}}, graveler.ErrValueTooLarge},
	}
	for i, b := range bad {
		st := e.token(fmt.Sprint(i))
		recs := good()
		recs[37] = b.rec
		err := e.m.SetBatch(e.ctx, st, recs)
		if !errors.Is(err, b.want) || !errors.Is(err, graveler.ErrInvalidArgument) {
			t.Errorf("%s: SetBatch = %v, want %v", b.name, err, b.want)
		}
		if err != nil && !strings.Contains(err.Error(), "record 37") {
			t.Errorf("%s: error %q does not name the record", b.name, err)
		}
		if got := e.list(e.m, st); len(got) != 0 {
			t.Errorf("%s: a failed validation wrote %d records", b.name, len(got))
		}
	}
}

func testDropKey(e *env) {
	t, st := e.t, e.token("x")
	e.set(st, "v", val("1"))
	e.set(st, "t", nil)
	e.set(st, "keep", val("2"))
	for _, k := range []string{"v", "t", "absent"} {
		if err := e.m.DropKey(e.ctx, st, graveler.Key(k)); err != nil {
			t.Fatalf("DropKey(%s): %v", k, err)
		}
		if _, err := e.m.Get(e.ctx, st, graveler.Key(k)); !errors.Is(err, graveler.ErrEntryNotFound) {
			t.Errorf("after DropKey(%s): Get = %v, want ErrEntryNotFound", k, err)
		}
	}
	if got := keysOf(e.list(e.m, st)); !slices.Equal(got, []string{"keep"}) {
		t.Errorf("List = %q", got)
	}
}

// testDropKeyUnderRanges: a key a range tombstone of the token covers is
// not dropped (ErrRangeInScope, nothing written: a reset record would let
// the tombstone show through); a reset range, or a tombstone of another
// prefix, does not stop it, and the ranges record reads the same after.
func testDropKeyUnderRanges(e *env) {
	t, st := e.t, e.token("x")
	e.set(st, "d/1", val("1"))
	e.set(st, "r/1", val("1"))
	e.set(st, "k", val("1"))
	if err := e.m.DeletePrefix(e.ctx, st, graveler.Key("d/")); err != nil {
		t.Fatal(err)
	}
	e.set(st, "d/2", val("2")) // after the tombstone: survives it
	if err := e.m.ResetPrefix(e.ctx, st, graveler.Key("r/")); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"d/1", "d/2"} {
		if err := e.m.DropKey(e.ctx, st, graveler.Key(k)); !errors.Is(err, graveler.ErrRangeInScope) {
			t.Fatalf("DropKey(%s) under a range tombstone: %v, want ErrRangeInScope", k, err)
		}
	}
	if v, err := e.m.Get(e.ctx, st, graveler.Key("d/2")); err != nil || !sameValue(v, val("2")) {
		t.Fatalf("d/2 after a refused drop: %+v, %v", v, err)
	}
	for _, k := range []string{"k", "r/1", "r/2"} {
		if err := e.m.DropKey(e.ctx, st, graveler.Key(k)); err != nil {
			t.Fatalf("DropKey(%s): %v", k, err)
		}
		if _, err := e.m.Get(e.ctx, st, graveler.Key(k)); !errors.Is(err, graveler.ErrEntryNotFound) {
			t.Errorf("after DropKey(%s): Get = %v, want ErrEntryNotFound", k, err)
		}
	}
	_, prefixes, err := e.m.ListRanged(e.ctx, st)
	if err != nil || len(prefixes) != 1 || string(prefixes[0]) != "d/" {
		t.Fatalf("range tombstones after the drops: %q, %v", prefixes, err)
	}
	if got := keysOf(e.list(e.m, st)); !slices.Equal(got, []string{"d/1", "d/2"}) {
		t.Errorf("List = %q, want the tombstone of d/1 and d/2", got)
	}
}

func testDropByPrefix(e *env) {
	t := e.t
	all := []string{
		"a", "a/", "a/1", "a/2", "a/\x00", "a/\xff", "a/\xff\xff", "a0", "a.", "a\xff", "b", "\x00", "\x00a",
		"\xff", "\xff\x00", "\xff\xff", "\xfe\xff", "\xff\xff\xff",
	}
	cases := []struct {
		prefix string
		keep   []string
	}{
		{"a/", []string{"a", "a0", "a.", "a\xff", "b", "\x00", "\x00a", "\xff", "\xff\x00", "\xff\xff", "\xfe\xff", "\xff\xff\xff"}},
		{"\xff", []string{"a", "a/", "a/1", "a/2", "a/\x00", "a/\xff", "a/\xff\xff", "a0", "a.", "a\xff", "b", "\x00", "\x00a", "\xfe\xff"}},
		{"\xff\xff", []string{"a", "a/", "a/1", "a/2", "a/\x00", "a/\xff", "a/\xff\xff", "a0", "a.", "a\xff", "b", "\x00", "\x00a", "\xff", "\xff\x00", "\xfe\xff"}},
		{"\x00", []string{"a", "a/", "a/1", "a/2", "a/\x00", "a/\xff", "a/\xff\xff", "a0", "a.", "a\xff", "b", "\xff", "\xff\x00", "\xff\xff", "\xfe\xff", "\xff\xff\xff"}},
		{"zzz", all},
		{"a/1", []string{"a", "a/", "a/2", "a/\x00", "a/\xff", "a/\xff\xff", "a0", "a.", "a\xff", "b", "\x00", "\x00a", "\xff", "\xff\x00", "\xff\xff", "\xfe\xff", "\xff\xff\xff"}},
		{"", nil},
	}
	for i, c := range cases {
		st := e.token(fmt.Sprint(i))
		var recs []*graveler.ValueRecord
		for j, k := range all {
			var v *graveler.Value
			if j%2 == 0 {
				v = val(k)
			}
			recs = append(recs, &graveler.ValueRecord{Key: graveler.Key(k), Value: v})
		}
		if err := e.m.SetBatch(e.ctx, st, recs); err != nil {
			t.Fatal(err)
		}
		if err := e.m.DropByPrefix(e.ctx, st, graveler.Key(c.prefix)); err != nil {
			t.Fatalf("DropByPrefix(%q): %v", c.prefix, err)
		}
		want := slices.Clone(c.keep)
		slices.Sort(want)
		if got := keysOf(e.list(e.m, st)); !slices.Equal(got, want) {
			t.Errorf("DropByPrefix(%q) left %q, want %q", c.prefix, got, want)
		}
	}
}

func testDropByPrefixChunks(e *env) {
	t, st := e.t, e.token("x")
	var recs []*graveler.ValueRecord
	for i := range 750 {
		recs = append(recs, &graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("p/%04d", i)), Value: val("v")})
	}
	for _, k := range []string{"p", "p.", "p0", "o/9999", "q"} {
		recs = append(recs, &graveler.ValueRecord{Key: graveler.Key(k), Value: val(k)})
	}
	if err := e.m.SetBatch(e.ctx, st, recs); err != nil {
		t.Fatal(err)
	}
	m := e.manager(staging.Config{ScanPageSize: 100, WriteParallelism: 4})
	e.store.reset()
	writesBefore := e.store.setReadWrites.Load()
	if err := m.DropByPrefix(e.ctx, st, graveler.Key("p/")); err != nil {
		t.Fatal(err)
	}
	if got := keysOf(e.list(e.m, st)); !slices.Equal(got, []string{"o/9999", "p", "p.", "p0", "q"}) {
		t.Errorf("left %q", got)
	}
	if e.store.maxLimit.Load() > 100 {
		t.Errorf("DropByPrefix scanned with limit %d, want <= 100", e.store.maxLimit.Load())
	}
	// One reset record per entry, none deleted (a deleted key would let
	// an abandoned write attempt land after the reset).
	if n, d := e.store.setReadWrites.Load()-writesBefore, e.store.deletes.Load(); n != 750 || d != 0 {
		t.Errorf("DropByPrefix wrote %d reset records and deleted %d keys, want 750 and 0", n, d)
	}
	// Again: the keys already reset are skipped, so nothing is written.
	writesBefore = e.store.setReadWrites.Load()
	if err := m.DropByPrefix(e.ctx, st, graveler.Key("p/")); err != nil {
		t.Fatal(err)
	}
	if n := e.store.setReadWrites.Load() - writesBefore; n != 0 {
		t.Errorf("DropByPrefix over reset keys wrote %d records, want 0", n)
	}
}

func testDrop(e *env) {
	t, st, other := e.t, e.token("x"), e.token("y")
	var recs []*graveler.ValueRecord
	for i := range 120 {
		var v *graveler.Value
		if i%2 == 0 {
			v = val("v")
		}
		recs = append(recs, &graveler.ValueRecord{Key: graveler.Key(fmt.Sprint(i)), Value: v})
	}
	for _, s := range []graveler.StagingToken{st, other} {
		if err := e.m.SetBatch(e.ctx, s, recs); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.m.Drop(e.ctx, st); err != nil {
		t.Fatal(err)
	}
	if got := e.list(e.m, st); len(got) != 0 {
		t.Errorf("after Drop: %d entries", len(got))
	}
	if _, err := e.m.Get(e.ctx, st, graveler.Key("0")); !errors.Is(err, graveler.ErrEntryNotFound) {
		t.Errorf("after Drop: Get = %v", err)
	}
	if got := e.list(e.m, other); len(got) != len(recs) {
		t.Errorf("Drop touched another token: %d entries left of %d", len(got), len(recs))
	}
	if err := e.m.Drop(e.ctx, st); err != nil {
		t.Errorf("Drop of an empty token: %v", err)
	}
	// The token is usable again.
	e.set(st, "again", val("1"))
	if got := keysOf(e.list(e.m, st)); !slices.Equal(got, []string{"again"}) {
		t.Errorf("after re-use: %q", got)
	}
}

// binaryKeys returns n distinct random binary keys, including edge bytes
// and keys that are prefixes of one another, plus the sorted copy.
func binaryKeys(n int) (unsorted, sorted []string) {
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[string]bool{}
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			unsorted = append(unsorted, k)
		}
	}
	for _, k := range []string{"\x00", "\x00\x00", "\xff", "\xff\xff", "\xff\x00", "a", "a\x00", "a\xff", "ab", "b"} {
		add(k)
	}
	for len(unsorted) < n {
		b := make([]byte, 1+r.IntN(6))
		for i := range b {
			switch r.IntN(4) {
			case 0:
				b[i] = 0
			case 1:
				b[i] = 0xff
			default:
				b[i] = byte(r.IntN(256))
			}
		}
		add(string(b))
	}
	sorted = slices.Clone(unsorted)
	slices.Sort(sorted) // Go string order is byte order
	return unsorted, sorted
}

func testListOrder(e *env) {
	t, st := e.t, e.token("x")
	unsorted, sorted := binaryKeys(400)
	var recs []*graveler.ValueRecord
	for i, k := range unsorted {
		var v *graveler.Value
		if i%4 != 1 {
			v = val(k)
		}
		recs = append(recs, &graveler.ValueRecord{Key: graveler.Key(k), Value: v})
	}
	if err := e.m.SetBatch(e.ctx, st, recs); err != nil {
		t.Fatal(err)
	}
	want := map[string]*graveler.Value{}
	for _, r := range recs {
		want[string(r.Key)] = r.Value
	}
	got := e.list(e.manager(staging.Config{ListFirstPageSize: 7, ScanPageSize: 50}), st)
	if gk := keysOf(got); !slices.Equal(gk, sorted) {
		t.Fatalf("List order:\n got %q\nwant %q", gk, sorted)
	}
	tombs := 0
	for _, r := range got {
		if !sameValue(r.Value, want[string(r.Key)]) {
			t.Errorf("%q = %+v, want %+v", r.Key, r.Value, want[string(r.Key)])
		}
		if r.IsTombstone() {
			tombs++
		}
	}
	if tombs != 100 {
		t.Errorf("%d tombstones listed, want 100", tombs)
	}
}

// next reads one entry, failing the test on error.
func next(t *testing.T, it graveler.ValueIterator) (string, bool) {
	t.Helper()
	if !it.Next() {
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		return "", false
	}
	return string(it.Value().Key), true
}

func testListSeekGE(e *env) {
	t, st := e.t, e.token("x")
	var recs []*graveler.ValueRecord
	for i := 0; i < 100; i += 2 {
		recs = append(recs, &graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("k%03d", i)), Value: val("v")})
	}
	if err := e.m.SetBatch(e.ctx, st, recs); err != nil {
		t.Fatal(err)
	}
	m := e.manager(staging.Config{ListFirstPageSize: 8, ScanPageSize: 16})
	it, err := m.List(e.ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	steps := []struct {
		seek string // "" = Next only
		want string // "" = end
	}{
		{"", "k000"},
		{"k004", "k004"}, // forward within the page
		{"", "k006"},
		{"k007", "k008"}, // missing key: the next one
		{"k050", "k050"}, // beyond the page
		{"k010", "k010"}, // backward
		{"", "k012"},
		{"k012", "k012"}, // the entry just returned
		{"k0", "k000"},   // a prefix of every key
		{"k098", "k098"}, // the last entry
		{"", ""},
		{"k099", ""}, // past the end
		{"z", ""},
		{"\x00", "k000"},
	}
	for i, s := range steps {
		if s.seek != "" {
			it.SeekGE(graveler.Key(s.seek))
			if it.Value() != nil {
				t.Errorf("step %d: Value after SeekGE = %q, want nil", i, it.Value().Key)
			}
		}
		got, _ := next(t, it)
		if got != s.want {
			t.Fatalf("step %d (seek %q): got %q, want %q", i, s.seek, got, s.want)
		}
	}
	// SeekGE(nil) restarts.
	it.SeekGE(nil)
	if got, _ := next(t, it); got != "k000" {
		t.Errorf("SeekGE(nil) then Next = %q", got)
	}
	// SeekGE before the first Next reads from the target.
	it2, _ := m.List(e.ctx, st)
	defer it2.Close()
	it2.SeekGE(graveler.Key("k091"))
	for _, w := range []string{"k092", "k094", "k096", "k098", ""} {
		if got, _ := next(t, it2); got != w {
			t.Fatalf("after SeekGE(k091): %q, want %q", got, w)
		}
	}
}

// testListSeekGEModel checks random Next/SeekGE sequences against a sorted
// slice, with tiny pages so that seeks land inside, at the edges of and
// beyond the fetched page.
func testListSeekGEModel(e *env) {
	t, st := e.t, e.token("x")
	unsorted, sorted := binaryKeys(120)
	var recs []*graveler.ValueRecord
	for _, k := range unsorted {
		recs = append(recs, &graveler.ValueRecord{Key: graveler.Key(k), Value: val(k)})
	}
	if err := e.m.SetBatch(e.ctx, st, recs); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, cfg := range []staging.Config{{ListFirstPageSize: 1, ScanPageSize: 1}, {ListFirstPageSize: 2, ScanPageSize: 9}, {}} {
		it, err := e.manager(cfg).List(e.ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		pos := 0 // index in sorted of the entry the next Next returns
		var log []string
		for step := range 400 {
			if r.IntN(3) == 0 {
				var k string
				switch r.IntN(3) {
				case 0:
					k = sorted[r.IntN(len(sorted))]
				case 1:
					k = sorted[r.IntN(len(sorted))] + "\x00"
				default:
					k = string([]byte{byte(r.IntN(256))})
				}
				it.SeekGE(graveler.Key(k))
				pos, _ = slices.BinarySearch(sorted, k)
				log = append(log, fmt.Sprintf("seek %q", k))
				continue
			}
			got, ok := next(t, it)
			log = append(log, "next")
			if pos >= len(sorted) {
				if ok {
					t.Fatalf("cfg %+v step %d: got %q past the end\n%s", cfg, step, got, strings.Join(log, "\n"))
				}
				continue
			}
			if !ok || got != sorted[pos] {
				t.Fatalf("cfg %+v step %d: got %q (%v), want %q\n%s", cfg, step, got, ok, sorted[pos], strings.Join(log, "\n"))
			}
			if !sameValue(it.Value().Value, val(got)) {
				t.Fatalf("value of %q = %+v", got, it.Value().Value)
			}
			pos++
		}
		it.Close()
	}
}

func testListPages(e *env) {
	t, st := e.t, e.token("x")
	const n = 2500
	var recs []*graveler.ValueRecord
	for i := range n {
		var v *graveler.Value
		if i%10 != 0 {
			v = val("v")
		}
		recs = append(recs, &graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("k%05d", i)), Value: v})
	}
	if err := e.m.SetBatch(e.ctx, st, recs); err != nil {
		t.Fatal(err)
	}

	// Reading a few entries costs one small page.
	e.store.reset()
	it, err := e.m.List(e.ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if e.store.scans.Load() != 0 {
		t.Error("List read before the first Next")
	}
	for i := range 10 {
		if got, _ := next(t, it); got != fmt.Sprintf("k%05d", i) {
			t.Fatalf("entry %d = %q", i, got)
		}
	}
	it.Close()
	if s, y, l := e.store.scans.Load(), e.store.yielded.Load(), e.store.maxLimit.Load(); s != 1 || y > staging.DefaultListFirstPageSize || l != staging.DefaultListFirstPageSize {
		t.Errorf("reading 10 entries: %d scans, %d entries read, limit %d; want 1 scan of %d", s, y, l, staging.DefaultListFirstPageSize)
	}

	// A full walk reads each entry once: a first page limited to its size,
	// then one scan that the following pages (growing, capped by
	// ScanPageSize) continue.
	e.store.reset()
	got := e.list(e.m, st)
	if len(got) != n {
		t.Fatalf("listed %d entries, want %d", len(got), n)
	}
	for i, r := range got {
		if string(r.Key) != fmt.Sprintf("k%05d", i) || r.IsTombstone() != (i%10 == 0) {
			t.Fatalf("entry %d = %q (tombstone %v)", i, r.Key, r.IsTombstone())
		}
	}
	if s, y, l := e.store.scans.Load(), e.store.yielded.Load(), e.store.maxLimit.Load(); s != 2 || y != n || l != staging.DefaultListFirstPageSize {
		t.Errorf("full walk: %d scans, %d entries read, max limit %d; want 2, %d, %d", s, y, l, n, staging.DefaultListFirstPageSize)
	}

	// Pages grow up to ScanPageSize: 64+128+256+512+1000 = 1960, then 540.
	var pages []int
	it, err = e.m.List(e.ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	for it.Next() {
		// Consecutive pages differ in size here, so a change is a new page.
		if l := staging.PageLenForTest(it); len(pages) == 0 || pages[len(pages)-1] != l {
			pages = append(pages, l)
		}
	}
	it.Close()
	if !slices.Equal(pages, []int{64, 128, 256, 512, 1000, 540}) {
		t.Errorf("page sizes %v, want 64, 128, 256, 512, 1000, 540", pages)
	}

	// A byte budget ends pages early (records here are at least 20 bytes).
	small := e.manager(staging.Config{ListPageBytes: 1000})
	it, err = small.List(e.ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	biggest, listed := 0, 0
	for it.Next() {
		listed++
		biggest = max(biggest, staging.PageLenForTest(it))
	}
	if err := it.Err(); err != nil || listed != n {
		t.Fatalf("listed %d entries with a byte budget: %v", listed, err)
	}
	it.Close()
	if biggest > 1000/20 {
		t.Errorf("byte budget of 1000: a page of %d entries", biggest)
	}
}

func testListEmpty(e *env) {
	t, st := e.t, e.token("x")
	it, err := e.m.List(e.ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if it.Next() || it.Err() != nil || it.Value() != nil {
		t.Errorf("empty token: Next true or Err %v", it.Err())
	}
	it.SeekGE(graveler.Key("a"))
	if it.Next() || it.Err() != nil {
		t.Errorf("empty token after SeekGE: Next true or Err %v", it.Err())
	}
	it.Close()
	it.Close() // twice is fine
	if it.Next() {
		t.Error("Next after Close")
	}
}

func testListValuesStayValid(e *env) {
	t, st := e.t, e.token("x")
	var recs []*graveler.ValueRecord
	for i := range 200 {
		k := fmt.Sprintf("k%03d", i)
		recs = append(recs, &graveler.ValueRecord{Key: graveler.Key(k), Value: val(k)})
	}
	if err := e.m.SetBatch(e.ctx, st, recs); err != nil {
		t.Fatal(err)
	}
	got := e.list(e.manager(staging.Config{ListFirstPageSize: 3, ScanPageSize: 10}), st)
	for _, r := range got {
		// Appending to a returned key or identity must not touch others.
		_ = append(r.Key, "XXXXXXXX"...)
		_ = append(r.Identity, "XXXXXXXX"...)
	}
	for i, r := range got {
		k := fmt.Sprintf("k%03d", i)
		if string(r.Key) != k || !sameValue(r.Value, val(k)) {
			t.Fatalf("record %d changed after iteration: %q %+v", i, r.Key, r.Value)
		}
	}
}

func testTokenIsolation(e *env) {
	t := e.t
	a, ab := e.token("a"), e.token("ab")
	for _, k := range []string{"k", "x"} {
		e.set(a, k, val("a"))
		e.set(ab, k, val("ab"))
	}
	e.set(ab, "only-ab", val("ab"))
	if got := keysOf(e.list(e.m, a)); !slices.Equal(got, []string{"k", "x"}) {
		t.Errorf("List(a) = %q", got)
	}
	if _, err := e.m.Get(e.ctx, a, graveler.Key("only-ab")); !errors.Is(err, graveler.ErrEntryNotFound) {
		t.Errorf("Get(a, only-ab) = %v", err)
	}
	if err := e.m.DropByPrefix(e.ctx, a, nil); err != nil {
		t.Fatal(err)
	}
	if got := keysOf(e.list(e.m, ab)); !slices.Equal(got, []string{"k", "only-ab", "x"}) {
		t.Errorf("DropByPrefix(a) touched ab: %q", got)
	}
	e.set(a, "k", val("a"))
	if err := e.m.Drop(e.ctx, a); err != nil {
		t.Fatal(err)
	}
	if v, err := e.m.Get(e.ctx, ab, graveler.Key("k")); err != nil || !sameValue(v, val("ab")) {
		t.Errorf("Drop(a) touched ab: %+v, %v", v, err)
	}
}

func testInvalidInput(e *env) {
	t, st := e.t, e.token("x")
	ctx := e.ctx
	e.set(st, "k", val("1"))
	for _, bad := range []graveler.StagingToken{"", "a/b", "..", ".", "a b", "tok\x00", graveler.StagingToken(strings.Repeat("t", keys.MaxNameLen+1))} {
		ops := map[string]func() error{
			"Get":          func() error { _, err := e.m.Get(ctx, bad, graveler.Key("k")); return err },
			"Set":          func() error { return e.m.Set(ctx, bad, graveler.Key("k"), val("1")) },
			"SetBatch":     func() error { return e.m.SetBatch(ctx, bad, []*graveler.ValueRecord{{Key: graveler.Key("k")}}) },
			"DropKey":      func() error { return e.m.DropKey(ctx, bad, graveler.Key("k")) },
			"DropByPrefix": func() error { return e.m.DropByPrefix(ctx, bad, graveler.Key("k")) },
			"Drop":         func() error { return e.m.Drop(ctx, bad) },
			"List":         func() error { _, err := e.m.List(ctx, bad); return err },
		}
		for name, op := range ops {
			err := op()
			if !errors.Is(err, staging.ErrInvalidStagingToken) || !errors.Is(err, graveler.ErrInvalidArgument) || !errors.Is(err, keys.ErrInvalid) {
				t.Errorf("%s(token %q) = %v, want ErrInvalidStagingToken", name, bad, err)
			}
		}
	}
	longKey := make(graveler.Key, graveler.MaxKeyLen+1)
	for _, key := range []graveler.Key{nil, {}, longKey} {
		ops := map[string]func() error{
			"Get":     func() error { _, err := e.m.Get(ctx, st, key); return err },
			"Set":     func() error { return e.m.Set(ctx, st, key, val("1")) },
			"Set nil": func() error { return e.m.Set(ctx, st, key, nil) },
			"DropKey": func() error { return e.m.DropKey(ctx, st, key) },
		}
		for name, op := range ops {
			if err := op(); !errors.Is(err, graveler.ErrInvalidKey) || !errors.Is(err, graveler.ErrInvalidArgument) {
				t.Errorf("%s(key of %d bytes) = %v, want ErrInvalidKey", name, len(key), err)
			}
		}
	}
	if err := e.m.Set(ctx, st, longKey, val("1")); err != nil && len(err.Error()) > 400 {
		t.Errorf("error for a long key is %d bytes long: %q", len(err.Error()), err)
	}
	if err := e.m.DropByPrefix(ctx, st, longKey); !errors.Is(err, graveler.ErrInvalidKey) {
		t.Errorf("DropByPrefix(long prefix) = %v", err)
	}
	for name, v := range map[string]*graveler.Value{
		"empty identity": {Data: []byte("d")},
		"long identity":  {Identity: make([]byte, graveler.MaxIdentityLen+1)},
		"long data":      {Identity: []byte("i"), Data: make([]byte, graveler.MaxValueDataLen+1)},
	} {
		err := e.m.Set(ctx, st, graveler.Key("k"), v)
		if !errors.Is(err, graveler.ErrInvalidArgument) || !errors.Is(err, graveler.ErrInvalidValue) && !errors.Is(err, graveler.ErrValueTooLarge) {
			t.Errorf("Set(%s) = %v", name, err)
		}
		if strings.HasPrefix(name, "long") && !errors.Is(err, graveler.ErrValueTooLarge) {
			t.Errorf("Set(%s) = %v, want ErrValueTooLarge", name, err)
		}
	}
	if v, err := e.m.Get(ctx, st, graveler.Key("k")); err != nil || !sameValue(v, val("1")) {
		t.Errorf("a refused write changed the entry: %+v, %v", v, err)
	}
}

// testStoredRecords writes raw records under a token's partition, as a
// newer release or a damaged store would.
func testStoredRecords(e *env) {
	t, st := e.t, e.token("x")
	p := keys.StagingPartition(string(st))
	newer, err := proto.Marshal(&stagingpb.Entry{FormatVersion: staging.FormatVersion + 1, Identity: []byte("i")})
	if err != nil {
		t.Fatal(err)
	}
	raw := map[string][]byte{"newer": newer, "corrupt": {0xff, 0xff, 0xff, 0xff}}
	for k, b := range raw {
		if err := e.store.Set(e.ctx, p, keys.Entry([]byte(k)), b); err != nil {
			t.Fatal(err)
		}
	}
	e.set(st, "a-good", val("1"))
	for k, want := range map[string]error{"newer": staging.ErrUnknownFormat, "corrupt": staging.ErrCorruptRecord} {
		_, err := e.m.Get(e.ctx, st, graveler.Key(k))
		if !errors.Is(err, want) || !errors.Is(err, graveler.ErrFailedPrecondition) {
			t.Errorf("Get(%s) = %v, want %v", k, err, want)
		}
	}
	it, err := e.m.List(e.ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	if got, _ := next(t, it); got != "a-good" {
		t.Fatalf("first entry %q", got)
	}
	if it.Next() || !errors.Is(it.Err(), staging.ErrCorruptRecord) {
		t.Errorf("List over a corrupt record: Err = %v", it.Err())
	}
	if it.Next() {
		t.Error("Next after an error")
	}
	it2, _ := e.m.List(e.ctx, st)
	defer it2.Close()
	it2.SeekGE(graveler.Key("d"))
	if it2.Next() || !errors.Is(it2.Err(), staging.ErrUnknownFormat) {
		t.Errorf("List over a newer record: Err = %v", it2.Err())
	}
	// Overwriting or dropping a bad record works.
	e.set(st, "corrupt", nil)
	if err := e.m.DropKey(e.ctx, st, graveler.Key("newer")); err != nil {
		t.Fatal(err)
	}
	if got := keysOf(e.list(e.m, st)); !slices.Equal(got, []string{"a-good", "corrupt"}) {
		t.Errorf("after repair: %q", got)
	}
}

func testContextCanceled(e *env) {
	t, st := e.t, e.token("x")
	e.set(st, "k", val("1"))
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	recs := []*graveler.ValueRecord{{Key: graveler.Key("a"), Value: val("a")}, {Key: graveler.Key("b")}}
	ops := map[string]func() error{
		"Get":          func() error { _, err := e.m.Get(ctx, st, graveler.Key("k")); return err },
		"Set":          func() error { return e.m.Set(ctx, st, graveler.Key("k"), val("2")) },
		"SetBatch":     func() error { return e.m.SetBatch(ctx, st, recs) },
		"DropKey":      func() error { return e.m.DropKey(ctx, st, graveler.Key("k")) },
		"DropByPrefix": func() error { return e.m.DropByPrefix(ctx, st, graveler.Key("k")) },
		"Drop":         func() error { return e.m.Drop(ctx, st) },
		"List": func() error {
			it, err := e.m.List(ctx, st)
			if err != nil {
				return err
			}
			defer it.Close()
			if it.Next() {
				return errors.New("Next returned an entry")
			}
			return it.Err()
		},
	}
	for name, op := range ops {
		if err := op(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a canceled context = %v", name, err)
		}
	}
	// An iterator whose context ends mid-walk stops with the context's error.
	var many []*graveler.ValueRecord
	for i := range 100 {
		many = append(many, &graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("m%03d", i)), Value: val("v")})
	}
	if err := e.m.SetBatch(e.ctx, st, many); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(e.ctx)
	defer cancel2()
	it, err := e.manager(staging.Config{ListFirstPageSize: 5, ScanPageSize: 5}).List(ctx2, st)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.Next() {
		if n++; n == 3 {
			cancel2()
		}
	}
	if !errors.Is(it.Err(), context.Canceled) || n > 5 {
		t.Errorf("after cancel mid-walk: %d entries, Err = %v", n, it.Err())
	}
}

func testConcurrent(e *env) {
	t, st := e.t, e.token("x")
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 20 {
				k := graveler.Key(fmt.Sprintf("w%d-%02d", w, i))
				if err := e.m.Set(e.ctx, st, k, val(string(k))); err != nil {
					t.Error(err)
					return
				}
				if _, err := e.m.Get(e.ctx, st, k); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 5 {
			it, err := e.m.List(e.ctx, st)
			if err != nil {
				t.Error(err)
				return
			}
			var prev []byte
			for it.Next() {
				if prev != nil && bytes.Compare(prev, it.Value().Key) >= 0 {
					t.Errorf("List out of order: %q after %q", it.Value().Key, prev)
				}
				prev = it.Value().Key
			}
			if err := it.Err(); err != nil {
				t.Error(err)
			}
			it.Close()
		}
	}()
	wg.Wait()
	if n := len(e.list(e.m, st)); n != 160 {
		t.Errorf("%d entries, want 160", n)
	}
}

// countingStore counts what the manager asks of the store.
type countingStore struct {
	kv.Store
	scans    atomic.Int64
	yielded  atomic.Int64
	maxLimit atomic.Int64
	deletes  atomic.Int64

	setReads      atomic.Int64
	setReadWrites atomic.Int64
	gate          atomic.Pointer[chan struct{}]
	failSetRead   atomic.Pointer[error]
}

func (s *countingStore) reset() {
	s.scans.Store(0)
	s.yielded.Store(0)
	s.maxLimit.Store(0)
	s.deletes.Store(0)
}

func (s *countingStore) Scan(ctx context.Context, partition []byte, opts kv.ScanOptions) iter.Seq2[kv.Entry, error] {
	s.scans.Add(1)
	for {
		cur := s.maxLimit.Load()
		if int64(opts.Limit) <= cur || s.maxLimit.CompareAndSwap(cur, int64(opts.Limit)) {
			break
		}
	}
	return func(yield func(kv.Entry, error) bool) {
		for e, err := range s.Store.Scan(ctx, partition, opts) {
			if err == nil {
				s.yielded.Add(1)
			}
			if !yield(e, err) {
				return
			}
		}
	}
}

func (s *countingStore) Delete(ctx context.Context, partition, key []byte) error {
	s.deletes.Add(1)
	return s.Store.Delete(ctx, partition, key)
}

// SetAndRead and SetAndReadUnless (which staged writes are sent with)
// count requests and writes, can hold requests at a gate (so that writers
// queue behind one in flight) and can fail them.
func (s *countingStore) SetAndRead(ctx context.Context, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, error) {
	if err := s.countSetRead(writes); err != nil {
		return nil, err
	}
	return kv.SetAndRead(ctx, s.Store, writes, reads)
}

func (s *countingStore) SetAndReadUnless(ctx context.Context, absent []kv.KeyRef, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, bool, error) {
	if err := s.countSetRead(writes); err != nil {
		return nil, false, err
	}
	return kv.SetAndReadUnless(ctx, s.Store, absent, writes, reads)
}

func (s *countingStore) countSetRead(writes []kv.Write) error {
	s.setReads.Add(1)
	s.setReadWrites.Add(int64(len(writes)))
	if g := s.gate.Load(); g != nil {
		<-*g
	}
	if err := s.failSetRead.Load(); err != nil {
		return *err
	}
	return nil
}

var (
	_ kv.CondWriter       = (*countingStore)(nil)
	_ kv.MultiGetter      = (*countingStore)(nil)
	_ kv.SetReader        = (*countingStore)(nil)
	_ kv.PartitionDropper = (*countingStore)(nil)
)

// The store's other abilities pass through, so the manager takes the
// paths it takes on etcd (an atomic guarded write, one read of many keys,
// a partition dropped in chunks), not kv's fallbacks for stores without
// them.

func (s *countingStore) SetIfWith(ctx context.Context, partition, key, value []byte, pred kv.Predicate, absent []kv.KeyRef, also []kv.Write) error {
	return kv.SetIfWith(ctx, s.Store, partition, key, value, pred, absent, also)
}

func (s *countingStore) DeleteIfWith(ctx context.Context, partition, key []byte, pred kv.Predicate, also []kv.Write) error {
	return kv.DeleteIfWith(ctx, s.Store, partition, key, pred, also)
}

func (s *countingStore) GetMany(ctx context.Context, reads []kv.KeyRef) ([]kv.Entry, error) {
	return kv.GetMany(ctx, s.Store, reads)
}

func (s *countingStore) DropPartition(ctx context.Context, partition []byte) (int64, error) {
	return kv.DropPartition(ctx, s.Store, partition)
}
