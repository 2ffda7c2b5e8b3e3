package etcdkv_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

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
	_, s := fencedStore(t)
	ctx, part := t.Context(), []byte("p")
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
	srv, s := fencedStore(t)
	ctx, part := t.Context(), []byte("p")
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

// TestFenceLeaseEndedOnServer: the fence's lease ends on the server
// (expired while the process was paused, or revoked) before the client's
// keep-alive learns of it (at its next renewal, up to a third of the TTL
// later). The next write finds the fence key gone and creates it again:
// on a new lease, not on the dead one, and the write succeeds.
func TestFenceLeaseEndedOnServer(t *testing.T) {
	srv, s := fencedStore(t)
	ctx, part := t.Context(), []byte("p")
	resp, err := srv.Client.Get(ctx, s.FenceKey())
	if err != nil || resp.Count != 1 {
		t.Fatalf("fence key: %v, %v", resp, err)
	}
	if _, err := srv.Client.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(ctx, part, []byte("k"), []byte("v1")); err != nil {
		t.Fatalf("Set after the fence's lease ended on the server: %v", err)
	}
	if resp, err := srv.Client.Get(ctx, s.FenceKey()); err != nil || resp.Count != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("fence key after the write: %v, %v; want it on a new lease", resp, err)
	}
}

// TestCloseEndsFenceLease: Close ends the fence's lease, which deletes the
// key, even when a write is between its checks and its first attempt
// (it must not grant a lease after Close), or a fence move holds the
// fence while Close runs (Close waits for it, then revokes).
func TestCloseEndsFenceLease(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	ctx := t.Context()
	part := []byte("p")
	gone := func(t *testing.T, s *etcdkv.Store) {
		t.Helper()
		resp, err := srv.Client.Get(ctx, s.FenceKey())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count != 0 {
			t.Errorf("after Close the fence key exists, on lease %x", resp.Kvs[0].Lease)
		}
	}
	t.Run("first write in flight", func(t *testing.T) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		s, err := etcdkv.NewFromClient(cli, etcdkv.Config{})
		if err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		restore := etcdkv.SetBeforeBlindAttemptForTest(func() { once.Do(func() { s.Close() }) })
		_ = s.Set(ctx, part, []byte("k"), []byte("v"))
		restore()
		gone(t, s)
	})
	t.Run("close during a fence move", func(t *testing.T) {
		h := &multiHolder{}
		s, _ := heldStore(t, srv, h, etcdkv.Config{RequestTimeout: time.Second})
		if err := s.Set(ctx, part, []byte("k2"), []byte("v")); err != nil {
			t.Fatal(err)
		}
		rev, err := s.FenceRevForTest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h.arm("!fence")
		done := make(chan struct{})
		go func() { defer close(done); s.FenceOffForTest(ctx, rev) }()
		time.Sleep(100 * time.Millisecond)
		s.Close()
		<-done
		gone(t, s)
	})
}

// TestFenceOffLockTimeout: attempts lose their answers while a stalled
// move holds the fence, so their fenceOff calls cannot take it in time:
// first one that carried the current fence revision, then one that
// carried an older revision. The store's next write must move the fence
// past the newest of them before it is sent, so the attempt carrying the
// current revision can no longer apply (it would re-create a key the
// store deleted since). Run with -race: the pending revision is shared
// without the lock.
func TestFenceOffLockTimeout(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	s := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{RequestTimeout: 100 * time.Millisecond})
	ctx, part := t.Context(), []byte("p")
	if err := s.Set(ctx, part, []byte("k"), []byte("v0")); err != nil {
		t.Fatal(err)
	}
	older, err := s.FenceRevForTest(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.FenceOffForTest(ctx, older)
	current, err := s.FenceRevForTest(ctx)
	if err != nil || current == older {
		t.Fatalf("fence %d -> %d, %v", older, current, err)
	}
	held := s.SetTxnForTest(ctx, part, []byte("k"), []byte("late"), 1<<40)

	release := s.HoldFenceLockForTest(ctx)
	s.FenceOffForTest(ctx, current)
	s.FenceOffForTest(ctx, older)
	release()

	if err := s.Delete(ctx, part, []byte("k")); err != nil {
		t.Fatal(err)
	}
	resp, err := held.Commit()
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded {
		t.Fatalf("the attempt whose answer was lost (fence %d) applied after the store's later writes", current)
	}
}

// TestFenceMoveSentAgain: a member stops holding a SetIf whose caller gave
// up, and the fence move that follows goes to that member too (the
// balancer still has it in rotation). The move is sent again, elsewhere,
// before the caller is answered; the held attempt then never applies.
func TestFenceMoveSentAgain(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	h := &multiHolder{}
	s, _ := heldStore(t, srv, h, etcdkv.Config{RequestTimeout: 300 * time.Millisecond})
	ctx := t.Context()
	part := []byte("once")
	if err := s.Set(ctx, part, []byte("k"), []byte("v0")); err != nil {
		t.Fatal(err)
	}
	_, p, err := s.Get(ctx, part, []byte("k"))
	if err != nil {
		t.Fatal(err)
	}
	h.arm("once/k", "!fence")
	c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := s.SetIf(c, part, []byte("k"), []byte("v1"), p); err == nil {
		t.Fatal("SetIf succeeded although its attempt was held")
	}
	if !h.wasHeld("!fence") {
		t.Fatal("no fence move was held: the ordering under test did not happen")
	}
	if h.deliver(t, srv, "once/k") {
		v, _, _ := s.Get(ctx, part, []byte("k"))
		t.Errorf("the held attempt applied after its caller was answered (key now %q)", v)
	}
}

// fencedStore is a store on a fresh etcd that has written p/k = v0, and
// so holds its fence key.
func fencedStore(t *testing.T) (*etcdkvtest.Server, *etcdkv.Store) {
	t.Helper()
	srv := etcdkvtest.NewServer(t)
	s := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	if err := s.Set(t.Context(), []byte("p"), []byte("k"), []byte("v0")); err != nil {
		t.Fatal(err)
	}
	return srv, s
}
