package etcdkv_test

import (
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/kv"
)

// TestSettleSetIfWith: an ambiguous SetIfWith is reported as what
// happened, decided from the key's history as SetIf is, whether the key
// or a key that must be missing (the seal's marker) made the re-send
// fail; the keys of also are written with the key or not at all.
func TestSettleSetIfWith(t *testing.T) {
	const alsoValue = "also-mine"
	marker := func(f *settleFixture) kv.KeyRef { return kv.KeyRef{Partition: f.part, Key: []byte("marker")} }
	also := func(f *settleFixture) []kv.Write {
		return []kv.Write{{Partition: f.part, Key: []byte("also"), Value: []byte(alsoValue)}}
	}
	setIfWith := func(t *testing.T, f *settleFixture) {
		t.Helper()
		if err := f.s.SetIfWith(t.Context(), f.part, f.key, []byte("mine"), f.pred, []kv.KeyRef{marker(f)}, also(f)); err != nil {
			t.Fatalf("first attempt: %v", err)
		}
	}
	seal := func(t *testing.T, f *settleFixture) {
		t.Helper()
		if err := f.s.Set(t.Context(), f.part, marker(f).Key, []byte("sealed")); err != nil {
			t.Fatal(err)
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
			setIfWith(t, f)
		}},
		{name: "applied, then sealed", value: "mine", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.send(t)
			setIfWith(t, f)
			seal(t, f)
		}},
		{name: "not applied, sealed", want: kv.ErrPredicateFailed, value: "v0", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.send(t)
			seal(t, f)
		}},
		{name: "not applied, another writer won", want: kv.ErrPredicateFailed, value: "theirs", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.send(t)
			f.set(t, "theirs")
		}},
		{name: "not applied, another writer won, sealed", want: kv.ErrPredicateFailed, value: "theirs", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.send(t)
			f.set(t, "theirs")
			seal(t, f)
		}},
		{name: "history compacted", want: kv.ErrAmbiguous, value: "theirs", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.send(t)
			setIfWith(t, f)
			f.set(t, "theirs")
			f.compact(t)
		}},
		{name: "absent: not applied, still missing: applied now", value: "mine", setup: func(t *testing.T, f *settleFixture) {
			f.send(t)
		}},
		{name: "absent: applied, then sealed", value: "mine", setup: func(t *testing.T, f *settleFixture) {
			f.send(t)
			setIfWith(t, f)
			seal(t, f)
		}},
		// Missing again and not sealed: a re-send would pass every
		// guard and create the key a second time.
		{name: "absent: applied, then deleted", value: "", setup: func(t *testing.T, f *settleFixture) {
			f.send(t)
			setIfWith(t, f)
			f.del(t)
		}},
		// The key is missing again, so only the marker fails the re-send:
		// the history since the attempt was sent must show the creation.
		{name: "absent: applied, then deleted and sealed", value: "", setup: func(t *testing.T, f *settleFixture) {
			f.send(t)
			setIfWith(t, f)
			f.del(t)
			seal(t, f)
		}},
		{name: "absent: not applied, sealed", want: kv.ErrPredicateFailed, value: "", setup: func(t *testing.T, f *settleFixture) {
			f.send(t)
			seal(t, f)
		}},
		{name: "absent: another writer created and deleted it, sealed", want: kv.ErrPredicateFailed, value: "", setup: func(t *testing.T, f *settleFixture) {
			f.send(t)
			f.set(t, "theirs")
			f.del(t)
			seal(t, f)
		}},
		{name: "absent: applied, deleted, sealed, history compacted", want: kv.ErrAmbiguous, value: "", setup: func(t *testing.T, f *settleFixture) {
			f.send(t)
			setIfWith(t, f)
			f.del(t)
			seal(t, f)
			f.compact(t)
		}},
	}
	alsoAt := func(t *testing.T, f *settleFixture, rev int64) (string, int64) {
		t.Helper()
		kvs := f.atKey(t, []byte("also"), rev)
		if len(kvs) == 0 {
			return "", 0
		}
		return string(kvs[0].Value), kvs[0].ModRevision
	}
	runSettleCases(t, cases, func(t *testing.T, f *settleFixture) error {
		err := f.s.SettleSetIfWithForTest(f.ctx, f.part, f.key, []byte("mine"), f.pred, []kv.KeyRef{marker(f)}, also(f), f.sentAfter)
		if errors.Is(err, kv.ErrPredicateFailed) {
			if v, _ := alsoAt(t, f, 0); v != "" {
				t.Fatalf("settled as not applied, but also holds %q", v)
			}
		}
		return err
	}, func(t *testing.T, f *settleFixture, rev int64) {
		// Our value, put at that very revision, with also.
		kvs := f.at(t, rev)
		if len(kvs) != 1 || string(kvs[0].Value) != "mine" || kvs[0].ModRevision != rev {
			t.Fatalf("noted revision %d: the key there is %v, want our value written at it", rev, kvs)
		}
		if v, at := alsoAt(t, f, rev); v != alsoValue || at != rev {
			t.Fatalf("noted revision %d: also is %q written at %d", rev, v, at)
		}
	})
}

// TestSettleDeleteIfWith: an ambiguous DeleteIfWith is reported as what
// happened. Its deletion and its put of also share a revision, which
// tells it apart from another deleter's deletion of the same version.
func TestSettleDeleteIfWith(t *testing.T) {
	const alsoValue = "sealed-by-me"
	also := func(f *settleFixture) []kv.Write {
		return []kv.Write{{Partition: f.part, Key: []byte("also"), Value: []byte(alsoValue)}}
	}
	deleteIfWith := func(t *testing.T, f *settleFixture) {
		t.Helper()
		if err := f.s.DeleteIfWith(t.Context(), f.part, f.key, f.pred, also(f)); err != nil {
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
			deleteIfWith(t, f)
		}},
		{name: "applied, then created again", value: "again", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			deleteIfWith(t, f)
			f.set(t, "again")
		}},
		{name: "not applied, another deleter deleted that version", want: kv.ErrPredicateFailed, value: "", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.del(t)
		}},
		{name: "not applied, another deleter, then created again", want: kv.ErrPredicateFailed, value: "again", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.del(t)
			f.set(t, "again")
		}},
		{name: "not applied, another writer changed it", want: kv.ErrPredicateFailed, value: "theirs", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			f.set(t, "theirs")
		}},
		{name: "applied, created again, history compacted", want: kv.ErrAmbiguous, value: "again", setup: func(t *testing.T, f *settleFixture) {
			f.set(t, "v0")
			f.read(t)
			deleteIfWith(t, f)
			f.set(t, "again")
			f.compact(t)
		}},
	}
	runSettleCases(t, cases, func(t *testing.T, f *settleFixture) error {
		err := f.s.SettleDeleteIfWithForTest(f.ctx, f.part, f.key, f.pred, also(f))
		if errors.Is(err, kv.ErrPredicateFailed) {
			if kvs := f.atKey(t, []byte("also"), 0); len(kvs) != 0 {
				t.Fatalf("settled as not applied, but also holds %q", kvs[0].Value)
			}
		}
		return err
	}, func(t *testing.T, f *settleFixture, rev int64) {
		// The key deleted at that very revision, with also put there.
		if kvs := f.at(t, rev); len(kvs) != 0 {
			t.Fatalf("noted revision %d: the key is still there: %v", rev, kvs)
		}
		if kvs := f.at(t, rev-1); len(kvs) != 1 {
			t.Fatalf("noted revision %d: the key was already missing before it", rev)
		}
		if kvs := f.atKey(t, []byte("also"), rev); len(kvs) != 1 || string(kvs[0].Value) != alsoValue || kvs[0].ModRevision != rev {
			t.Fatalf("noted revision %d: also is %v", rev, kvs)
		}
	})
}

// TestSettleSetAndReadUnless: an ambiguous SetAndReadUnless whose
// re-send finds the marker present ends kv.ErrAmbiguous, never "not
// applied" (the first attempt may have applied before the marker, and a
// caller told otherwise would write it again elsewhere), and nothing of it
// applies after the marker: the first attempt either applied before it or
// never does.
func TestSettleSetAndReadUnless(t *testing.T) {
	f := newLateFixture(t)
	ctx := t.Context()
	marker := func() kv.KeyRef { return kv.KeyRef{Partition: f.part, Key: []byte("marker")} }
	branch := func() kv.KeyRef { return kv.KeyRef{Partition: f.part, Key: []byte("branch")} }
	writes := func() []kv.Write { return writesOf(f.part, "mine", "a", "b") }
	reads := func() []kv.KeyRef {
		return []kv.KeyRef{branch(), {Partition: f.part, Key: []byte("a")}}
	}
	// firstAttempt is the transaction the store's first attempt sends.
	firstAttempt := func(t *testing.T) clientv3.Txn {
		t.Helper()
		txn, err := f.s.SetAndReadUnlessTxnForTest(ctx, []kv.KeyRef{marker()}, writes(), reads(), f.s.SentAfterForTest())
		if err != nil {
			t.Fatal(err)
		}
		return txn
	}
	seal := func(t *testing.T) int64 {
		t.Helper()
		if err := f.other.SetIfWith(ctx, f.part, branch().Key, []byte("next"), kv.Absent, nil, []kv.Write{{Partition: f.part, Key: marker().Key, Value: []byte("sealed")}}); err != nil {
			t.Fatal(err)
		}
		return f.modRev(t, "marker")
	}
	settle := func(t *testing.T) ([]kv.Entry, bool, *kv.Revisions) {
		t.Helper()
		c, rec := kv.WithRevisions(ctx)
		got, applied, err := f.s.SettleSetAndReadUnlessForTest(c, []kv.KeyRef{marker()}, writes(), reads())
		if err != nil {
			t.Fatalf("settling: %v", err)
		}
		return got, applied, rec
	}
	// wantUnknown settles and wants kv.ErrAmbiguous: the marker is
	// present, and whether the first attempt applied before it cannot be
	// told from what the store holds now.
	wantUnknown := func(t *testing.T) {
		t.Helper()
		c, rec := kv.WithRevisions(ctx)
		got, applied, err := f.s.SettleSetAndReadUnlessForTest(c, []kv.KeyRef{marker()}, writes(), reads())
		if !errors.Is(err, kv.ErrAmbiguous) || applied || got != nil {
			t.Fatalf("settling with the marker present: applied %v, reads %+v, %v; want kv.ErrAmbiguous", applied, got, err)
		}
		if rec.Last() != 0 {
			t.Fatalf("an unsettled call noted revision %d", rec.Last())
		}
	}

	t.Run("first attempt applied before the seal", func(t *testing.T) {
		f.part = []byte("unless-applied")
		first := firstAttempt(t)
		if !commit(t, first) {
			t.Fatal("the first attempt did not apply")
		}
		m := seal(t)
		wantUnknown(t)
		for _, k := range []string{"a", "b"} {
			f.want(t, k, "mine")
			if rev := f.modRev(t, k); rev >= m {
				t.Fatalf("%s written at revision %d, after the marker's %d", k, rev, m)
			}
		}
	})
	t.Run("first attempt held past the seal", func(t *testing.T) {
		f.part = []byte("unless-held")
		first := firstAttempt(t)
		seal(t)
		wantUnknown(t)
		f.want(t, "a", "")
		// The held attempt reaches the leader after the call ended.
		if commit(t, first) {
			t.Fatal("the held first attempt applied after the seal")
		}
		f.want(t, "a", "")
		f.want(t, "b", "")
	})
	t.Run("not sealed: applied by the re-send", func(t *testing.T) {
		f.part = []byte("unless-open")
		f.set(t, f.other, "branch", "cur")
		got, applied, rec := settle(t)
		if !applied || string(got[0].Value) != "cur" || string(got[1].Value) != "mine" {
			t.Fatalf("applied %v, reads %+v", applied, got)
		}
		if rev := f.modRev(t, "a"); rec.Last() != rev || got[1].Predicate.Version() != rev {
			t.Fatalf("noted revision %d, read at %v, a written at %d", rec.Last(), got[1].Predicate, rev)
		}
		f.want(t, "b", "mine")
	})
	t.Run("stale bound: sent again, then refused or applied", func(t *testing.T) {
		f.part = []byte("unless-stale")
		f.set(t, f.s, "seen", "x")
		// Written by another store the one under test has not heard of.
		f.set(t, f.other, "a", "theirs")
		got, applied, err := f.s.SetAndReadUnless(ctx, []kv.KeyRef{marker()}, writes(), reads())
		if err != nil || !applied || string(got[1].Value) != "mine" {
			t.Fatalf("stale bound: applied %v, %v, reads %+v", applied, err, got)
		}
		f.set(t, f.other, "a", "theirs")
		seal(t)
		got, applied, err = f.s.SetAndReadUnless(ctx, []kv.KeyRef{marker()}, writes(), reads())
		if err != nil || applied || string(got[0].Value) != "next" || string(got[1].Value) != "theirs" {
			t.Fatalf("stale bound and sealed: applied %v, %v, reads %+v", applied, err, got)
		}
		f.want(t, "a", "theirs")
		f.want(t, "b", "mine")
	})
}

// atKey reads key of the fixture's partition at revision rev (0: now)
// through the etcd client.
func (f *settleFixture) atKey(t *testing.T, key []byte, rev int64) []*mvccpb.KeyValue {
	t.Helper()
	resp, err := f.srv.Client.Get(t.Context(), f.s.RawKey(f.part, key), clientv3.WithRev(rev))
	if err != nil {
		t.Fatalf("read %s at revision %d: %v", key, rev, err)
	}
	return resp.Kvs
}
