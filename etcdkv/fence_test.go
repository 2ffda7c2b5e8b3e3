package etcdkv_test

import (
	"context"
	"errors"
	"testing"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/kv"
)

// TestFenceMovesUnderAnAttempt: another write of the same store loses its
// answer and moves the fence between the moment an attempt reads the
// fence and the moment it is sent. etcd refuses that attempt for the
// fence, not for its own guard: it did not apply and is sent again with
// the new fence. A compare-and-swap must succeed, not be reported as a
// lost race; a create must succeed, not be reported as finding the key.
func TestFenceMovesUnderAnAttempt(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	s := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	ctx := t.Context()
	part := []byte("p")
	if err := s.Set(ctx, part, []byte("k"), []byte("v0")); err != nil {
		t.Fatal(err)
	}
	_, pred, err := s.Get(ctx, part, []byte("k"))
	if err != nil {
		t.Fatal(err)
	}
	moves := 0
	restore := etcdkv.SetBeforeFencedSendForTest(func(rev int64) {
		if moves == 0 {
			moves++
			s.FenceOffForTest(context.Background(), rev)
		}
	})
	defer restore()
	cases := []struct {
		name  string
		write func() error
	}{
		{"SetIf", func() error { return s.SetIf(ctx, part, []byte("k"), []byte("v1"), pred) }},
		{"SetIf absent", func() error { return s.SetIf(ctx, part, []byte("new"), []byte("v1"), kv.Absent) }},
		{"Set", func() error { return s.Set(ctx, part, []byte("k"), []byte("v2")) }},
		{"SetAndReadUnless", func() error {
			_, ok, err := s.SetAndReadUnless(ctx, []kv.KeyRef{{Partition: part, Key: []byte("absent")}}, []kv.Write{{Partition: part, Key: []byte("k"), Value: []byte("v3")}}, nil)
			if err == nil && !ok {
				return errors.New("reported an absent key present")
			}
			return err
		}},
	}
	for _, c := range cases {
		moves = 0
		before, err := s.FenceRevForTest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.write(); err != nil {
			t.Errorf("%s, whose first attempt met a moved fence: %v", c.name, err)
		}
		after, err := s.FenceRevForTest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if moves != 1 || after == before {
			t.Errorf("%s: the fence did not move under the attempt (moves %d, revision %d then %d): the ordering under test did not happen", c.name, moves, before, after)
		}
	}
	if v, _, err := s.Get(ctx, part, []byte("k")); err != nil || string(v) != "v3" {
		t.Fatalf("k = %q, %v; want v3", v, err)
	}
}

// TestFenceFoundMoved: the fence key is not where the store last knew it:
// an earlier move whose answer was lost applied, or the lease expired and
// etcd deleted the key. Writes go on (the store adopts the key's revision
// or creates it again), and a lost attempt is still fenced.
func TestFenceFoundMoved(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	s := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	ctx := t.Context()
	part := []byte("p")
	if err := s.Set(ctx, part, []byte("k"), []byte("v0")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		move func(t *testing.T)
	}{
		{"moved by a move whose answer was lost", func(t *testing.T) {
			if _, err := srv.Client.Put(ctx, s.FenceKey(), ""); err != nil {
				t.Fatal(err)
			}
		}},
		{"deleted with its lease", func(t *testing.T) {
			if _, err := srv.Client.Delete(ctx, s.FenceKey()); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stale, err := s.FenceRevForTest(ctx)
			if err != nil {
				t.Fatal(err)
			}
			c.move(t)
			_, pred, err := s.Get(ctx, part, []byte("k"))
			if err != nil {
				t.Fatal(err)
			}
			v := []byte{'a' + byte(i)}
			if err := s.SetIf(ctx, part, []byte("k"), v, pred); err != nil {
				t.Fatalf("SetIf after the fence moved behind the store's back: %v", err)
			}
			// An attempt lost now is fenced: the store moves the fence
			// from where it really is.
			now, err := s.FenceRevForTest(ctx)
			if err != nil || now == stale {
				t.Fatalf("the store still sends fence revision %d (%v)", now, err)
			}
			s.FenceOffForTest(ctx, now)
			if moved, err := s.FenceRevForTest(ctx); err != nil || moved == now {
				t.Fatalf("fence at %d after a move from %d (%v)", moved, now, err)
			}
			if resp, err := srv.Client.Get(ctx, s.FenceKey()); err != nil || resp.Count != 1 || resp.Kvs[0].Lease == 0 {
				t.Fatalf("fence key after the move: %v, %v; want it present, on a lease", resp, err)
			}
		})
	}
}
