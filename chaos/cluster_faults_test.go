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
// three-member cluster of etcd processes while members (the leader
// included) are paused with SIGSTOP and resumed, or killed with SIGKILL and
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
	var fs faults
	wg.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(*faultGap):
			}
			down := time.Duration(500+rng.IntN(2500)) * time.Millisecond
			// Leader pause, follower pause, leader kill, follower kill.
			memberFault(t, c, rng, n%2 == 0, n%4 >= 2, down, &fs, fmt.Sprintf("(fault %d)", n))
			if t.Failed() {
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
	fmt.Printf("CHAOS-ETCD duration=%s seed=%d operations=%d acknowledged=%d failed=%d verified=%d faults=%d (%s)\n",
		*duration, s, ops.Load(), acked.Load(), failed.Load(), verified, fs.total(), &fs)
	if acked.Load() == 0 || fs.leaderPauses.Load()+fs.leaderKills.Load() == 0 {
		t.Errorf("no acknowledged writes or no leader faults: the run proved nothing")
	}
}
