package etcdkv_test

import (
	"errors"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/kv"
)

// lateFixture is a store, another store on the same etcd (another
// process writing the same keys), and helpers to read and write keys of
// one partition.
type lateFixture struct {
	srv   *etcdkvtest.Server
	s     *etcdkv.Store
	other *etcdkv.Store
	part  []byte
}

func newLateFixture(t *testing.T) *lateFixture {
	srv := etcdkvtest.NewServer(t)
	return &lateFixture{
		srv:   srv,
		s:     etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{}),
		other: etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{}),
	}
}

func (f *lateFixture) set(t *testing.T, s *etcdkv.Store, key, value string) {
	t.Helper()
	if err := s.Set(t.Context(), f.part, []byte(key), []byte(value)); err != nil {
		t.Fatalf("set %s=%s: %v", key, value, err)
	}
}

// setAll sets each of keys to value through f.s.
func (f *lateFixture) setAll(t *testing.T, value string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		f.set(t, f.s, k, value)
	}
}

// want checks key's value ("": missing), read through etcd directly.
func (f *lateFixture) want(t *testing.T, key, value string) {
	t.Helper()
	resp, err := f.srv.Client.Get(t.Context(), f.s.RawKey(f.part, []byte(key)))
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	if len(resp.Kvs) > 0 {
		got = string(resp.Kvs[0].Value)
		if got == "" {
			t.Fatalf("%s holds an empty value", key)
		}
	}
	if got != value {
		t.Fatalf("%s = %q, want %q", key, got, value)
	}
}

// modRev is key's ModRevision, read through etcd directly (0: missing).
func (f *lateFixture) modRev(t *testing.T, key string) int64 {
	t.Helper()
	resp, err := f.srv.Client.Get(t.Context(), f.s.RawKey(f.part, []byte(key)))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].ModRevision
}

func commit(t *testing.T, txn clientv3.Txn) bool {
	t.Helper()
	resp, err := txn.Commit()
	if err != nil {
		t.Fatal(err)
	}
	return resp.Succeeded
}

func writesOf(part []byte, value string, keys ...string) []kv.Write {
	out := make([]kv.Write, len(keys))
	for i, k := range keys {
		out[i] = kv.Write{Partition: part, Key: []byte(k), Value: []byte(value)}
	}
	return out
}

// TestAbandonedAttemptCannotLandLate replays what a stopped etcd member
// does to an unconditional write: it holds the first attempt while the
// store abandons it and re-sends the write elsewhere, the caller is
// answered, someone writes the key again and is answered too, and then
// the member resumes and the held attempt reaches the leader. "Attempt
// 1" here is the very transaction the store sends, with the bound it
// would have had; it must not apply over the newer write. The last cases
// check that the guard is not vacuous: an attempt that meets no later
// write applies.
func TestAbandonedAttemptCannotLandLate(t *testing.T) {
	f := newLateFixture(t)
	ctx := t.Context()
	cases := []struct {
		name string
		run  func(t *testing.T, f *lateFixture)
	}{
		{"set, re-sent, then overwritten", func(t *testing.T, f *lateFixture) {
			f.set(t, f.s, "k", "v0")
			late := f.s.SetTxnForTest(ctx, f.part, []byte("k"), []byte("old"), f.s.SentAfterForTest())
			f.set(t, f.s, "k", "old") // the re-send that was acknowledged
			f.set(t, f.other, "k", "new")
			if commit(t, late) {
				t.Fatal("the abandoned first attempt applied over a newer acknowledged write")
			}
			f.want(t, "k", "new")
		}},
		{"set, overwritten before any re-send", func(t *testing.T, f *lateFixture) {
			f.set(t, f.s, "k", "v0")
			late := f.s.SetTxnForTest(ctx, f.part, []byte("k"), []byte("old"), f.s.SentAfterForTest())
			f.set(t, f.other, "k", "new")
			if commit(t, late) {
				t.Fatal("an attempt applied over a write made after it was sent")
			}
			f.want(t, "k", "new")
		}},
		{"delete, re-sent, then the key created again", func(t *testing.T, f *lateFixture) {
			f.set(t, f.s, "k", "v0")
			late := f.s.DeleteTxnForTest(ctx, f.part, []byte("k"), f.s.SentAfterForTest())
			if err := f.s.Delete(ctx, f.part, []byte("k")); err != nil {
				t.Fatal(err)
			}
			// The linearizability run's case: an acknowledged create-if-absent.
			if err := f.other.SetIf(ctx, f.part, []byte("k"), []byte("new"), kv.Absent); err != nil {
				t.Fatal(err)
			}
			if commit(t, late) {
				t.Fatal("the abandoned delete applied over a newer acknowledged write")
			}
			f.want(t, "k", "new")
		}},
		{"set and read, re-sent, then one key overwritten", func(t *testing.T, f *lateFixture) {
			f.setAll(t, "v0", "a", "b", "c")
			writes := writesOf(f.part, "old", "a", "b", "c")
			reads := []kv.KeyRef{{Partition: f.part, Key: []byte("fence")}}
			late, err := f.s.SetAndReadTxnForTest(ctx, writes, reads, f.s.SentAfterForTest())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.s.SetAndRead(ctx, writes, reads); err != nil {
				t.Fatal(err)
			}
			f.set(t, f.other, "b", "new")
			if commit(t, late) {
				t.Fatal("the abandoned first attempt applied over a newer acknowledged write")
			}
			f.want(t, "a", "old")
			f.want(t, "b", "new")
			f.want(t, "c", "old")
		}},
		{"set and read, one key but the first overwritten after the bound", func(t *testing.T, f *lateFixture) {
			f.setAll(t, "v0", "a", "b", "c")
			late, err := f.s.SetAndReadTxnForTest(ctx, writesOf(f.part, "old", "a", "b", "c"), nil, f.s.SentAfterForTest())
			if err != nil {
				t.Fatal(err)
			}
			f.set(t, f.other, "b", "new")
			if commit(t, late) {
				t.Fatal("an attempt applied although one of its keys was written after it was sent")
			}
			// All or nothing: the keys nobody else wrote are untouched too.
			f.want(t, "a", "v0")
			f.want(t, "b", "new")
			f.want(t, "c", "v0")
		}},
		{"set with no later write applies", func(t *testing.T, f *lateFixture) {
			f.set(t, f.s, "k", "v0")
			if !commit(t, f.s.SetTxnForTest(ctx, f.part, []byte("k"), []byte("v1"), f.s.SentAfterForTest())) {
				t.Fatal("an attempt with a current bound did not apply")
			}
			f.want(t, "k", "v1")
			// A missing key has no revision: it compares below any bound.
			if !commit(t, f.s.SetTxnForTest(ctx, f.part, []byte("fresh"), []byte("v1"), f.s.SentAfterForTest())) {
				t.Fatal("an attempt creating a key did not apply")
			}
			f.want(t, "fresh", "v1")
		}},
		{"delete and set and read with no later write apply", func(t *testing.T, f *lateFixture) {
			f.set(t, f.s, "k", "v0")
			if !commit(t, f.s.DeleteTxnForTest(ctx, f.part, []byte("k"), f.s.SentAfterForTest())) {
				t.Fatal("a delete with a current bound did not apply")
			}
			f.want(t, "k", "")
			f.set(t, f.s, "a", "v0")
			txn, err := f.s.SetAndReadTxnForTest(ctx, writesOf(f.part, "v1", "a", "b"), nil, f.s.SentAfterForTest())
			if err != nil {
				t.Fatal(err)
			}
			if !commit(t, txn) {
				t.Fatal("a set and read with a current bound did not apply")
			}
			f.want(t, "a", "v1")
			f.want(t, "b", "v1")
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f.part = fmt.Appendf(nil, "late%d", i)
			c.run(t, f)
		})
	}
}

// TestStaleBoundIsSentAgain: a key written by another process since the
// store last heard from etcd fails the guard of the first attempt; the
// write is not refused for that, it is sent again with a fresher bound
// and applies.
func TestStaleBoundIsSentAgain(t *testing.T) {
	f := newLateFixture(t)
	ctx := t.Context()
	f.part = []byte("stale")
	f.set(t, f.s, "seen", "x")
	// Each key is written by the other store just before the write under
	// test: the store under test has not seen that revision.
	stale := func(t *testing.T, key string) {
		t.Helper()
		f.set(t, f.other, key, "theirs")
		if bound, rev := f.s.SentAfterForTest(), f.modRev(t, key); bound >= rev {
			t.Fatalf("the store's bound %d is not older than %s's revision %d", bound, key, rev)
		}
	}

	t.Run("set", func(t *testing.T) {
		stale(t, "k")
		if err := f.s.Set(ctx, f.part, []byte("k"), []byte("mine")); err != nil {
			t.Fatal(err)
		}
		f.want(t, "k", "mine")
	})
	t.Run("delete", func(t *testing.T) {
		stale(t, "d")
		if err := f.s.Delete(ctx, f.part, []byte("d")); err != nil {
			t.Fatal(err)
		}
		f.want(t, "d", "")
	})
	t.Run("set and read, one of several keys", func(t *testing.T) {
		stale(t, "b")
		got, err := f.s.SetAndRead(ctx, writesOf(f.part, "mine", "a", "b", "c"),
			[]kv.KeyRef{{Partition: f.part, Key: []byte("b")}, {Partition: f.part, Key: []byte("none")}})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"a", "b", "c"} {
			f.want(t, k, "mine")
		}
		if string(got[0].Value) != "mine" || got[0].Predicate.Version() != f.modRev(t, "b") {
			t.Fatalf("read of b: %q at %v, want the written value at revision %d", got[0].Value, got[0].Predicate, f.modRev(t, "b"))
		}
		if !got[1].Predicate.IsAbsent() || got[1].Value != nil {
			t.Fatalf("read of a missing key: %q at %v", got[1].Value, got[1].Predicate)
		}
	})
}

// TestContendedBlindWrite: when another writer changes the key between
// every bound and attempt, the write gives up after a bounded number of
// attempts with ErrContended, a kind of kv.ErrUnavailable that is not
// ambiguous: nothing of it applied.
func TestContendedBlindWrite(t *testing.T) {
	f := newLateFixture(t)
	ctx := t.Context()
	f.part = []byte("hot")
	k := f.s.RawKey(f.part, []byte("k"))
	n := 0
	restore := etcdkv.SetBeforeBlindAttemptForTest(func() {
		n++
		if _, err := f.srv.Client.Put(ctx, k, fmt.Sprintf("theirs%d", n)); err != nil {
			t.Error(err)
		}
	})
	defer restore()
	for _, write := range []struct {
		name string
		do   func() error
	}{
		{"set", func() error { return f.s.Set(ctx, f.part, []byte("k"), []byte("mine")) }},
		{"delete", func() error { return f.s.Delete(ctx, f.part, []byte("k")) }},
		{"set and read", func() error {
			_, err := f.s.SetAndRead(ctx, writesOf(f.part, "mine", "k", "other"), nil)
			return err
		}},
	} {
		n = 0
		err := write.do()
		if !errors.Is(err, etcdkv.ErrContended) || !errors.Is(err, kv.ErrUnavailable) || errors.Is(err, kv.ErrAmbiguous) {
			t.Fatalf("%s: %v, want ErrContended (kv.ErrUnavailable, not ambiguous)", write.name, err)
		}
		if n < 2 {
			t.Fatalf("%s: gave up after %d attempts", write.name, n)
		}
		f.want(t, "k", fmt.Sprintf("theirs%d", n))
		f.want(t, "other", "")
	}
	restore()
	if err := f.s.Set(ctx, f.part, []byte("k"), []byte("mine")); err != nil {
		t.Fatal(err)
	}
	f.want(t, "k", "mine")
}
