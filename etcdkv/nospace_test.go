package etcdkv_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"graveler/etcdkv"
	"graveler/etcdkv/embedded"
	"graveler/etcdkv/etcdkvtest"
	"graveler/kv"
)

// noSpaceQuota is a backend quota small enough to fill in a test.
const noSpaceQuota = 4 << 20

// fillUntilNoSpace writes 64 KiB values to fresh keys of part until etcd
// answers one NOSPACE, and returns how many keys it holds. The write that
// crossed the quota may have been applied (then it is ambiguous); one
// answered kv.ErrQuotaExceeded alone must not have been.
func fillUntilNoSpace(t *testing.T, s kv.Store, part []byte) int {
	t.Helper()
	ctx := context.Background()
	val := []byte(strings.Repeat("v", 64<<10))
	for i := 0; ; i++ {
		key := fmt.Appendf(nil, "fill-%05d", i)
		err := s.Set(ctx, part, key, val)
		if errors.Is(err, kv.ErrQuotaExceeded) {
			_, _, gerr := s.Get(ctx, part, key)
			switch {
			case gerr == nil && errors.Is(err, kv.ErrAmbiguous):
				t.Logf("write %d crossed the quota and was applied: %v", i, err)
				return i + 1
			case errors.Is(gerr, kv.ErrNotFound):
				return i
			}
			t.Fatalf("write %d answered %v; reading it back: %v", i, err, gerr)
		}
		if err != nil {
			t.Fatalf("fill write %d: %v", i, err)
		}
		if i > 4*noSpaceQuota/len(val) {
			t.Fatalf("%d writes of %d bytes and no NOSPACE under a %d-byte quota", i, len(val), noSpaceQuota)
		}
	}
}

// TestNoSpace: once etcd raises NOSPACE, every kind of write the store
// makes answers kv.ErrQuotaExceeded (never ambiguous or unavailable, which
// callers retry) with a message naming the cause and the way out; reads
// and every kind of delete still work; compaction, defragmentation and
// disarming the alarm make writes work again.
func TestNoSpace(t *testing.T) {
	srv := etcdkvtest.NewServerConfig(t, embedded.Config{QuotaBackendBytes: noSpaceQuota})
	s := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	ctx := context.Background()
	part, other := []byte("staging/fill"), []byte("graveler")

	if err := s.Set(ctx, other, []byte("kept"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	_, kept, err := s.Get(ctx, other, []byte("kept"))
	if err != nil {
		t.Fatal(err)
	}
	n := fillUntilNoSpace(t, s, part)
	if !srv.NoSpaceAlarm(t) {
		t.Fatal("the quota refused a write but no NOSPACE alarm is raised")
	}

	writes := map[string]error{
		"Set":          s.Set(ctx, other, []byte("new"), []byte("x")),
		"SetIf absent": s.SetIf(ctx, other, []byte("new"), []byte("x"), kv.Absent),
		"SetIf":        s.SetIf(ctx, other, []byte("kept"), []byte("v2"), kept),
	}
	_, writes["SetAndRead"] = s.SetAndRead(ctx,
		[]kv.Write{{Partition: other, Key: []byte("new"), Value: []byte("x")}},
		[]kv.KeyRef{{Partition: other, Key: []byte("kept")}})
	for what, err := range writes {
		if !errors.Is(err, kv.ErrQuotaExceeded) || errors.Is(err, kv.ErrAmbiguous) || errors.Is(err, kv.ErrUnavailable) {
			t.Errorf("%s under NOSPACE: %v, want kv.ErrQuotaExceeded only", what, err)
			continue
		}
		for _, want := range []string{"NOSPACE", "quota-backend-bytes", "compacts", "defragments", "disarms"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s under NOSPACE: %q does not say %q", what, err, want)
			}
		}
	}

	// Reads.
	if v, _, err := s.Get(ctx, other, []byte("kept")); err != nil || string(v) != "v1" {
		t.Fatalf("get under NOSPACE: %q, %v", v, err)
	}
	got, err := s.GetMany(ctx, []kv.KeyRef{{Partition: other, Key: []byte("kept")}, {Partition: part, Key: []byte("fill-00000")}})
	if err != nil || len(got) != 2 || string(got[0].Value) != "v1" || len(got[1].Value) != 64<<10 {
		t.Fatalf("get many under NOSPACE: %d entries, %v", len(got), err)
	}
	scanned := 0
	for _, err := range s.Scan(ctx, part, kv.ScanOptions{}) {
		if err != nil {
			t.Fatalf("scan under NOSPACE: %v", err)
		}
		scanned++
	}
	if scanned != n {
		t.Fatalf("scan under NOSPACE: %d keys, want %d", scanned, n)
	}

	// Deletes, of every kind.
	if err := s.Delete(ctx, part, []byte("fill-00000")); err != nil {
		t.Fatalf("delete under NOSPACE: %v", err)
	}
	_, pred, err := s.Get(ctx, part, []byte("fill-00001"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteIf(ctx, part, []byte("fill-00001"), pred); err != nil {
		t.Fatalf("delete-if under NOSPACE: %v", err)
	}
	// A store that never wrote before the alarm (a cleaner just started)
	// cannot create its write fence (a put, and a lease grant, cost
	// quota); its deletes still work and its puts are refused as such.
	fresh := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	if err := fresh.Delete(ctx, part, []byte("fill-00002")); err != nil {
		t.Fatalf("a fresh store's delete under NOSPACE: %v", err)
	}
	_, pred, err = fresh.Get(ctx, part, []byte("fill-00003"))
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.DeleteIf(ctx, part, []byte("fill-00003"), pred); err != nil {
		t.Fatalf("a fresh store's delete-if under NOSPACE: %v", err)
	}
	if err := fresh.Set(ctx, other, []byte("new"), []byte("x")); !errors.Is(err, kv.ErrQuotaExceeded) || errors.Is(err, kv.ErrUnavailable) {
		t.Fatalf("a fresh store's write under NOSPACE: %v, want kv.ErrQuotaExceeded only", err)
	}
	dropped, err := s.DropPartition(ctx, part)
	if err != nil || dropped != int64(n-4) {
		t.Fatalf("drop under NOSPACE: %d keys, %v; want %d", dropped, err, n-4)
	}

	// Deleting alone does not end the alarm.
	if err := s.Set(ctx, other, []byte("new"), []byte("x")); !errors.Is(err, kv.ErrQuotaExceeded) {
		t.Fatalf("write after deletes, before the alarm is disarmed: %v", err)
	}
	if size := srv.FreeSpace(t); size >= noSpaceQuota/2 {
		t.Fatalf("database still %d bytes after compaction and defragmentation", size)
	}
	if err := s.Set(ctx, other, []byte("new"), []byte("x")); err != nil {
		t.Fatalf("write after the alarm was disarmed: %v", err)
	}
	if err := s.SetIf(ctx, other, []byte("kept"), []byte("v2"), kept); err != nil {
		t.Fatalf("compare-and-swap after the alarm was disarmed: %v", err)
	}
	if err := fresh.Set(ctx, other, []byte("new2"), []byte("x")); err != nil {
		t.Fatalf("the fresh store's write after the alarm was disarmed: %v", err)
	}
	time.Sleep(time.Second) // creating the fence is tried at most once a second
	if err := fresh.Set(ctx, other, []byte("new2"), []byte("y")); err != nil {
		t.Fatal(err)
	}
	if resp, err := srv.Client.Get(ctx, fresh.FenceKey()); err != nil || resp.Count != 1 {
		t.Fatalf("once there is space again the fresh store's fence key exists: %v, %v", resp, err)
	}
}

// TestNoSpaceApplied: etcd applies the write that takes its database past
// the quota and answers it NOSPACE all the same, so a NOSPACE answer is
// decided from the key's history: a write whose value the history holds
// after it was sent may have applied (Set: kv.ErrAmbiguous; SetIf, whose
// guard names the version it replaced: applied, nil), and one the history
// rules out was refused (kv.ErrQuotaExceeded alone).
func TestNoSpaceApplied(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	s := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	ctx := context.Background()
	part := []byte("p")
	put := func(key, value string) int64 {
		t.Helper()
		resp, err := srv.Client.Put(ctx, s.RawKey(part, []byte(key)), value)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, kv.ErrQuotaExceeded) || errors.Is(err, kv.ErrAmbiguous) {
			t.Errorf("%s: %v, want kv.ErrQuotaExceeded alone", what, err)
		}
	}
	ambiguous := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, kv.ErrQuotaExceeded) || !errors.Is(err, kv.ErrAmbiguous) {
			t.Errorf("%s: %v, want kv.ErrAmbiguous and kv.ErrQuotaExceeded", what, err)
		}
	}

	// Set.
	r := put("a", "v")
	ambiguous("Set whose value the key took after it was sent", s.NoSpaceSetForTest(ctx, part, []byte("a"), []byte("v"), r-1))
	refused("Set sent after the key's last change", s.NoSpaceSetForTest(ctx, part, []byte("a"), []byte("v"), r))
	refused("Set of a key never written", s.NoSpaceSetForTest(ctx, part, []byte("never"), []byte("v"), r-1))
	r = put("gone", "v")
	if _, err := srv.Client.Delete(ctx, s.RawKey(part, []byte("gone"))); err != nil {
		t.Fatal(err)
	}
	ambiguous("Set whose key was put with its value, then deleted", s.NoSpaceSetForTest(ctx, part, []byte("gone"), []byte("v"), r-1))
	r = put("other", "w")
	refused("Set whose key took another value", s.NoSpaceSetForTest(ctx, part, []byte("other"), []byte("v"), r-1))

	// SetIf at a version.
	put("c", "v1")
	_, pred, err := s.Get(ctx, part, []byte("c"))
	if err != nil {
		t.Fatal(err)
	}
	sent := s.SentAfterForTest()
	refused("SetIf whose guard still holds", s.NoSpaceSetIfForTest(ctx, part, []byte("c"), []byte("v2"), pred, sent))
	put("c", "v2") // as the write etcd applied and answered NOSPACE
	if err := s.NoSpaceSetIfForTest(ctx, part, []byte("c"), []byte("v2"), pred, sent); err != nil {
		t.Errorf("SetIf whose value replaced its version: %v, want applied", err)
	}
	refused("SetIf whose version another value replaced", s.NoSpaceSetIfForTest(ctx, part, []byte("c"), []byte("v3"), pred, sent))

	// SetIf of a missing key.
	sent = s.SentAfterForTest()
	refused("SetIf absent on a key still missing", s.NoSpaceSetIfForTest(ctx, part, []byte("d"), []byte("v"), kv.Absent, sent))
	put("d", "v")
	if err := s.NoSpaceSetIfForTest(ctx, part, []byte("d"), []byte("v"), kv.Absent, sent); err != nil {
		t.Errorf("SetIf absent that created the key: %v, want applied", err)
	}
	// Created as the write etcd applied, then deleted by another client:
	// missing again, yet it applied.
	sent = s.SentAfterForTest()
	put("e", "v")
	if _, err := srv.Client.Delete(ctx, s.RawKey(part, []byte("e"))); err != nil {
		t.Fatal(err)
	}
	if err := s.NoSpaceSetIfForTest(ctx, part, []byte("e"), []byte("v"), kv.Absent, sent); err != nil {
		t.Errorf("SetIf absent that created the key, since deleted: %v, want applied", err)
	}
}
