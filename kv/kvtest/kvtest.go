// Package kvtest holds the one conformance suite every kv.Store passes (Run),
// a fault-injecting Store wrapper (FaultStore) for crash-safety tests, and
// the pieces of deterministic interleaving tests: PauseStore holds a chosen
// operation, Interleave runs an operation against it in each Mode, and
// LateAckStore makes a write applied after its caller gave up answer as it
// would over the wire. It is imported only by tests.
//
// Concurrency: FaultStore, PauseStore and LateAckStore are as safe for
// concurrent use as the store they wrap (their own state is locked), and
// a PausePoint may be waited on and released from any goroutine: a held
// operation runs on one goroutine while the test works on another. Run,
// Interleave and PausePoint.Wait fail t, so they are called from the
// test's goroutine.
//
// Errors: the wrappers return the wrapped store's errors, and FaultStore
// its injected ones, each wrapping ErrInjected: kv.ErrUnavailable (not
// applied) or kv.ErrAmbiguous (applied or not, per FaultMode); after a
// FaultCrash every operation returns ErrCrashed. LateAckStore answers a
// write that applied after its context ended kv.ErrAmbiguous. Run,
// Interleave and PausePoint.Wait report through t.
package kvtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"graveler/kv"
)

// NewStore returns a fresh, empty store with kv.DefaultLimits; the suite
// closes it.
type NewStore func(t testing.TB) kv.Store

// Run runs the conformance suite against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	cases := []struct {
		name string
		fn   func(*testing.T, kv.Store)
	}{
		{"GetSetDelete", testGetSetDelete},
		{"SetIf", testSetIf},
		{"SetIfRace", testSetIfRace},
		{"ScanOrderAndStart", testScanOrder},
		{"ScanLimitAndEarlyStop", testScanLimit},
		{"ScanPredicates", testScanPredicates},
		{"DeleteIf", testDeleteIf},
		{"DeleteIfRecreateRace", testDeleteIfRace},
		{"PartitionIsolation", testPartitionIsolation},
		{"PartitionNamesWithSlash", testPartitionNamesWithSlash},
		{"BinaryKeys", testBinaryKeys},
		{"ScanWhileWriting", testScanWhileWriting},
		{"InvalidInput", testInvalidInput},
		{"Limits", testLimits},
		{"ContextCanceled", testContextCanceled},
		{"DropPartition", testDropPartition},
		{"SetAndRead", testSetAndRead},
		{"SetAndReadFence", testSetAndReadFence},
		{"GetMany", testGetMany},
		{"SetAndReadUnless", testSetAndReadUnless},
		{"SetIfWith", testSetIfWith},
		{"DeleteIfWith", testDeleteIfWith},
		{"CondWriteSealRace", testCondWriteSealRace},
		{"Revisions", testRevisions},
		{"RevisionsEffect", testRevisionsEffect},
		{"RevisionsConcurrent", testRevisionsConcurrent},
		{"Close", testClose},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t)
			defer s.Close()
			c.fn(t, s)
		})
	}
}

var ctx = context.Background()

func p(s string) []byte { return []byte(s) }

func mustSet(t testing.TB, s kv.Store, part, key, val string) {
	t.Helper()
	if err := s.Set(ctx, p(part), p(key), p(val)); err != nil {
		t.Fatalf("set %s/%s: %v", part, key, err)
	}
}

func mustGet(t testing.TB, s kv.Store, part, key string) (string, kv.Predicate) {
	t.Helper()
	v, pr, err := s.Get(ctx, p(part), p(key))
	if err != nil {
		t.Fatalf("get %s/%s: %v", part, key, err)
	}
	return string(v), pr
}

func scanKeys(t testing.TB, s kv.Store, part string, opts kv.ScanOptions) []string {
	t.Helper()
	var out []string
	for e, err := range s.Scan(ctx, p(part), opts) {
		if err != nil {
			t.Fatalf("scan %s: %v", part, err)
		}
		out = append(out, string(e.Key))
	}
	return out
}

func testGetSetDelete(t *testing.T, s kv.Store) {
	if _, _, err := s.Get(ctx, p("part"), p("k")); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("get missing: want ErrNotFound, got %v", err)
	}
	mustSet(t, s, "part", "k", "v1")
	if v, pr := mustGet(t, s, "part", "k"); v != "v1" || pr.IsAbsent() {
		t.Fatalf("got %q %v", v, pr)
	}
	mustSet(t, s, "part", "k", "v2")
	if v, _ := mustGet(t, s, "part", "k"); v != "v2" {
		t.Fatalf("overwrite: got %q", v)
	}
	// An empty value is a value, distinct from absence.
	mustSet(t, s, "part", "empty", "")
	if v, _ := mustGet(t, s, "part", "empty"); v != "" {
		t.Fatalf("empty value: got %q", v)
	}
	// Delete under test, on the suite's own key.
	if err := s.Delete(ctx, p("part"), p("k")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, p("part"), p("k")); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("after delete: want ErrNotFound, got %v", err)
	}
	// Delete under test, on the suite's own key.
	if err := s.Delete(ctx, p("part"), p("never")); err != nil {
		t.Fatalf("delete missing: %v", err)
	}
}

func testSetIf(t *testing.T, s kv.Store) {
	if err := s.SetIf(ctx, p("part"), p("k"), p("v1"), kv.Absent); err != nil {
		t.Fatalf("create if absent: %v", err)
	}
	if err := s.SetIf(ctx, p("part"), p("k"), p("x"), kv.Absent); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("absent on existing: want ErrPredicateFailed, got %v", err)
	}
	_, pr1 := mustGet(t, s, "part", "k")
	if err := s.SetIf(ctx, p("part"), p("k"), p("v2"), pr1); err != nil {
		t.Fatalf("matching predicate: %v", err)
	}
	if err := s.SetIf(ctx, p("part"), p("k"), p("v3"), pr1); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("stale predicate: want ErrPredicateFailed, got %v", err)
	}
	v, pr2 := mustGet(t, s, "part", "k")
	if v != "v2" || pr2 == pr1 {
		t.Fatalf("after stale SetIf: %q %v (was %v)", v, pr2, pr1)
	}
	// A blind Set changes the version too.
	mustSet(t, s, "part", "k", "v2")
	if err := s.SetIf(ctx, p("part"), p("k"), p("v4"), pr2); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("predicate after a Set of the same bytes: want ErrPredicateFailed, got %v", err)
	}
	// Deleted then recreated: the old predicate must not match.
	_, pr3 := mustGet(t, s, "part", "k")
	// Delete under test, on the suite's own key.
	if err := s.Delete(ctx, p("part"), p("k")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetIf(ctx, p("part"), p("k"), p("v5"), pr3); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("predicate of a deleted key: want ErrPredicateFailed, got %v", err)
	}
	if err := s.SetIf(ctx, p("part"), p("k"), p("v6"), kv.Absent); err != nil {
		t.Fatalf("absent after delete: %v", err)
	}
	// A predicate of one key never matches another.
	mustSet(t, s, "part", "other", "o")
	_, po := mustGet(t, s, "part", "other")
	if err := s.SetIf(ctx, p("part"), p("k"), p("v7"), po); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("another key's predicate: want ErrPredicateFailed, got %v", err)
	}
}

func testSetIfRace(t *testing.T, s kv.Store) {
	const workers, rounds = 16, 15
	mustSet(t, s, "race", "k", "start")
	for r := 0; r < rounds; r++ {
		_, pr := mustGet(t, s, "race", "k")
		var wins atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				err := s.SetIf(ctx, p("race"), p("k"), fmt.Appendf(nil, "r%d-w%d", r, w), pr)
				switch {
				case err == nil:
					wins.Add(1)
				case !errors.Is(err, kv.ErrPredicateFailed):
					t.Errorf("round %d worker %d: %v", r, w, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("round %d: %d winners, want exactly 1", r, n)
		}
	}
	// Absent-creates race too.
	var wins atomic.Int32
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s.SetIf(ctx, p("race"), p("new"), fmt.Appendf(nil, "w%d", w), kv.Absent) == nil {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("create race: %d winners", wins.Load())
	}
}

func testDeleteIf(t *testing.T, s kv.Store) {
	mustSet(t, s, "part", "k", "v1")
	_, pr := mustGet(t, s, "part", "k")
	if err := s.DeleteIf(ctx, p("part"), p("k"), pr); err != nil {
		t.Fatalf("at the version read: %v", err)
	}
	if _, _, err := s.Get(ctx, p("part"), p("k")); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("after DeleteIf: want ErrNotFound, got %v", err)
	}
	if err := s.DeleteIf(ctx, p("part"), p("k"), pr); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("missing key, version predicate: want ErrPredicateFailed, got %v", err)
	}
	if err := s.DeleteIf(ctx, p("part"), p("k"), kv.Absent); err != nil {
		t.Fatalf("missing key, Absent: %v", err)
	}
	if err := s.DeleteIf(ctx, p("never"), p("k"), kv.Absent); err != nil {
		t.Fatalf("empty partition, Absent: %v", err)
	}

	// Changed since read, even to the same bytes: nothing is deleted.
	mustSet(t, s, "part", "k", "v2")
	_, pr2 := mustGet(t, s, "part", "k")
	mustSet(t, s, "part", "k", "v2")
	if err := s.DeleteIf(ctx, p("part"), p("k"), pr2); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("stale predicate: want ErrPredicateFailed, got %v", err)
	}
	if v, _ := mustGet(t, s, "part", "k"); v != "v2" {
		t.Fatalf("after a failed DeleteIf: %q", v)
	}
	if err := s.DeleteIf(ctx, p("part"), p("k"), kv.Absent); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("existing key, Absent: want ErrPredicateFailed, got %v", err)
	}

	// Deleted and re-created: the old version never matches the new record.
	_, pr3 := mustGet(t, s, "part", "k")
	// Delete under test, on the suite's own key.
	if err := s.Delete(ctx, p("part"), p("k")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetIf(ctx, p("part"), p("k"), p("v3"), kv.Absent); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteIf(ctx, p("part"), p("k"), pr3); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("predicate of the record before a re-create: want ErrPredicateFailed, got %v", err)
	}
	if v, _ := mustGet(t, s, "part", "k"); v != "v3" {
		t.Fatalf("the re-created record was changed: %q", v)
	}

	// A predicate of one key never matches another.
	mustSet(t, s, "part", "other", "o")
	_, po := mustGet(t, s, "part", "other")
	if err := s.DeleteIf(ctx, p("part"), p("k"), po); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("another key's predicate: want ErrPredicateFailed, got %v", err)
	}

	// A scan's predicate is a version read.
	var pk kv.Predicate
	for e, err := range s.Scan(ctx, p("part"), kv.ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if string(e.Key) == "k" {
			pk = e.Predicate
		}
	}
	if err := s.DeleteIf(ctx, p("part"), p("k"), pk); err != nil {
		t.Fatalf("DeleteIf with a scan's predicate: %v", err)
	}
	if got := scanKeys(t, s, "part", kv.ScanOptions{}); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("left in the partition: %v", got)
	}
}

// testDeleteIfRace races a DeleteIf of a record read earlier
// against a delete and re-create of the same key: whoever wins, the
// re-created record survives.
func testDeleteIfRace(t *testing.T, s kv.Store) {
	const rounds = 40
	deleted := 0
	for r := range rounds {
		key := fmt.Sprintf("k%02d", r)
		mustSet(t, s, "race", key, "old")
		_, pr := mustGet(t, s, "race", key)
		var delErr, createErr error
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			delErr = s.DeleteIf(ctx, p("race"), p(key), pr)
		})
		wg.Go(func() {
			<-start
			// The rival on purpose: a delete and re-create racing the DeleteIf.
			if createErr = s.Delete(ctx, p("race"), p(key)); createErr == nil {
				createErr = s.SetIf(ctx, p("race"), p(key), p("new"), kv.Absent)
			}
		})
		close(start)
		wg.Wait()
		if createErr != nil {
			t.Fatalf("round %d: re-create: %v", r, createErr)
		}
		switch {
		case delErr == nil:
			deleted++
		case !errors.Is(delErr, kv.ErrPredicateFailed):
			t.Fatalf("round %d: DeleteIf: %v", r, delErr)
		}
		if v, _ := mustGet(t, s, "race", key); v != "new" {
			t.Fatalf("round %d: the re-created record reads %q", r, v)
		}
	}
	t.Logf("DeleteIf won %d of %d rounds", deleted, rounds)
}

// testPartitionNamesWithSlash: a partition whose name extends another's
// across a '/' (or any other byte) shares none of its keys, whatever the
// keys hold.
func testPartitionNamesWithSlash(t *testing.T, s kv.Store) {
	type rec struct{ part, key string }
	recs := []rec{
		{"x", "y/k"}, {"x/y", "k"}, {"x", "y"}, {"x/y", "y/k"},
		{"a", "b/k"}, {"a", "-b/k"}, {"a", ".b/k"}, {"a/b", "k"}, {"a-b", "k"}, {"a.b", "k"}, {"a-b", "b/k"},
	}
	val := func(r rec) string { return r.part + " " + r.key }
	for _, r := range recs {
		mustSet(t, s, r.part, r.key, val(r))
	}
	want := map[string][]string{}
	for _, r := range recs {
		want[r.part] = append(want[r.part], r.key)
	}
	check := func(when string) {
		t.Helper()
		for _, r := range recs {
			v, _, err := s.Get(ctx, p(r.part), p(r.key))
			if _, live := slices.BinarySearch(want[r.part], r.key); !live {
				if !errors.Is(err, kv.ErrNotFound) {
					t.Fatalf("%s: get %q in %q: %q %v, want ErrNotFound", when, r.key, r.part, v, err)
				}
				continue
			}
			if err != nil || string(v) != val(r) {
				t.Fatalf("%s: get %q in %q: %q %v, want %q", when, r.key, r.part, v, err, val(r))
			}
		}
		for part, keys := range want {
			got := scanKeys(t, s, part, kv.ScanOptions{})
			if !slices.Equal(got, keys) {
				t.Fatalf("%s: scan of %q: %q, want %q", when, part, got, keys)
			}
		}
	}
	for part := range want {
		slices.Sort(want[part])
	}
	check("written")

	// Delete under test, on the suite's own key.
	if err := s.Delete(ctx, p("x"), p("y/k")); err != nil {
		t.Fatal(err)
	}
	want["x"] = []string{"y"}
	check("after deleting y/k in x")

	for _, part := range []string{"x", "a"} {
		n, err := kv.DropPartition(ctx, s, p(part))
		if err != nil {
			t.Fatal(err)
		}
		if n != int64(len(want[part])) {
			t.Fatalf("dropping %q deleted %d keys, want %d", part, n, len(want[part]))
		}
		want[part] = nil
	}
	check("after dropping x and a")
}

func testScanOrder(t *testing.T, s kv.Store) {
	var keys []string
	for i := 0; i < 1200; i++ {
		keys = append(keys, fmt.Sprintf("k%05d", i))
	}
	shuffled := slices.Clone(keys)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for _, k := range shuffled {
		mustSet(t, s, "scan", k, "v-"+k)
	}
	got := scanKeys(t, s, "scan", kv.ScanOptions{})
	if !slices.Equal(got, keys) {
		t.Fatalf("full scan: %d keys, first %v", len(got), got[:min(5, len(got))])
	}
	got = scanKeys(t, s, "scan", kv.ScanOptions{Start: p("k01000")})
	if !slices.Equal(got, keys[1000:]) {
		t.Fatalf("scan from existing key: %d keys, first %v", len(got), got[:min(3, len(got))])
	}
	got = scanKeys(t, s, "scan", kv.ScanOptions{Start: p("k00999x")})
	if !slices.Equal(got, keys[1000:]) {
		t.Fatalf("scan from between keys: %d keys", len(got))
	}
	if got = scanKeys(t, s, "scan", kv.ScanOptions{Start: p("z")}); len(got) != 0 {
		t.Fatalf("scan past the end: %v", got)
	}
	if got = scanKeys(t, s, "nothing-here", kv.ScanOptions{}); len(got) != 0 {
		t.Fatalf("empty partition: %v", got)
	}
	for e, err := range s.Scan(ctx, p("scan"), kv.ScanOptions{Start: p("k00007"), Limit: 1}) {
		if err != nil || string(e.Value) != "v-k00007" {
			t.Fatalf("value: %q %v", e.Value, err)
		}
	}
}

func testScanLimit(t *testing.T, s kv.Store) {
	for i := 0; i < 50; i++ {
		mustSet(t, s, "lim", fmt.Sprintf("k%02d", i), "v")
	}
	if got := scanKeys(t, s, "lim", kv.ScanOptions{Limit: 7}); len(got) != 7 || got[6] != "k06" {
		t.Fatalf("limit 7: %v", got)
	}
	if got := scanKeys(t, s, "lim", kv.ScanOptions{Start: p("k45"), Limit: 10}); len(got) != 5 {
		t.Fatalf("limit past end: %v", got)
	}
	n := 0
	for _, err := range s.Scan(ctx, p("lim"), kv.ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if n == 3 {
			break
		}
	}
	// The store stays usable after a scan stopped early.
	mustSet(t, s, "lim", "after", "v")
	if v, _ := mustGet(t, s, "lim", "after"); v != "v" {
		t.Fatal("store unusable after early stop")
	}
}

func testScanPredicates(t *testing.T, s kv.Store) {
	mustSet(t, s, "sp", "a", "1")
	mustSet(t, s, "sp", "b", "2")
	var pa kv.Predicate
	for e, err := range s.Scan(ctx, p("sp"), kv.ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if string(e.Key) == "a" {
			pa = e.Predicate
		}
	}
	if err := s.SetIf(ctx, p("sp"), p("a"), p("1b"), pa); err != nil {
		t.Fatalf("SetIf with a scan's predicate: %v", err)
	}
}

func testPartitionIsolation(t *testing.T, s kv.Store) {
	parts := []string{"a", "ab", "a.b", "a-b", "a_b", "b", "x/y", "x/yz", "x/y.z"}
	for _, part := range parts {
		for i := 0; i < 3; i++ {
			mustSet(t, s, part, fmt.Sprintf("%s-k%d", part, i), part)
		}
	}
	for _, part := range parts {
		for e, err := range s.Scan(ctx, p(part), kv.ScanOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			if string(e.Value) != part {
				t.Fatalf("scan of %q returned %q from partition %q", part, e.Key, e.Value)
			}
		}
		if got := scanKeys(t, s, part, kv.ScanOptions{}); len(got) != 3 {
			t.Fatalf("partition %q: %v", part, got)
		}
	}
	// The same key in two partitions is two records.
	mustSet(t, s, "a", "same", "in-a")
	mustSet(t, s, "ab", "same", "in-ab")
	if v, _ := mustGet(t, s, "a", "same"); v != "in-a" {
		t.Fatalf("got %q", v)
	}
	// Delete under test, on the suite's own key.
	if err := s.Delete(ctx, p("ab"), p("same")); err != nil {
		t.Fatal(err)
	}
	if v, _ := mustGet(t, s, "a", "same"); v != "in-a" {
		t.Fatalf("delete crossed partitions: %q", v)
	}
}

func testBinaryKeys(t *testing.T, s kv.Store) {
	keys := [][]byte{{0x00}, {0x00, 0x00}, {0x00, 0xff}, {0x01}, []byte("/"), []byte("a/b"), {0x7f}, {0xfe, 0xff}, {0xff}, {0xff, 0x00}, {0xff, 0xff, 0xff}}
	for i := len(keys) - 1; i >= 0; i-- {
		if err := s.Set(ctx, p("bin"), keys[i], []byte{byte(i), 0x00, 0xff}); err != nil {
			t.Fatalf("set %x: %v", keys[i], err)
		}
	}
	// A neighbour whose name sorts right after the partition's must not leak in.
	mustSet(t, s, "bin0", "x", "other")
	mustSet(t, s, "bim", "x", "other")
	var got [][]byte
	for e, err := range s.Scan(ctx, p("bin"), kv.ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e.Key)
		if i := len(got) - 1; i < len(keys) && !bytes.Equal(e.Value, []byte{byte(i), 0x00, 0xff}) {
			t.Fatalf("value of %x: %x", e.Key, e.Value)
		}
	}
	if !slices.EqualFunc(got, keys, bytes.Equal) {
		t.Fatalf("binary order:\n got %x\nwant %x", got, keys)
	}
	v, _, err := s.Get(ctx, p("bin"), []byte{0xff})
	if err != nil || !bytes.Equal(v, []byte{8, 0x00, 0xff}) {
		t.Fatalf("get 0xff: %x %v", v, err)
	}
	got = got[:0]
	for e, err := range s.Scan(ctx, p("bin"), kv.ScanOptions{Start: []byte{0xff}}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e.Key)
	}
	if !slices.EqualFunc(got, keys[8:], bytes.Equal) {
		t.Fatalf("scan from 0xff: %x", got)
	}
}

func testScanWhileWriting(t *testing.T, s kv.Store) {
	const n = 3000
	for i := 0; i < n; i++ {
		mustSet(t, s, "sw", fmt.Sprintf("k%05d", i), "old")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// Overwrite existing keys and add new ones in between.
			_ = s.Set(ctx, p("sw"), fmt.Appendf(nil, "k%05d", (i*7)%n), p("new"))
			_ = s.Set(ctx, p("sw"), fmt.Appendf(nil, "k%05d-x%d", (i*13)%n, i), p("added"))
		}
	}()
	seen := map[string]bool{}
	var prev string
	for e, err := range s.Scan(ctx, p("sw"), kv.ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		k := string(e.Key)
		if k <= prev {
			t.Fatalf("out of order: %q after %q", k, prev)
		}
		prev = k
		if v := string(e.Value); v != "old" && v != "new" && v != "added" {
			t.Fatalf("value %q", v)
		}
		seen[k] = true
	}
	close(stop)
	wg.Wait()
	for i := 0; i < n; i++ {
		if k := fmt.Sprintf("k%05d", i); !seen[k] {
			t.Fatalf("key %s written before the scan and never deleted was not returned", k)
		}
	}
}

func testInvalidInput(t *testing.T, s kv.Store) {
	for _, part := range []string{"", "/a", "a/", "a//b", "a b", "a\x00", "a\xff", "ä"} {
		if err := s.Set(ctx, p(part), p("k"), p("v")); !errors.Is(err, kv.ErrInvalidPartition) {
			t.Errorf("set in partition %q: want ErrInvalidPartition, got %v", part, err)
		}
		if _, _, err := s.Get(ctx, p(part), p("k")); !errors.Is(err, kv.ErrInvalidPartition) {
			t.Errorf("get in partition %q: want ErrInvalidPartition, got %v", part, err)
		}
		if err := s.DeleteIf(ctx, p(part), p("k"), kv.Absent); !errors.Is(err, kv.ErrInvalidPartition) {
			t.Errorf("deleteif in partition %q: want ErrInvalidPartition, got %v", part, err)
		}
		for _, err := range s.Scan(ctx, p(part), kv.ScanOptions{}) {
			if !errors.Is(err, kv.ErrInvalidPartition) {
				t.Errorf("scan partition %q: want ErrInvalidPartition, got %v", part, err)
			}
		}
	}
	if err := s.Set(ctx, p("part"), nil, p("v")); !errors.Is(err, kv.ErrInvalidKey) {
		t.Errorf("empty key: want ErrInvalidKey, got %v", err)
	}
	if err := s.SetIf(ctx, p("part"), []byte{}, p("v"), kv.Absent); !errors.Is(err, kv.ErrInvalidKey) {
		t.Errorf("empty key SetIf: want ErrInvalidKey, got %v", err)
	}
	if _, _, err := s.Get(ctx, p("part"), nil); !errors.Is(err, kv.ErrInvalidKey) {
		t.Errorf("empty key Get: want ErrInvalidKey, got %v", err)
	}
	if err := s.DeleteIf(ctx, p("part"), nil, kv.NewPredicate(1)); !errors.Is(err, kv.ErrInvalidKey) {
		t.Errorf("empty key DeleteIf: want ErrInvalidKey, got %v", err)
	}
}

func testLimits(t *testing.T, s kv.Store) {
	l := kv.DefaultLimits
	bigKey := bytes.Repeat([]byte("k"), l.MaxKeySize)
	err := s.Set(ctx, p("part"), bigKey, p("v"))
	if !errors.Is(err, kv.ErrKeyTooLarge) {
		t.Fatalf("oversized key: want ErrKeyTooLarge, got %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprint(l.MaxKeySize)) {
		t.Fatalf("error does not name the limit: %s", msg)
	}
	if err := s.DeleteIf(ctx, p("part"), bigKey, kv.NewPredicate(1)); !errors.Is(err, kv.ErrKeyTooLarge) {
		t.Fatalf("oversized key DeleteIf: want ErrKeyTooLarge, got %v", err)
	}
	bigVal := make([]byte, l.MaxValueSize+1)
	err = s.Set(ctx, p("part"), p("k"), bigVal)
	if !errors.Is(err, kv.ErrValueTooLarge) {
		t.Fatalf("oversized value: want ErrValueTooLarge, got %v", err)
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprint(l.MaxValueSize+1)) || !strings.Contains(msg, fmt.Sprint(l.MaxValueSize)) {
		t.Fatalf("error does not name size and limit: %s", msg)
	}
	if err := s.SetIf(ctx, p("part"), p("k"), bigVal, kv.Absent); !errors.Is(err, kv.ErrValueTooLarge) {
		t.Fatalf("oversized value SetIf: %v", err)
	}
	if _, _, err := s.Get(ctx, p("part"), p("k")); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("a rejected write was applied: %v", err)
	}
	// The largest allowed value round-trips.
	maxVal := bytes.Repeat([]byte{0xab}, l.MaxValueSize)
	if err := s.Set(ctx, p("part"), p("max"), maxVal); err != nil {
		t.Fatalf("value at the limit: %v", err)
	}
	v, _, err := s.Get(ctx, p("part"), p("max"))
	if err != nil || !bytes.Equal(v, maxVal) {
		t.Fatalf("value at the limit did not round-trip: %d bytes, %v", len(v), err)
	}
}

func testContextCanceled(t *testing.T, s kv.Store) {
	mustSet(t, s, "part", "k", "v")
	c, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := s.Get(c, p("part"), p("k")); !errors.Is(err, context.Canceled) {
		t.Errorf("get: want context.Canceled, got %v", err)
	}
	if err := s.Set(c, p("part"), p("k2"), p("v")); !errors.Is(err, context.Canceled) {
		t.Errorf("set: want context.Canceled, got %v", err)
	}
	for _, err := range s.Scan(c, p("part"), kv.ScanOptions{}) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("scan: want context.Canceled, got %v", err)
		}
	}
	_, pr := mustGet(t, s, "part", "k")
	if err := s.DeleteIf(c, p("part"), p("k"), pr); !errors.Is(err, context.Canceled) {
		t.Errorf("deleteif: want context.Canceled, got %v", err)
	}
	if err := s.SetIf(c, p("part"), p("k"), p("v2"), pr); !errors.Is(err, context.Canceled) {
		t.Errorf("setif: want context.Canceled, got %v", err)
	}
	// A write whose caller had gone before it started is not applied.
	if v, pr2 := mustGet(t, s, "part", "k"); v != "v" || pr2 != pr {
		t.Errorf("a write with a cancelled context was applied: %q %v (was %v)", v, pr2, pr)
	}
}

func testDropPartition(t *testing.T, s kv.Store) {
	const n = 2500
	for i := 0; i < n; i++ {
		mustSet(t, s, "drop", fmt.Sprintf("k%05d", i), "v")
	}
	mustSet(t, s, "drop0", "keep", "v")
	mustSet(t, s, "dro", "keep", "v")
	got, err := kv.DropPartition(ctx, s, p("drop"))
	if err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Fatalf("dropped %d keys, want %d", got, n)
	}
	if left := scanKeys(t, s, "drop", kv.ScanOptions{}); len(left) != 0 {
		t.Fatalf("%d keys left", len(left))
	}
	for _, part := range []string{"drop0", "dro"} {
		if v, _ := mustGet(t, s, part, "keep"); v != "v" {
			t.Fatalf("neighbour %s damaged", part)
		}
	}
	if got, err := kv.DropPartition(ctx, s, p("drop")); err != nil || got != 0 {
		t.Fatalf("dropping an empty partition: %d %v", got, err)
	}
}

func testClose(t *testing.T, s kv.Store) {
	mustSet(t, s, "part", "k", "v")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, p("part"), p("k")); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("get after close: want ErrClosed, got %v", err)
	}
	if err := s.Set(ctx, p("part"), p("k"), p("v")); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("set after close: want ErrClosed, got %v", err)
	}
	if err := s.DeleteIf(ctx, p("part"), p("k"), kv.NewPredicate(1)); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("deleteif after close: want ErrClosed, got %v", err)
	}
}
