package feed_test

import (
	"context"
	"errors"
	"fmt"
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

// TestCatchUpErrorNotLostToCallContext: a catch-up's error (its start
// compacted while it paused for a slow subscriber) is read from its
// buffer by a Next whose context has ended. Next may answer that
// context's error, but the catch-up's error must end the subscription
// and be returned, not dropped: the catch-up has ended, and the
// subscription would send only bookmarks from then on.
func TestCatchUpErrorNotLostToCallContext(t *testing.T) {
	e := newEnv(t, feed.Config{RingSize: 1, CatchUpBuffer: 1})
	e.createRepo("rep")
	from := e.rev()
	c := e.churner("rep", 3)
	c.steps(8)
	// More than the 1000 revisions etcd sends a lagging watch at once.
	for i := range 1100 {
		if _, err := e.srv.Client.Put(e.ctx, e.store.RawKey(keys.Deleted(), []byte(fmt.Sprintf("tokens/zz%d", i))), "x"); err != nil {
			t.Fatal(err)
		}
	}
	c.steps(2)
	e.waitHub(e.rev())
	s := e.subscribe(feed.Request{StartRevision: from})
	time.Sleep(300 * time.Millisecond) // the catch-up fills its buffer and pauses
	if _, err := e.srv.Client.Compact(e.ctx, e.rev()); err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(e.ctx)
	cancel()
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		_, err := s.Next(done)
		if errors.Is(err, feed.ErrCompacted) {
			return
		}
		if err != nil {
			time.Sleep(10 * time.Millisecond)
		}
	}
	for range 5 {
		ctx, c := context.WithTimeout(e.ctx, 2*time.Second)
		_, err := s.Next(ctx)
		c()
		if errors.Is(err, feed.ErrCompacted) {
			return
		}
		if err != nil {
			t.Fatalf("after the compaction: %v, want ErrCompacted", err)
		}
	}
	t.Fatal("the catch-up's compaction error was never returned")
}
