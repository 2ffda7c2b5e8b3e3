//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"graveler/cleaner"
	"graveler/etcdkv"
)

// runCleaner runs one cleaner pass against the cluster, with the sweep on
// and no grace: the workload has stopped, so nothing is in flight.
func runCleaner(ctx context.Context, t *testing.T, endpoints []string, root string) error {
	store, err := etcdkv.New(ctx, etcdkv.Config{Endpoints: endpoints, Prefix: root, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer store.Close()
	c := cleaner.New(store, cleaner.Config{
		Sweep:      true,
		SweepGrace: -1,
	})
	sum, err := c.RunOnce(ctx)
	t.Logf("cleaner: %+v", sum)
	if err != nil {
		return err
	}
	if sum.Errors > 0 {
		return fmt.Errorf("cleaner: %d failed steps: %v", sum.Errors, sum.Failures)
	}
	return nil
}

// cleanerDaemons are cleaner replicas in daemon mode (cleaner.Run with
// an etcd election, as deployed) running while clients work and faults
// are injected, with the sweep on and no grace - the most aggressive
// setting: whatever they drop must be garbage, or the checker finds a
// lost write. Their passes fail while etcd has no quorum for them and
// are retried; the leader's lease lapses when its member stops.
type cleanerDaemons struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	start  cleanerMetrics
}

func startCleanerDaemons(t *testing.T, endpoints []string, root string, n int, interval time.Duration) *cleanerDaemons {
	ctx, cancel := context.WithCancel(context.Background())
	d := &cleanerDaemons{cancel: cancel, start: readCleanerMetrics(t)}
	for i := range n {
		store, err := etcdkv.New(ctx, etcdkv.Config{Endpoints: endpoints, Prefix: root, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			cancel()
			t.Fatalf("cleaner %d: %v", i, err)
		}
		c := cleaner.New(store, cleaner.Config{
			Sweep:      true,
			SweepGrace: -1,
			Interval:   interval,
			Timeout:    30 * time.Second,
			Elector:    cleaner.NewEtcdElector(store.Client(), cleaner.ElectionKey(store.Prefix()), fmt.Sprintf("chaos-cleaner-%d", i), 2),
		})
		d.wg.Go(func() {
			defer store.Close()
			if err := c.Run(ctx); err != nil {
				t.Errorf("cleaner %d: %v", i, err)
			}
		})
	}
	return d
}

// stop stops the replicas and returns what they did.
func (d *cleanerDaemons) stop(t *testing.T) cleanerMetrics {
	d.cancel()
	d.wg.Wait()
	return readCleanerMetrics(t).minus(d.start)
}

// cleanerMetrics are the cleaner's process-wide counters.
type cleanerMetrics struct {
	passes, failedPasses, partitions, keys float64
}

func (m cleanerMetrics) minus(o cleanerMetrics) cleanerMetrics {
	return cleanerMetrics{m.passes - o.passes, m.failedPasses - o.failedPasses, m.partitions - o.partitions, m.keys - o.keys}
}

func readCleanerMetrics(t *testing.T) cleanerMetrics {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var m cleanerMetrics
	for _, mf := range mfs {
		for _, x := range mf.GetMetric() {
			v := x.GetCounter().GetValue()
			switch mf.GetName() {
			case "graveler_cleaner_runs_total":
				m.passes += v
				for _, l := range x.GetLabel() {
					if l.GetName() == "outcome" && l.GetValue() == "error" {
						m.failedPasses += v
					}
				}
			case "graveler_cleaner_partitions_reclaimed_total":
				m.partitions += v
			case "graveler_cleaner_keys_reclaimed_total":
				m.keys += v
			}
		}
	}
	return m
}
