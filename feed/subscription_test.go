package feed_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"graveler/feed"
	"graveler/keys"
)

// TestCatchUpJoinsWhenIdle: a slow subscriber's catch-up reaches etcd's
// current revision with its offer to join the ring dropped (its buffer
// held the last change), and restarts its watch after that revision,
// which etcd answers no progress request for while nothing is written.
// The catch-up must still offer again, so that on an idle etcd the
// subscription joins the ring and its bookmarks reach the current
// revision: a token left behind would be compacted away, and a resume
// elsewhere answered REVISION_COMPACTED although nothing was missed.
func TestCatchUpJoinsWhenIdle(t *testing.T) {
	e := newEnv(t, feed.Config{RingSize: 1, CatchUpBuffer: 1})
	e.createRepo("rep")
	from := e.rev()
	e.churner("rep", 3).steps(8)
	// A write in the watched range that is no ref change (the cleaner's
	// work list), as the last revision.
	if _, err := e.srv.Client.Put(e.ctx, e.store.RawKey(keys.Deleted(), []byte("tokens/zz")), "x"); err != nil {
		t.Fatal(err)
	}
	cur := e.rev()
	e.waitHub(cur)
	live := e.subscribe(feed.Request{})
	s := e.subscribe(feed.Request{StartRevision: from})
	if !s.CatchingUp() {
		t.Fatal("not catching up")
	}
	var last, liveLast int64
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && (last < cur || liveLast < cur) {
		time.Sleep(20 * time.Millisecond) // a consumer that processes each message
		ctx, cancel := context.WithTimeout(e.ctx, time.Second)
		m, err := s.Next(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		last = m.ResumeRevision
		ctx, cancel = context.WithTimeout(e.ctx, 50*time.Millisecond)
		if lm, err := live.Next(ctx); err == nil {
			liveLast = lm.ResumeRevision
		}
		cancel()
	}
	t.Logf("etcd at %d; live bookmark %d; resumed subscription at %d, catching up %v", cur, liveLast, last, s.CatchingUp())
	if last < cur {
		// What periodic compaction does on an idle cluster.
		if _, err := e.srv.Client.Compact(e.ctx, cur); err != nil {
			t.Fatal(err)
		}
		// Another replica, whose hub started after the changes.
		other := newEnvOn(t, e.srv, feed.Config{})
		other.waitHub(cur)
		_, err := other.feed.Subscribe(e.ctx, feed.Request{StartRevision: last})
		_, lerr := other.feed.Subscribe(e.ctx, feed.Request{StartRevision: liveLast})
		t.Fatalf("after 5s of bookmarks the subscription still resumes at %d (etcd at %d, catching up %v); after compaction at %d resuming it gives %v (compacted: %v), the live one's token %d gives %v",
			last, cur, s.CatchingUp(), cur, err, errors.Is(err, feed.ErrCompacted), liveLast, lerr)
	}
}
