package kvtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"graveler/kv"
)

func ref(part, key string) kv.KeyRef { return kv.KeyRef{Partition: p(part), Key: p(key)} }

func wr(part, key, val string) kv.Write {
	return kv.Write{Partition: p(part), Key: p(key), Value: p(val)}
}

// mustMissing fails unless part/key does not exist.
func mustMissing(t testing.TB, s kv.Store, what, part, key string) {
	t.Helper()
	if v, _, err := s.Get(ctx, p(part), p(key)); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("%s: %s/%s is %q (%v), want it missing", what, part, key, v, err)
	}
}

// wantEntry checks one read of a conditional write against the key as a
// Get reports it now.
func wantEntry(t testing.TB, s kv.Store, what string, e kv.Entry, r kv.KeyRef) {
	t.Helper()
	if string(e.Key) != string(r.Key) {
		t.Fatalf("%s: read of %q came back as %q", what, r.Key, e.Key)
	}
	v, pr, err := s.Get(ctx, r.Partition, r.Key)
	switch {
	case errors.Is(err, kv.ErrNotFound):
		if e.Value != nil || !e.Predicate.IsAbsent() {
			t.Fatalf("%s: read of missing %s/%s: %q %v", what, r.Partition, r.Key, e.Value, e.Predicate)
		}
	case err != nil:
		t.Fatal(err)
	case string(e.Value) != string(v) || e.Predicate != pr:
		t.Fatalf("%s: read of %s/%s: %q %v, a get says %q %v", what, r.Partition, r.Key, e.Value, e.Predicate, v, pr)
	}
}

// testSetAndReadUnless checks kv.SetAndReadUnless, through the store's
// CondWriter when it has one and through kv's fallback otherwise.
func testSetAndReadUnless(t *testing.T, s kv.Store) {
	marker := ref("tok", "sealed")
	mustSet(t, s, "meta", "branch", "b1")
	mustSet(t, s, "tok", "old", "o1")
	reads := []kv.KeyRef{ref("tok", "k"), ref("meta", "branch"), marker, ref("tok", "old")}

	// Every absent key missing: applied, reads after the writes.
	c, rec := kv.WithRevisions(ctx)
	got, applied, err := kv.SetAndReadUnless(c, s, []kv.KeyRef{marker, ref("elsewhere", "none")}, []kv.Write{wr("tok", "k", "v1"), wr("tok", "old", "o2")}, reads)
	if err != nil || !applied {
		t.Fatalf("absent keys missing: applied %v, %v", applied, err)
	}
	if len(got) != len(reads) {
		t.Fatalf("%d results for %d reads", len(got), len(reads))
	}
	if string(got[0].Value) != "v1" || string(got[1].Value) != "b1" || got[2].Value != nil || string(got[3].Value) != "o2" {
		t.Fatalf("reads of an applied call: %+v", got)
	}
	for i, r := range reads {
		wantEntry(t, s, "applied", got[i], r)
	}
	if want := max(version(t, s, "tok", "k"), version(t, s, "tok", "old")); rec.Last() != want {
		t.Fatalf("applied: noted revision %d, want the writes' %d", rec.Last(), want)
	}

	// An absent key present: nothing written, the reads still returned.
	mustSet(t, s, "tok", "sealed", "x")
	_, kPred := mustGet(t, s, "tok", "k")
	c, rec = kv.WithRevisions(ctx)
	got, applied, err = kv.SetAndReadUnless(c, s, []kv.KeyRef{ref("elsewhere", "none"), marker}, []kv.Write{wr("tok", "k", "v2"), wr("tok", "new", "n")}, reads)
	if err != nil || applied {
		t.Fatalf("an absent key present: applied %v, %v", applied, err)
	}
	if len(got) != len(reads) || string(got[0].Value) != "v1" || got[0].Predicate != kPred || string(got[2].Value) != "x" || string(got[3].Value) != "o2" {
		t.Fatalf("reads of a call that did not apply: %+v", got)
	}
	for i, r := range reads {
		wantEntry(t, s, "not applied", got[i], r)
	}
	if v, pr := mustGet(t, s, "tok", "k"); v != "v1" || pr != kPred {
		t.Fatalf("a call that did not apply changed k: %q %v", v, pr)
	}
	mustMissing(t, s, "a call that did not apply", "tok", "new")
	if rec.Last() != 0 {
		t.Fatalf("a call that did not apply noted revision %d", rec.Last())
	}
	if got, applied, err := kv.SetAndReadUnless(ctx, s, []kv.KeyRef{marker}, one(p("tok"), p("new"), p("n")), nil); err != nil || applied || len(got) != 0 {
		t.Fatalf("not applied, no reads: %v %v %v", got, applied, err)
	}
	mustMissing(t, s, "a call without reads that did not apply", "tok", "new")

	// No absent key: SetAndRead.
	got, applied, err = kv.SetAndReadUnless(ctx, s, nil, one(p("tok"), p("k"), p("v3")), reads[:1])
	if err != nil || !applied || string(got[0].Value) != "v3" {
		t.Fatalf("no absent key: %+v %v %v", got, applied, err)
	}

	// Limits: absent keys count as operations; refused before anything is
	// written.
	var lots []kv.Write
	var lotReads, lotAbsent []kv.KeyRef
	for i := range kv.MaxSetAndReadOps {
		lots = append(lots, kv.Write{Partition: p("lots"), Key: fmt.Appendf(nil, "w%03d", i), Value: p("v")})
		lotReads = append(lotReads, kv.KeyRef{Partition: p("lots"), Key: fmt.Appendf(nil, "w%03d", i)})
		lotAbsent = append(lotAbsent, kv.KeyRef{Partition: p("lots"), Key: fmt.Appendf(nil, "none%03d", i)})
	}
	third := kv.MaxSetAndReadOps / 3
	if _, _, err := kv.SetAndReadUnless(ctx, s, lotAbsent[:third+1], lots[:third], lotReads[:kv.MaxSetAndReadOps-2*third]); !errors.Is(err, kv.ErrTooManyOps) {
		t.Fatalf("%d operations: want ErrTooManyOps, got %v", kv.MaxSetAndReadOps+1, err)
	}
	mustMissing(t, s, "too many operations", "lots", "w000")
	got, applied, err = kv.SetAndReadUnless(ctx, s, lotAbsent[:third], lots[:third], lotReads[:kv.MaxSetAndReadOps-2*third])
	if err != nil || !applied || string(got[third-1].Value) != "v" || got[third].Value != nil {
		t.Fatalf("%d operations: applied %v, %v", kv.MaxSetAndReadOps, applied, err)
	}
	dup := []kv.Write{wr("tok", "d", "1"), wr("tok", "d", "2")}
	if _, _, err := kv.SetAndReadUnless(ctx, s, []kv.KeyRef{ref("tok", "none")}, dup, nil); !errors.Is(err, kv.ErrInvalidKey) {
		t.Fatalf("a key written twice: want ErrInvalidKey, got %v", err)
	}
	if _, _, err := kv.SetAndReadUnless(ctx, s, []kv.KeyRef{ref("tok", "none")}, nil, reads); !errors.Is(err, kv.ErrInvalidKey) {
		t.Fatalf("no write: want ErrInvalidKey, got %v", err)
	}
	if _, _, err := kv.SetAndReadUnless(ctx, s, []kv.KeyRef{{Partition: p("tok"), Key: nil}}, one(p("tok"), p("d"), p("1")), nil); !errors.Is(err, kv.ErrInvalidKey) {
		t.Fatalf("empty absent key: want ErrInvalidKey, got %v", err)
	}
	if _, _, err := kv.SetAndReadUnless(ctx, s, []kv.KeyRef{ref("bad/", "k")}, one(p("tok"), p("d"), p("1")), nil); !errors.Is(err, kv.ErrInvalidPartition) {
		t.Fatalf("bad absent partition: want ErrInvalidPartition, got %v", err)
	}
	mustMissing(t, s, "refused calls", "tok", "d")
	cc, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := kv.SetAndReadUnless(cc, s, []kv.KeyRef{ref("tok", "none")}, one(p("tok"), p("d"), p("1")), reads); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: want context.Canceled, got %v", err)
	}
	mustMissing(t, s, "a canceled call", "tok", "d")
}

// testSetIfWith checks kv.SetIfWith, through the store's CondWriter when
// it has one and through kv's fallback otherwise.
func testSetIfWith(t *testing.T, s kv.Store) {
	marker := ref("tok", "sealed")
	also := []kv.Write{wr("tok", "a", "1"), wr("other", "b", "2")}

	// kv.Absent creates; also written; one revision noted, the last.
	c, rec := kv.WithRevisions(ctx)
	if err := kv.SetIfWith(c, s, p("meta"), p("branch"), p("b1"), kv.Absent, []kv.KeyRef{marker}, also); err != nil {
		t.Fatalf("create: %v", err)
	}
	if v, _ := mustGet(t, s, "meta", "branch"); v != "b1" {
		t.Fatalf("create: branch %q", v)
	}
	for _, w := range also {
		if v, _ := mustGet(t, s, string(w.Partition), string(w.Key)); v != string(w.Value) {
			t.Fatalf("create: %s/%s is %q", w.Partition, w.Key, v)
		}
	}
	if want := max(version(t, s, "meta", "branch"), version(t, s, "tok", "a"), version(t, s, "other", "b")); rec.Last() != want {
		t.Fatalf("create: noted revision %d, want %d", rec.Last(), want)
	}

	// pred fails: nothing of also written.
	_, pr := mustGet(t, s, "meta", "branch")
	c, rec = kv.WithRevisions(ctx)
	if err := kv.SetIfWith(c, s, p("meta"), p("branch"), p("x"), kv.Absent, nil, one(p("tok"), p("c"), p("3"))); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("absent on existing: want ErrPredicateFailed, got %v", err)
	}
	mustSet(t, s, "meta", "branch", "b2")
	_, cur := mustGet(t, s, "meta", "branch")
	if err := kv.SetIfWith(c, s, p("meta"), p("branch"), p("x"), pr, []kv.KeyRef{ref("tok", "none")}, one(p("tok"), p("c"), p("3"))); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("stale predicate: want ErrPredicateFailed, got %v", err)
	}
	mustMissing(t, s, "failed predicate", "tok", "c")

	// An absent key present: nothing written.
	mustSet(t, s, "tok", "sealed", "x")
	if err := kv.SetIfWith(c, s, p("meta"), p("branch"), p("b3"), cur, []kv.KeyRef{ref("tok", "none"), marker}, one(p("tok"), p("c"), p("3"))); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("absent key present: want ErrPredicateFailed, got %v", err)
	}
	if v, pr := mustGet(t, s, "meta", "branch"); v != "b2" || pr != cur {
		t.Fatalf("absent key present: the branch became %q %v", v, pr)
	}
	mustMissing(t, s, "absent key present", "tok", "c")
	if rec.Last() != 0 {
		t.Fatalf("writes that failed noted revision %d", rec.Last())
	}

	// pred holds and absent missing: applied; nil absent and also too.
	c, rec = kv.WithRevisions(ctx)
	if err := kv.SetIfWith(c, s, p("meta"), p("branch"), p("b3"), cur, []kv.KeyRef{ref("tok2", "sealed")}, []kv.Write{wr("tok2", "sealed", "s"), wr("tok", "c", "3")}); err != nil {
		t.Fatalf("predicate holds: %v", err)
	}
	if v, _ := mustGet(t, s, "meta", "branch"); v != "b3" {
		t.Fatalf("predicate holds: branch %q", v)
	}
	if v, _ := mustGet(t, s, "tok2", "sealed"); v != "s" {
		t.Fatalf("predicate holds: also %q", v)
	}
	if want := max(version(t, s, "meta", "branch"), version(t, s, "tok2", "sealed"), version(t, s, "tok", "c")); rec.Last() != want {
		t.Fatalf("predicate holds: noted revision %d, want %d", rec.Last(), want)
	}
	_, cur = mustGet(t, s, "meta", "branch")
	if err := kv.SetIfWith(ctx, s, p("meta"), p("branch"), p("b4"), cur, nil, nil); err != nil {
		t.Fatalf("nothing more than SetIf: %v", err)
	}
	_, cur = mustGet(t, s, "meta", "branch")

	// Limits, refused before anything is written.
	var lotAlso []kv.Write
	var lotAbsent []kv.KeyRef
	for i := range kv.MaxSetAndReadOps {
		lotAlso = append(lotAlso, kv.Write{Partition: p("lots"), Key: fmt.Appendf(nil, "w%03d", i), Value: p("v")})
		lotAbsent = append(lotAbsent, kv.KeyRef{Partition: p("lots"), Key: fmt.Appendf(nil, "none%03d", i)})
	}
	half := kv.MaxSetAndReadOps / 2
	if err := kv.SetIfWith(ctx, s, p("meta"), p("branch"), p("b5"), cur, lotAbsent[:half], lotAlso[:kv.MaxSetAndReadOps-half]); !errors.Is(err, kv.ErrTooManyOps) {
		t.Fatalf("%d operations: want ErrTooManyOps, got %v", kv.MaxSetAndReadOps+1, err)
	}
	mustMissing(t, s, "too many operations", "lots", "w000")
	if err := kv.SetIfWith(ctx, s, p("meta"), p("branch"), p("b5"), cur, nil, one(p("meta"), p("branch"), p("again"))); !errors.Is(err, kv.ErrInvalidKey) {
		t.Fatalf("the key also in also: want ErrInvalidKey, got %v", err)
	}
	if err := kv.SetIfWith(ctx, s, p("meta"), p("branch"), p("b5"), cur, []kv.KeyRef{{Partition: p("tok"), Key: nil}}, nil); !errors.Is(err, kv.ErrInvalidKey) {
		t.Fatalf("empty absent key: want ErrInvalidKey, got %v", err)
	}
	if v, pr := mustGet(t, s, "meta", "branch"); v != "b4" || pr != cur {
		t.Fatalf("refused calls changed the branch: %q %v", v, pr)
	}
	if err := kv.SetIfWith(ctx, s, p("meta"), p("branch"), p("b5"), cur, lotAbsent[:half-1], lotAlso[:kv.MaxSetAndReadOps-half]); err != nil {
		t.Fatalf("%d operations: %v", kv.MaxSetAndReadOps, err)
	}
	_, cur = mustGet(t, s, "meta", "branch")
	cc, cancel := context.WithCancel(ctx)
	cancel()
	if err := kv.SetIfWith(cc, s, p("meta"), p("branch"), p("b6"), cur, nil, one(p("tok"), p("e"), p("1"))); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: want context.Canceled, got %v", err)
	}
	mustMissing(t, s, "a canceled call", "tok", "e")
}

// testDeleteIfWith checks kv.DeleteIfWith, through the store's CondWriter
// when it has one and through kv's fallback otherwise: the key deleted and
// also written when the key is at pred, nothing otherwise.
func testDeleteIfWith(t *testing.T, s kv.Store) {
	mustSet(t, s, "meta", "branch", "b1")
	_, old := mustGet(t, s, "meta", "branch")
	mustSet(t, s, "meta", "branch", "b2")
	_, cur := mustGet(t, s, "meta", "branch")
	also := []kv.Write{wr("tok", "sealed", "s"), wr("other", "b", "2")}

	c, rec := kv.WithRevisions(ctx)
	if err := kv.DeleteIfWith(c, s, p("meta"), p("branch"), old, also); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("stale predicate: want ErrPredicateFailed, got %v", err)
	}
	if v, pr := mustGet(t, s, "meta", "branch"); v != "b2" || pr != cur {
		t.Fatalf("stale predicate: the key became %q %v", v, pr)
	}
	mustMissing(t, s, "a failed predicate", "tok", "sealed")
	if err := kv.DeleteIfWith(c, s, p("meta"), p("branch"), kv.Absent, also); err == nil || errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("kv.Absent: want an error other than ErrPredicateFailed, got %v", err)
	}
	mustMissing(t, s, "a delete of nothing", "tok", "sealed")
	if err := kv.DeleteIfWith(c, s, p("meta"), p("branch"), cur, one(p("meta"), p("branch"), p("again"))); !errors.Is(err, kv.ErrInvalidKey) {
		t.Fatalf("the key also in also: want ErrInvalidKey, got %v", err)
	}
	var lot []kv.Write
	for i := range kv.MaxSetAndReadOps {
		lot = append(lot, kv.Write{Partition: p("lots"), Key: fmt.Appendf(nil, "w%03d", i), Value: p("v")})
	}
	if err := kv.DeleteIfWith(c, s, p("meta"), p("branch"), cur, lot); !errors.Is(err, kv.ErrTooManyOps) {
		t.Fatalf("%d operations: want ErrTooManyOps, got %v", kv.MaxSetAndReadOps+1, err)
	}
	mustMissing(t, s, "too many operations", "lots", "w000")
	cc, cancel := context.WithCancel(ctx)
	cancel()
	if err := kv.DeleteIfWith(cc, s, p("meta"), p("branch"), cur, also); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: want context.Canceled, got %v", err)
	}
	mustMissing(t, s, "a canceled call", "tok", "sealed")
	if rec.Last() != 0 {
		t.Fatalf("calls that failed noted revision %d", rec.Last())
	}

	if err := kv.DeleteIfWith(c, s, p("meta"), p("branch"), cur, also); err != nil {
		t.Fatalf("predicate holds: %v", err)
	}
	mustMissing(t, s, "a delete that applied", "meta", "branch")
	for _, w := range also {
		if v, _ := mustGet(t, s, string(w.Partition), string(w.Key)); v != string(w.Value) {
			t.Fatalf("predicate holds: %s/%s is %q", w.Partition, w.Key, v)
		}
	}
	if want := max(version(t, s, "tok", "sealed"), version(t, s, "other", "b")); rec.Last() < want {
		t.Fatalf("predicate holds: noted revision %d, want at least %d", rec.Last(), want)
	}
	// Once deleted, the same call fails: the key is no longer at cur.
	if err := kv.DeleteIfWith(ctx, s, p("meta"), p("branch"), cur, one(p("tok"), p("late"), p("1"))); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("deleted already: want ErrPredicateFailed, got %v", err)
	}
	mustMissing(t, s, "a delete of a deleted key", "tok", "late")
	// No also: a plain DeleteIf.
	mustSet(t, s, "meta", "branch", "b3")
	_, cur = mustGet(t, s, "meta", "branch")
	if err := kv.DeleteIfWith(ctx, s, p("meta"), p("branch"), cur, nil); err != nil {
		t.Fatalf("nothing more than DeleteIf: %v", err)
	}
	mustMissing(t, s, "a delete without also", "meta", "branch")
}

// testCondWriteSealRace runs graveler's seal on bare kv: writers put into
// the token named by a branch record unless the token's marker exists,
// reading the branch in the same call; a sealer moves the branch to the
// next token and writes the old token's marker in one SetIfWith, then
// scans the old token. Nothing may land in a token after its seal: every
// write reported applied is in the scan below the marker's revision, and
// the scan after every writer stopped is the one taken right after the
// seal. The reads must agree with the outcome: an applied write saw its
// own token in the branch, a refused one the next.
//
// kv's fallback for a store without CondWriter checks the marker and
// writes in two steps, so there is no atomicity to check there.
func testCondWriteSealRace(t *testing.T, s kv.Store) {
	cw, ok := s.(kv.CondWriter)
	if !ok {
		return
	}
	const writers, seals = 8, 12
	branch := ref("seal", "branch")
	marker := func(tok string) kv.KeyRef { return ref("tok-"+tok, "~sealed") }
	mustSet(t, s, "seal", "branch", "0")

	type result struct {
		tok, key string
		applied  bool
		noted    int64
	}
	var mu sync.Mutex
	var results []result
	var napplied, nrefused atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			v, _, err := s.Get(ctx, branch.Partition, branch.Key)
			if err != nil {
				t.Error(err)
				return
			}
			tok := string(v)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%02d-%05d", w, i)
				c, rec := kv.WithRevisions(ctx)
				got, applied, err := cw.SetAndReadUnless(c, []kv.KeyRef{marker(tok)}, one(p("tok-"+tok), p(key), p(key)), []kv.KeyRef{branch})
				if err != nil {
					t.Errorf("write %s: %v", key, err)
					return
				}
				switch cur := string(got[0].Value); {
				case applied && cur != tok:
					t.Errorf("write %s applied in token %s, but its read of the branch names %s", key, tok, cur)
				case !applied && cur == tok:
					t.Errorf("write %s refused in token %s, but its read of the branch still names it", key, tok)
				case applied != (rec.Last() != 0):
					t.Errorf("write %s: applied %v, noted revision %d", key, applied, rec.Last())
				}
				mu.Lock()
				results = append(results, result{tok: tok, key: key, applied: applied, noted: rec.Last()})
				mu.Unlock()
				if applied {
					napplied.Add(1)
				} else {
					nrefused.Add(1)
					tok = string(got[0].Value)
				}
			}
		})
	}

	scan := func(tok string) map[string]int64 {
		out := map[string]int64{}
		for e, err := range s.Scan(ctx, p("tok-"+tok), kv.ScanOptions{}) {
			if err != nil {
				t.Fatalf("scan token %s: %v", tok, err)
			}
			if string(e.Key) != string(marker(tok).Key) {
				out[string(e.Key)] = e.Predicate.Version()
			}
		}
		return out
	}
	type sealed struct {
		marker int64            // the marker's revision
		scan   map[string]int64 // key -> version, right after the seal
	}
	seal := map[string]sealed{}
	since := int64(0) // writes applied when the last seal was made
	for i := range seals {
		// Let the writers get ahead between seals, so that they interleave:
		// counted from the last seal, as writes applied before it (a
		// scheduler that ran the writers long before the first seal) say
		// nothing of what follows it.
		for napplied.Load() < since+writers*2 && !t.Failed() {
			runtime.Gosched()
		}
		tok, pr := mustGet(t, s, "seal", "branch")
		m := marker(tok)
		if err := cw.SetIfWith(ctx, branch.Partition, branch.Key, p(fmt.Sprint(i+1)), pr, nil, []kv.Write{{Partition: m.Partition, Key: m.Key, Value: p("sealed")}}); err != nil {
			t.Fatalf("seal %s: %v", tok, err)
		}
		seal[tok] = sealed{marker: version(t, s, string(m.Partition), string(m.Key)), scan: scan(tok)}
		since = napplied.Load()
	}
	// A writer leaves a token only when refused, so one is refused at its
	// next write whatever the scheduling; wait for it, so that refusals
	// are checked too.
	for nrefused.Load() == 0 && !t.Failed() {
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()

	for tok, sl := range seal {
		if final := scan(tok); !maps.Equal(final, sl.scan) {
			t.Errorf("token %s: %d keys right after its seal, %d now: a write landed after the seal", tok, len(sl.scan), len(final))
		}
		for key, v := range sl.scan {
			if v >= sl.marker {
				t.Errorf("token %s: %s at revision %d, not below the marker's %d", tok, key, v, sl.marker)
			}
		}
	}
	var appliedN, refusedN int
	for _, r := range results {
		sl, ok := seal[r.tok]
		if !ok {
			continue // the last token, never sealed
		}
		v, present := sl.scan[r.key]
		if r.applied {
			appliedN++
			if !present || v != r.noted || v >= sl.marker {
				t.Errorf("write %s applied in token %s at revision %d: present %v at %d, marker at %d", r.key, r.tok, r.noted, present, v, sl.marker)
			}
			continue
		}
		refusedN++
		if present && v > sl.marker {
			t.Errorf("write %s refused in token %s is there at revision %d, after the marker's %d", r.key, r.tok, v, sl.marker)
		}
	}
	if appliedN < seals*writers || refusedN == 0 {
		t.Fatalf("only %d applied and %d refused writes checked across %d seals", appliedN, refusedN, seals)
	}
}
