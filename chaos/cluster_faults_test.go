//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestClusterFaults checks the fault machinery and the layer below
// gravelerd on their own: clients put unique keys straight into the
// three-member cluster while members (the leader included) are stopped and
// restarted; afterwards every acknowledged put must be readable with its
// value. Run: go test -tags chaos ./chaos -run TestClusterFaults -v -chaos.duration=30s
func TestClusterFaults(t *testing.T) {
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(s, 0))
	c := startCluster(t, 3)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	ctx, stop := context.WithTimeout(context.Background(), *duration)
	defer stop()
	var ops, acked, failed atomic.Int64
	var mu sync.Mutex
	ackedKeys := map[string]string{}
	var wg sync.WaitGroup
	for w := range *writers {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				k, v := fmt.Sprintf("/chaos-raw/w%02d/%06d", w, n), fmt.Sprintf("v-%d-%d", w, n)
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := cli.Put(cctx, k, v)
				cancel()
				if ctx.Err() != nil {
					return
				}
				ops.Add(1)
				if err != nil {
					failed.Add(1)
					continue
				}
				acked.Add(1)
				mu.Lock()
				ackedKeys[k] = v
				mu.Unlock()
			}
		})
	}
	var leaders, members atomic.Int64
	wg.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(*faultGap):
			}
			m := c.members[rng.IntN(len(c.members))]
			if n%2 == 0 {
				if m = c.leader(); m == nil {
					continue
				}
				leaders.Add(1)
			} else {
				members.Add(1)
			}
			down := time.Duration(500+rng.IntN(2500)) * time.Millisecond
			t.Logf("fault %d: stop %s for %s", n, m.name, down)
			if err := c.restart(m, down); err != nil {
				t.Errorf("restart %s: %v", m.name, err)
				return
			}
		}
	})
	wg.Wait()

	check, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// One linearizable range read of everything written, retried until the
	// cluster answers.
	var resp *clientv3.GetResponse
	if err := until(check, func(ctx context.Context) error {
		var err error
		resp, err = cli.Get(ctx, "/chaos-raw/", clientv3.WithPrefix())
		return err
	}); err != nil {
		t.Fatalf("read back: %v", err)
	}
	stored := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		stored[string(kv.Key)] = string(kv.Value)
	}
	var verified int
	for k, v := range ackedKeys {
		if got, ok := stored[k]; !ok || got != v {
			t.Errorf("LOST WRITE: %s acknowledged as %q, now %q (present %v)", k, v, got, ok)
			continue
		}
		verified++
	}
	fmt.Printf("CHAOS-ETCD duration=%s seed=%d operations=%d acknowledged=%d failed=%d verified=%d faults=%d (leader stops %d, member stops %d)\n",
		*duration, s, ops.Load(), acked.Load(), failed.Load(), verified, leaders.Load()+members.Load(), leaders.Load(), members.Load())
	if acked.Load() == 0 || leaders.Load() == 0 {
		t.Errorf("no acknowledged writes or no leader faults: the run proved nothing")
	}
}
