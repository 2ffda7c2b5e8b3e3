//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap"

	"graveler/etcdkv"
)

// TestAbandonedAttemptLandsLate reproduces, on real etcd processes, a
// Set whose first attempt went to a member frozen by SIGSTOP: the store
// gives up on that attempt after its request timeout, sends the Set
// again to a healthy member and reports success. A later Set of the same
// key is acknowledged too. When the frozen member resumes, it still
// holds the first attempt and forwards it to the leader, so the key
// reads the older value: an acknowledged write is lost. Run:
//
//	go test -tags chaos ./chaos -run '^TestAbandonedAttemptLandsLate$' -v
func TestAbandonedAttemptLandsLate(t *testing.T) {
	c := startCluster(t, 3)
	l, err := c.waitLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	f := c.follower(func(int) int { return 0 })
	both, err := etcdkv.New(context.Background(), etcdkv.Config{Endpoints: []string{f.clientURL, l.clientURL}, Prefix: "/late", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer both.Close()
	healthy, err := etcdkv.New(context.Background(), etcdkv.Config{Endpoints: []string{l.clientURL}, Prefix: "/late", Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer healthy.Close()
	part := []byte("p")
	// Warm both connections up, so that round robin sends to each.
	for i := range 4 {
		if err := both.Set(context.Background(), part, fmt.Appendf(nil, "warm%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.pause(f); err != nil {
		t.Fatal(err)
	}
	// Concurrent Sets, so that several go to the frozen member before the
	// store takes it out of rotation; one that took longer than a
	// request timeout and succeeded had its first attempt stuck there.
	type result struct {
		key  []byte
		took time.Duration
		err  error
	}
	results := make(chan result, 16)
	for i := range 16 {
		go func() {
			k := fmt.Appendf(nil, "k%02d", i)
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := both.Set(ctx, part, k, []byte("old"))
			cancel()
			results <- result{k, time.Since(start), err}
		}()
	}
	var stuck [][]byte
	for range 16 {
		r := <-results
		if r.err == nil && r.took > time.Second {
			stuck = append(stuck, r.key)
		}
	}
	if len(stuck) == 0 {
		t.Fatal("no Set was sent to the frozen member first; run again")
	}
	for _, k := range stuck {
		if err := healthy.Set(context.Background(), part, k, []byte("new")); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d keys set to old with a first attempt stuck in the frozen member, then set to new: %q", len(stuck), stuck)
	if err := c.resume(f); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	for _, key := range stuck {
		v, _, err := healthy.Get(context.Background(), part, key)
		if err != nil {
			t.Fatal(err)
		}
		if string(v) != "new" {
			t.Errorf("LOST WRITE: %s reads %q after the frozen member resumed; %q was acknowledged after %q", key, v, "new", "old")
		}
	}
}
