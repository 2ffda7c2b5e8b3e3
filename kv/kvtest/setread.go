package kvtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"graveler/kv"
)

func one(part, key, val []byte) []kv.Write {
	return []kv.Write{{Partition: part, Key: key, Value: val}}
}

// testSetAndRead checks kv.SetAndRead, through the store's SetReader when
// it has one and through the Set-then-Get fallback otherwise.
func testSetAndRead(t *testing.T, s kv.Store) {
	mustSet(t, s, "other", "b", "branch-v1")
	reads := []kv.KeyRef{
		{Partition: p("part"), Key: p("k")},     // the key just written
		{Partition: p("other"), Key: p("b")},    // another partition
		{Partition: p("other"), Key: p("none")}, // missing
	}
	got, err := kv.SetAndRead(ctx, s, one(p("part"), p("k"), p("v1")), reads)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(reads) {
		t.Fatalf("%d results for %d reads", len(got), len(reads))
	}
	if string(got[0].Key) != "k" || string(got[0].Value) != "v1" || got[0].Predicate.IsAbsent() {
		t.Fatalf("read of the written key: %q=%q %v", got[0].Key, got[0].Value, got[0].Predicate)
	}
	if _, pr := mustGet(t, s, "part", "k"); pr != got[0].Predicate {
		t.Fatalf("predicate %v of the read, %v of a later get", got[0].Predicate, pr)
	}
	if string(got[1].Key) != "b" || string(got[1].Value) != "branch-v1" {
		t.Fatalf("read in another partition: %q=%q", got[1].Key, got[1].Value)
	}
	if string(got[2].Key) != "none" || got[2].Value != nil || !got[2].Predicate.IsAbsent() {
		t.Fatalf("read of a missing key: %q=%q %v", got[2].Key, got[2].Value, got[2].Predicate)
	}
	// The predicates read are usable for a compare-and-swap.
	if err := s.SetIf(ctx, p("other"), p("b"), p("branch-v2"), got[1].Predicate); err != nil {
		t.Fatalf("setif with the predicate read: %v", err)
	}
	if err := s.SetIf(ctx, p("other"), p("none"), p("x"), got[2].Predicate); err != nil {
		t.Fatalf("setif absent with the predicate read: %v", err)
	}
	// Many writes: all there, the reads after every one of them.
	many := []kv.Write{{Partition: p("part"), Key: p("m1"), Value: p("1")}, {Partition: p("other"), Key: p("m2"), Value: p("2")}, {Partition: p("part"), Key: p("m3"), Value: p("3")}}
	got, err = kv.SetAndRead(ctx, s, many, []kv.KeyRef{{Partition: p("part"), Key: p("m1")}, {Partition: p("other"), Key: p("m2")}, {Partition: p("part"), Key: p("m3")}})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range many {
		if !bytes.Equal(got[i].Value, w.Value) {
			t.Fatalf("read of write %d: %q", i, got[i].Value)
		}
		if v, _ := mustGet(t, s, string(w.Partition), string(w.Key)); v != string(w.Value) {
			t.Fatalf("write %d: got %q", i, v)
		}
	}
	// The same key twice, no write, or more operations than a request
	// takes are refused before anything is written.
	dup := []kv.Write{{Partition: p("part"), Key: p("d"), Value: p("1")}, {Partition: p("part"), Key: p("d"), Value: p("2")}}
	if _, err := kv.SetAndRead(ctx, s, dup, nil); !errors.Is(err, kv.ErrInvalidKey) {
		t.Fatalf("a key written twice: want ErrInvalidKey, got %v", err)
	}
	if _, err := kv.SetAndRead(ctx, s, nil, reads); !errors.Is(err, kv.ErrInvalidKey) {
		t.Fatalf("no write: want ErrInvalidKey, got %v", err)
	}
	var lots []kv.Write
	for i := range kv.MaxSetAndReadOps {
		lots = append(lots, kv.Write{Partition: p("part"), Key: fmt.Appendf(nil, "lot%03d", i), Value: p("v")})
	}
	if _, err := kv.SetAndRead(ctx, s, lots[:kv.MaxSetAndReadOps-1], reads[:1]); err != nil {
		t.Fatalf("%d operations: %v", kv.MaxSetAndReadOps, err)
	}
	// All writes, the most compares a store sends (on etcd one guard per
	// written key, plus the store's own).
	if _, err := kv.SetAndRead(ctx, s, lots, nil); err != nil {
		t.Fatalf("%d writes: %v", kv.MaxSetAndReadOps, err)
	}
	if _, err := kv.SetAndRead(ctx, s, lots, reads[:1]); !errors.Is(err, kv.ErrTooManyOps) {
		t.Fatalf("%d operations: want ErrTooManyOps, got %v", kv.MaxSetAndReadOps+1, err)
	}
	if _, _, err := s.Get(ctx, p("part"), p("d")); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("a refused set and read wrote d: %v", err)
	}
	// No reads at all is just a write.
	if got, err := kv.SetAndRead(ctx, s, one(p("part"), p("k2"), p("v")), nil); err != nil || len(got) != 0 {
		t.Fatalf("no reads: %v %v", got, err)
	}
	if v, _ := mustGet(t, s, "part", "k2"); v != "v" {
		t.Fatalf("write without reads: got %q", v)
	}

	// Bad input is refused with the store's errors, and nothing is written.
	if _, err := kv.SetAndRead(ctx, s, one(p("part"), p("bad"), p("v")), []kv.KeyRef{{Partition: p("other"), Key: nil}}); !errors.Is(err, kv.ErrInvalidKey) {
		t.Fatalf("empty read key: want ErrInvalidKey, got %v", err)
	}
	if _, err := kv.SetAndRead(ctx, s, one(p("part"), nil, p("v")), reads); !errors.Is(err, kv.ErrInvalidKey) {
		t.Fatalf("empty key: want ErrInvalidKey, got %v", err)
	}
	if _, err := kv.SetAndRead(ctx, s, one(p("bad/"), p("k"), p("v")), reads); !errors.Is(err, kv.ErrInvalidPartition) {
		t.Fatalf("bad partition: want ErrInvalidPartition, got %v", err)
	}
	big := bytes.Repeat([]byte("x"), kv.DefaultLimits.MaxValueSize+1)
	if _, err := kv.SetAndRead(ctx, s, one(p("part"), p("big"), big), reads); !errors.Is(err, kv.ErrValueTooLarge) {
		t.Fatalf("oversized value: want ErrValueTooLarge, got %v", err)
	}
	if _, _, err := s.Get(ctx, p("part"), p("big")); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("an oversized value was written: %v", err)
	}
	c, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := kv.SetAndRead(c, s, one(p("part"), p("k3"), p("v")), reads); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: want context.Canceled, got %v", err)
	}
}

// testSetAndReadFence runs seed 004's writer fence on bare kv: writers
// put into the partition of the token they believe current and read the
// token in the same call, retrying into the new partition when it changed;
// a sealer moves the token with SetIf and then scans the old partition.
// Every write acknowledged under token t must be in the sealer's scan of
// t: a read that came from before the write would break this.
func testSetAndReadFence(t *testing.T, s kv.Store) {
	const writers, seals = 8, 25
	tokenKey := kv.KeyRef{Partition: p("fence"), Key: p("token")}
	mustSet(t, s, "fence", "token", "0")

	var mu sync.Mutex
	acked := map[string]string{} // key -> token it was acknowledged under
	var nacked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			tok, _ := mustGet(t, s, "fence", "token")
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%02d-%05d", w, i)
				for {
					got, err := kv.SetAndRead(ctx, s, one(p("tok-"+tok), p(key), p("v")), []kv.KeyRef{tokenKey})
					if err != nil {
						t.Errorf("write %s: %v", key, err)
						return
					}
					if cur := string(got[0].Value); cur != tok {
						tok = cur // the token moved: write again under the new one
						continue
					}
					break
				}
				mu.Lock()
				acked[key] = tok
				mu.Unlock()
				nacked.Add(1)
			}
		})
	}

	sealed := map[string]map[string]bool{} // token -> keys its scan found after the seal
	for i := range seals {
		// Let the writers get ahead between seals, so that they interleave.
		for nacked.Load() < int64((i+1)*writers) && !t.Failed() {
			runtime.Gosched()
		}
		tok, pr := mustGet(t, s, "fence", "token")
		if err := s.SetIf(ctx, p("fence"), p("token"), p(fmt.Sprint(i+1)), pr); err != nil {
			t.Fatalf("seal %s: %v", tok, err)
		}
		seen := map[string]bool{}
		for _, k := range scanKeys(t, s, "tok-"+tok, kv.ScanOptions{}) {
			seen[k] = true
		}
		sealed[tok] = seen
	}
	close(stop)
	wg.Wait()
	last, _ := mustGet(t, s, "fence", "token")
	checked := 0
	for key, tok := range acked {
		if tok == last {
			continue // never sealed
		}
		checked++
		if !sealed[tok][key] {
			t.Errorf("write %s acknowledged under token %s is missing from that token's scan after the seal", key, tok)
		}
	}
	if checked < seals*writers {
		t.Fatalf("only %d writes checked across %d seals", checked, seals)
	}
}

// testGetMany checks kv.GetMany: values, absence, limits, and that a
// reader never sees a key ahead of one written before it.
func testGetMany(t *testing.T, s kv.Store) {
	mustSet(t, s, "a", "k", "1")
	mustSet(t, s, "b", "k", "2")
	got, err := kv.GetMany(ctx, s, []kv.KeyRef{{Partition: p("b"), Key: p("k")}, {Partition: p("a"), Key: p("none")}, {Partition: p("a"), Key: p("k")}})
	if err != nil {
		t.Fatal(err)
	}
	if string(got[0].Value) != "2" || got[1].Value != nil || !got[1].Predicate.IsAbsent() || string(got[2].Value) != "1" || string(got[2].Key) != "k" {
		t.Fatalf("get many: %+v", got)
	}
	if _, pr := mustGet(t, s, "a", "k"); pr != got[2].Predicate {
		t.Fatalf("predicate %v, a get says %v", got[2].Predicate, pr)
	}
	if _, err := kv.GetMany(ctx, s, nil); !errors.Is(err, kv.ErrInvalidKey) {
		t.Fatalf("no key: %v", err)
	}
	if _, err := kv.GetMany(ctx, s, []kv.KeyRef{{Partition: p("a"), Key: nil}}); !errors.Is(err, kv.ErrInvalidKey) {
		t.Fatalf("empty key: %v", err)
	}
	lots := make([]kv.KeyRef, kv.MaxSetAndReadOps+1)
	for i := range lots {
		lots[i] = kv.KeyRef{Partition: p("a"), Key: p("k")}
	}
	if _, err := kv.GetMany(ctx, s, lots); !errors.Is(err, kv.ErrTooManyOps) {
		t.Fatalf("too many: %v", err)
	}
	c, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := kv.GetMany(c, s, lots[:2]); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}

	// A writer sets x then y to the same counter; a reader of (y, x) must
	// never see y ahead of x.
	mustSet(t, s, "x", "n", "000")
	mustSet(t, s, "y", "n", "000")
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= 200; i++ {
			v := fmt.Sprintf("%03d", i)
			mustSet(t, s, "x", "n", v)
			mustSet(t, s, "y", "n", v)
		}
	}()
	reads := []kv.KeyRef{{Partition: p("y"), Key: p("n")}, {Partition: p("x"), Key: p("n")}}
	for {
		got, err := kv.GetMany(ctx, s, reads)
		if err != nil {
			t.Fatal(err)
		}
		if string(got[0].Value) > string(got[1].Value) {
			t.Fatalf("read y=%s ahead of x=%s", got[0].Value, got[1].Value)
		}
		select {
		case <-done:
			return
		default:
		}
	}
}
