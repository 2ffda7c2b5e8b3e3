package etcdkv_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/kv"
)

// settleCase is one history of a key around an ambiguous write: setup
// makes the history (possibly running the "first attempt" itself), then
// settling must report want (nil: applied) and leave the key at value
// (absent when value is "").
type settleCase struct {
	name  string
	setup func(t *testing.T, f *settleFixture)
	want  error
	value string
}

type settleFixture struct {
	// ctx is the settling's context, with a kv.Revisions.
	ctx       context.Context
	srv       *etcdkvtest.Server
	s         *etcdkv.Store
	part, key []byte
	pred      kv.Predicate // the version the write is guarded by
	sentAfter int64        // the revision bound of the first attempt
}

func (f *settleFixture) set(t *testing.T, v string) {
	t.Helper()
	if err := f.s.Set(t.Context(), f.part, f.key, []byte(v)); err != nil {
		t.Fatal(err)
	}
}

func (f *settleFixture) del(t *testing.T) {
	t.Helper()
	if err := f.s.Delete(t.Context(), f.part, f.key); err != nil {
		t.Fatal(err)
	}
}

// read sets pred to the key's current version.
func (f *settleFixture) read(t *testing.T) {
	t.Helper()
	_, p, err := f.s.Get(t.Context(), f.part, f.key)
	if err != nil {
		t.Fatal(err)
	}
	f.pred = p
}

// readOther sets pred to a version of another key of the partition: a
// version the key itself never had.
func (f *settleFixture) readOther(t *testing.T) {
	t.Helper()
	if err := f.s.Set(t.Context(), f.part, []byte("other"), []byte("o")); err != nil {
		t.Fatal(err)
	}
	_, p, err := f.s.Get(t.Context(), f.part, []byte("other"))
	if err != nil {
		t.Fatal(err)
	}
	f.pred = p
}

// send notes the revision bound a write sent now would record.
func (f *settleFixture) send(t *testing.T) {
	t.Helper()
	// A read first, so that the bound is the current revision.
	_, _, _ = f.s.Get(t.Context(), f.part, []byte("-"))
	f.sentAfter = f.s.SentAfterForTest()
	if f.sentAfter == 0 {
		t.Fatal("the store has seen no revision")
	}
}

// at reads the key at revision rev through the etcd client.
func (f *settleFixture) at(t *testing.T, rev int64) []*mvccpb.KeyValue {
	t.Helper()
	resp, err := f.srv.Client.Get(t.Context(), f.s.RawKey(f.part, f.key), clientv3.WithRev(rev))
	if err != nil {
		t.Fatalf("read at revision %d: %v", rev, err)
	}
	return resp.Kvs
}

// compact compacts away every revision before the current one.
func (f *settleFixture) compact(t *testing.T) {
	t.Helper()
	resp, err := f.srv.Client.Get(t.Context(), "any")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.srv.Client.Compact(t.Context(), resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
}

// runSettleCases runs each case; when settling reports the write
// applied, noted checks the revision it noted (kv.NoteWrite) against the
// key's history as the etcd client reads it.
func runSettleCases(t *testing.T, cases []settleCase, settle func(t *testing.T, f *settleFixture) error, noted func(t *testing.T, f *settleFixture, rev int64)) {
	srv := etcdkvtest.NewServer(t)
	s := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &settleFixture{srv: srv, s: s, part: fmt.Appendf(nil, "settle%d", i), key: []byte("k")}
			c.setup(t, f)
			before, beforePred, beforeErr := s.Get(t.Context(), f.part, f.key)
			var rec *kv.Revisions
			f.ctx, rec = kv.WithRevisions(t.Context())
			err := settle(t, f)
			switch rev := rec.Last(); {
			case err == nil:
				noted(t, f, rev)
			case rev != 0:
				t.Fatalf("settling reported %v but noted a write at revision %d", err, rev)
			}
			switch {
			case c.want == nil && err != nil:
				t.Fatalf("settling: %v, want applied", err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Fatalf("settling: %v, want %v", err, c.want)
			case errors.Is(err, kv.ErrAmbiguous) && errors.Is(err, kv.ErrPredicateFailed):
				t.Fatalf("settling: %v is both ambiguous and a failed predicate", err)
			}
			v, p, gerr := s.Get(t.Context(), f.part, f.key)
			switch {
			case c.value == "" && !errors.Is(gerr, kv.ErrNotFound):
				t.Fatalf("after settling: %q %v, want the key missing", v, gerr)
			case c.value != "" && (gerr != nil || string(v) != c.value):
				t.Fatalf("after settling: %q %v, want %q", v, gerr, c.value)
			}
			// Settling writes only when its re-send applies.
			if err != nil && (p != beforePred || (beforeErr == nil) != (gerr == nil)) {
				t.Fatalf("settling that did not apply changed the key: %q %v -> %q %v", before, beforePred, v, p)
			}
		})
	}
}

// TestSettleSetIf: an ambiguous SetIf is reported as what happened,
// decided from the key's history, whatever other writers did after the
// first attempt.
func TestSettleSetIf(t *testing.T) {
	ctx := context.Background()
	setIf := func(t *testing.T, f *settleFixture, v string) {
		t.Helper()
		if err := f.s.SetIf(ctx, f.part, f.key, []byte(v), f.pred); err != nil {
			t.Fatalf("first attempt: %v", err)
		}
	}
	cases := []settleCase{
		{name: "not applied, unchanged: applied now", value: "mine", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.send(t)
		}},
		{name: "applied, unchanged", value: "mine", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.send(t)
			setIf(t, f, "mine")
		}},
		{name: "applied, then overwritten", value: "theirs", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.send(t)
			setIf(t, f, "mine")
			f.set(t, "theirs")
		}},
		{name: "applied, then deleted", value: "", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.send(t)
			setIf(t, f, "mine")
			f.del(t)
		}},
		{name: "not applied, another writer won", want: kv.ErrPredicateFailed, value: "theirs", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.send(t)
			f.set(t, "theirs")
		}},
		{name: "not applied, another writer won then wrote ours", want: kv.ErrPredicateFailed, value: "mine", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.send(t)
			f.set(t, "theirs")
			f.set(t, "mine")
		}},
		{name: "not applied, deleted by another", want: kv.ErrPredicateFailed, value: "", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.send(t)
			f.del(t)
		}},
		{name: "predicate of no version of the key", want: kv.ErrPredicateFailed, value: "", setup: func(t *testing.T, f *settleFixture) {
			f.readOther(t)
			f.send(t)
		}},
		{name: "history compacted", want: kv.ErrAmbiguous, value: "theirs", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.send(t)
			setIf(t, f, "mine")
			f.set(t, "theirs")
			f.compact(t)
		}},
		{name: "absent: not applied, still missing: applied now", value: "mine", setup: func(t *testing.T, f *settleFixture) {
			f.send(t)
		}},
		{name: "absent: applied, unchanged", value: "mine", setup: func(t *testing.T, f *settleFixture) {
			f.send(t)
			setIf(t, f, "mine")
		}},
		{name: "absent: applied, then overwritten", value: "theirs", setup: func(t *testing.T, f *settleFixture) {
			f.send(t)
			setIf(t, f, "mine")
			f.set(t, "theirs")
		}},
		// Missing again, so a re-send would pass the guard: it must not
		// create the key a second time after someone deleted it.
		{name: "absent: applied, then deleted", value: "", setup: func(t *testing.T, f *settleFixture) {
			f.send(t)
			setIf(t, f, "mine")
			f.del(t)
		}},
		{name: "absent: applied, then deleted, history compacted", want: kv.ErrAmbiguous, value: "", setup: func(t *testing.T, f *settleFixture) {
			f.send(t)
			setIf(t, f, "mine")
			f.del(t)
			f.compact(t)
		}},
		{name: "absent: another writer created and deleted it", value: "mine", setup: func(t *testing.T, f *settleFixture) {
			f.send(t)
			f.set(t, "theirs")
			f.del(t)
		}},
		{name: "absent: applied, then deleted and re-created", value: "theirs", setup: func(t *testing.T, f *settleFixture) {
			f.send(t)
			setIf(t, f, "mine")
			f.del(t)
			f.set(t, "theirs")
		}},
		{name: "absent: another writer created it", want: kv.ErrPredicateFailed, value: "theirs", setup: func(t *testing.T, f *settleFixture) {
			f.send(t)
			f.set(t, "theirs")
		}},
		{name: "absent: another writer created it, then wrote ours", want: kv.ErrPredicateFailed, value: "mine", setup: func(t *testing.T, f *settleFixture) {
			f.send(t)
			f.set(t, "theirs")
			f.set(t, "mine")
		}},
		{name: "absent: it existed before the attempt", want: kv.ErrPredicateFailed, value: "mine", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "mine")
			f.send(t)
		}},
		{name: "absent: history compacted", want: kv.ErrAmbiguous, value: "theirs", setup: func(t *testing.T, f *settleFixture) {
			f.send(t)
			setIf(t, f, "mine")
			f.del(t)
			f.set(t, "theirs")
			f.compact(t)
		}},
	}
	runSettleCases(t, cases, func(t *testing.T, f *settleFixture) error {
		return f.s.SettleSetIfForTest(f.ctx, f.part, f.key, []byte("mine"), f.pred, f.sentAfter)
	}, func(t *testing.T, f *settleFixture, rev int64) {
		// Our value, put at that very revision, whatever came after.
		kvs := f.at(t, rev)
		if len(kvs) != 1 || string(kvs[0].Value) != "mine" || kvs[0].ModRevision != rev {
			t.Fatalf("noted revision %d: the key there is %v, want our value written at it", rev, kvs)
		}
	})
}

// TestSettleDeleteIf: an ambiguous DeleteIf is applied when a deletion
// ended the version it was guarded by, and failed when a write did.
func TestSettleDeleteIf(t *testing.T) {
	ctx := context.Background()
	deleteIf := func(t *testing.T, f *settleFixture) {
		t.Helper()
		if err := f.s.DeleteIf(ctx, f.part, f.key, f.pred); err != nil {
			t.Fatalf("first attempt: %v", err)
		}
	}
	cases := []settleCase{
		{name: "not applied, unchanged: applied now", value: "", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
		}},
		{name: "applied", value: "", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			deleteIf(t, f)
		}},
		{name: "applied, then re-created", value: "new", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			deleteIf(t, f)
			f.set(t, "new")
		}},
		{name: "deleted by another", value: "", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.del(t)
		}},
		{name: "not applied, another writer changed it", want: kv.ErrPredicateFailed, value: "theirs", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.set(t, "theirs")
		}},
		{name: "not applied, changed then deleted by another", want: kv.ErrPredicateFailed, value: "", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.set(t, "theirs")
			f.del(t)
		}},
		{name: "predicate of no version of the key", want: kv.ErrPredicateFailed, value: "", setup: func(t *testing.T, f *settleFixture) {
			f.readOther(t)
		}},
		{name: "history compacted", want: kv.ErrAmbiguous, value: "theirs", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.set(t, "theirs")
			f.compact(t)
		}},
	}
	runSettleCases(t, cases, func(t *testing.T, f *settleFixture) error {
		return f.s.SettleDeleteIfForTest(f.ctx, f.part, f.key, f.pred)
	}, func(t *testing.T, f *settleFixture, rev int64) {
		// The deletion that ended the version the delete was guarded by.
		if kvs := f.at(t, rev); len(kvs) != 0 {
			t.Fatalf("noted revision %d: the key is there: %v", rev, kvs)
		}
		if kvs := f.at(t, rev-1); len(kvs) != 1 || kvs[0].ModRevision != f.pred.Version() {
			t.Fatalf("noted revision %d: before it the key is %v, want the version %v", rev, kvs, f.pred)
		}
	})
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
