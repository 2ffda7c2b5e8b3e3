package etcdkv_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/kv"
)

// The three outcomes of an ambiguous SetIf: the first attempt had applied,
// had not applied, or lost to another writer.
func TestSettleAmbiguousSetIf(t *testing.T) {
	ctx := context.Background()
	s := etcdkvtest.NewStore(t)
	part := []byte("settle")
	if err := s.Set(ctx, part, []byte("k"), []byte("v0")); err != nil {
		t.Fatal(err)
	}
	_, pred, err := s.Get(ctx, part, []byte("k"))
	if err != nil {
		t.Fatal(err)
	}

	// Not applied: settling applies it now.
	if err := s.SettleSetIfForTest(ctx, part, []byte("k"), []byte("v1"), pred); err != nil {
		t.Fatalf("not applied: %v", err)
	}
	v, pred1, _ := s.Get(ctx, part, []byte("k"))
	if string(v) != "v1" {
		t.Fatalf("got %q", v)
	}

	// Applied: the key holds our value at a newer revision; settling reports
	// success without writing again.
	if err := s.SettleSetIfForTest(ctx, part, []byte("k"), []byte("v1"), pred); err != nil {
		t.Fatalf("applied: %v", err)
	}
	if _, p2, _ := s.Get(ctx, part, []byte("k")); p2 != pred1 {
		t.Fatalf("settling an applied write wrote again: %v -> %v", pred1, p2)
	}

	// Lost: another writer's value is there.
	if err := s.Set(ctx, part, []byte("k"), []byte("theirs")); err != nil {
		t.Fatal(err)
	}
	if err := s.SettleSetIfForTest(ctx, part, []byte("k"), []byte("v2"), pred1); !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("lost: want ErrPredicateFailed, got %v", err)
	}

	// Create-if-absent that had applied.
	if err := s.SetIf(ctx, part, []byte("new"), []byte("mine"), kv.Absent); err != nil {
		t.Fatal(err)
	}
	if err := s.SettleSetIfForTest(ctx, part, []byte("new"), []byte("mine"), kv.Absent); err != nil {
		t.Fatalf("absent, applied: %v", err)
	}
}

// Writes against a stopped cluster report an outcome the caller can act on:
// ambiguous (or unavailable), never success and never a hang past the deadline.
func TestWritesWhenClusterIsDown(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	s := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{SettleAttempts: 2})
	ctx := context.Background()
	part := []byte("down")
	if err := s.Set(ctx, part, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	c, cancel := context.WithTimeout(ctx, 500e6)
	defer cancel()
	err := s.SetIf(c, part, []byte("k"), []byte("v2"), kv.Absent)
	if err == nil || !(errors.Is(err, kv.ErrAmbiguous) || errors.Is(err, kv.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)) {
		t.Fatalf("SetIf against a stopped cluster: %v", err)
	}
	c2, cancel2 := context.WithTimeout(ctx, 500e6)
	defer cancel2()
	if _, _, err := s.Get(c2, part, []byte("k")); err == nil {
		t.Fatal("Get against a stopped cluster succeeded")
	}
}

// A scan whose pinned revision is compacted mid-way resumes after the last
// key it returned and still returns every key exactly once, in order.
func TestScanSurvivesCompaction(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	s := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	ctx := context.Background()
	part := []byte("compact")
	const n = 6000
	val := make([]byte, 2048)
	for i := 0; i < n; i++ {
		if err := s.Set(ctx, part, fmt.Appendf(nil, "k%05d", i), val); err != nil {
			t.Fatal(err)
		}
	}
	before := testutil.ToFloat64(etcdkvScanRestarts())
	seen := 0
	var prev string
	for e, err := range s.Scan(ctx, part, kv.ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if k := string(e.Key); k <= prev {
			t.Fatalf("order: %q after %q", k, prev)
		} else {
			prev = k
		}
		seen++
		if seen == 50 {
			// Move the revision on and compact away the scan's pinned one.
			for i := 0; i < 10; i++ {
				if err := s.Set(ctx, []byte("other"), fmt.Appendf(nil, "x%d", i), []byte("v")); err != nil {
					t.Fatal(err)
				}
			}
			resp, err := srv.Client.Get(ctx, "any")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := srv.Client.Compact(ctx, resp.Header.Revision); err != nil {
				t.Fatal(err)
			}
		}
	}
	if seen != n {
		t.Fatalf("scan returned %d keys, want %d", seen, n)
	}
	if after := testutil.ToFloat64(etcdkvScanRestarts()); after <= before {
		t.Fatalf("the scan was never resumed (restarts %v -> %v): the test did not exercise compaction", before, after)
	}
}

func etcdkvScanRestarts() prometheus.Collector { return etcdkv.ScanRestartsForTest }
