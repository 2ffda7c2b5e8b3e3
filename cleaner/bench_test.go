package cleaner_test

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/cleaner"
	"graveler/etcdkv"
	"graveler/graveler/ref"
	"graveler/keys"
)

var benchKeys = flag.Int("cleaner.bench-keys", 1_000_000, "keys in the staging partition BenchmarkReclaimStagingPartition reclaims")

// populate writes n keys into partition part of store straight through
// etcd, in transactions of 128 puts (etcd's default op limit) from 8
// goroutines.
func populate(b *testing.B, cli *clientv3.Client, store *etcdkv.Store, part []byte, n int) {
	b.Helper()
	const batch, workers = 128, 8
	prefix := store.RawPrefix(part)
	value := string(make([]byte, 64))
	jobs := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	for range workers {
		wg.Go(func() {
			for start := range jobs {
				ops := make([]clientv3.Op, 0, batch)
				for i := start; i < min(start+batch, n); i++ {
					ops = append(ops, clientv3.OpPut(prefix+string(keys.Entry(fmt.Appendf(nil, "data/%09d", i))), value))
				}
				if _, err := cli.Txn(context.Background()).Then(ops...).Commit(); err != nil {
					once.Do(func() { firstErr = err })
				}
			}
		})
	}
	for start := 0; start < n; start += batch {
		jobs <- start
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}

// BenchmarkReclaimStagingPartition: one cleaner pass draining a queued
// staging token that holds -cleaner.bench-keys keys (default 1M), on
// embedded etcd. Reports keys reclaimed per second of the pass (goal:
// 100k keys/s or more):
//
//	go test ./cleaner -run '^$' -bench ReclaimStagingPartition -benchtime 1x
func BenchmarkReclaimStagingPartition(b *testing.B) {
	store, cli, lister := newEtcd(b)
	ctx := context.Background()
	n := *benchKeys
	var reclaimed int64
	var elapsed float64
	for b.Loop() {
		b.StopTimer()
		tok := "bench." + ref.NewID()
		populate(b, cli, store, keys.StagingPartition(tok), n)
		if err := store.Set(ctx, keys.Deleted(), keys.DeletedToken(tok), []byte("x")); err != nil {
			b.Fatal(err)
		}
		c := cleaner.New(store, cleaner.Config{Lister: lister})
		b.StartTimer()
		sum, err := c.RunOnce(ctx)
		b.StopTimer()
		if err != nil || sum.KeysReclaimed != int64(n) {
			b.Fatalf("pass: %+v, %v; want %d keys", sum, err, n)
		}
		reclaimed += sum.KeysReclaimed
		elapsed += sum.Duration.Seconds()
		b.StartTimer()
	}
	b.ReportMetric(float64(reclaimed)/elapsed, "keys/s")
	b.ReportMetric(float64(n), "keys/partition")
}
