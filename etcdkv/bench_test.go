package etcdkv_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/kv"
)

// Each benchmark runs the Store and the raw clientv3 call it wraps on the
// same embedded server, so the Store's overhead reads as a ratio:
//
//	go test ./etcdkv -run '^$' -bench . -benchtime 2000x -count 3

func benchSetup(b *testing.B) (*etcdkvtest.Server, *etcdkv.Store) {
	srv := etcdkvtest.NewServer(b)
	return srv, etcdkvtest.NewStoreOn(b, srv, etcdkv.Config{})
}

var benchVal = make([]byte, 256)

func BenchmarkSet(b *testing.B) {
	srv, s := benchSetup(b)
	ctx := context.Background()
	b.Run("raw", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := srv.Client.Put(ctx, fmt.Sprintf("/graveler/bench/raw%09d", i), string(benchVal)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("store", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if err := s.Set(ctx, []byte("bench"), fmt.Appendf(nil, "st%09d", i), benchVal); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkGet(b *testing.B) {
	srv, s := benchSetup(b)
	ctx := context.Background()
	if err := s.Set(ctx, []byte("bench"), []byte("k"), benchVal); err != nil {
		b.Fatal(err)
	}
	b.Run("raw", func(b *testing.B) {
		for b.Loop() {
			if _, err := srv.Client.Get(ctx, "/graveler/bench/k"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("store", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := s.Get(ctx, []byte("bench"), []byte("k")); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSetIf measures one read-modify-write cycle, the way callers use
// SetIf: read the key (its ModRevision is the predicate), then write it
// guarded by that revision. SetIf does not return the new revision, so the
// Store cannot skip the read; the raw side does the same Get + Txn, and
// the ratio compares like with like.
func BenchmarkSetIf(b *testing.B) {
	srv, s := benchSetup(b)
	ctx := context.Background()
	b.Run("raw", func(b *testing.B) {
		key := "/graveler/bench/rawcas"
		if _, err := srv.Client.Put(ctx, key, string(benchVal)); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			g, err := srv.Client.Get(ctx, key)
			if err != nil || len(g.Kvs) != 1 {
				b.Fatalf("get: %v", err)
			}
			r, err := srv.Client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", g.Kvs[0].ModRevision)).
				Then(clientv3.OpPut(key, string(benchVal))).Commit()
			if err != nil || !r.Succeeded {
				b.Fatalf("txn: succeeded=%v %v", r != nil && r.Succeeded, err)
			}
		}
	})
	b.Run("store", func(b *testing.B) {
		part, key := []byte("bench"), []byte("cas")
		if err := s.Set(ctx, part, key, benchVal); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			_, pred, err := s.Get(ctx, part, key)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.SetIf(ctx, part, key, benchVal, pred); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSetParallel measures concurrent puts (32 goroutines per
// GOMAXPROCS), where etcd batches raft proposals. Errors are reported with
// b.Error from the worker goroutines (b.Fatal must not be called there).
func BenchmarkSetParallel(b *testing.B) {
	srv, s := benchSetup(b)
	ctx := context.Background()
	var n atomic.Int64
	b.Run("raw", func(b *testing.B) {
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := srv.Client.Put(ctx, fmt.Sprintf("/graveler/bench/p%09d", n.Add(1)), string(benchVal)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("store", func(b *testing.B) {
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := s.Set(ctx, []byte("bench"), fmt.Appendf(nil, "p%09d", n.Add(1)), benchVal); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func loadPartition(b *testing.B, cli *clientv3.Client, prefix string, n int) {
	ctx := context.Background()
	for i := 0; i < n; i += 128 {
		ops := make([]clientv3.Op, 0, 128)
		for j := i; j < min(i+128, n); j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("%sk%09d", prefix, j), string(benchVal)))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
}

func benchScan(b *testing.B, n int) {
	srv, s := benchSetup(b)
	loadPartition(b, srv.Client, "/graveler/scan/", n)
	ctx := context.Background()
	b.Run("raw-paged-1000", func(b *testing.B) {
		for b.Loop() {
			from, got := "/graveler/scan/", 0
			for {
				resp, err := srv.Client.Get(ctx, from, clientv3.WithRange("/graveler/scan0"), clientv3.WithLimit(1000))
				if err != nil {
					b.Fatal(err)
				}
				got += len(resp.Kvs)
				if !resp.More {
					break
				}
				from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
			}
			if got != n {
				b.Fatalf("raw scan: %d keys, want %d", got, n)
			}
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
	})
	b.Run("raw-one-range", func(b *testing.B) {
		for b.Loop() {
			resp, err := srv.Client.Get(ctx, "/graveler/scan/", clientv3.WithPrefix())
			if err != nil {
				b.Fatal(err)
			}
			if len(resp.Kvs) != n {
				b.Fatalf("raw scan: %d keys, want %d", len(resp.Kvs), n)
			}
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
	})
	b.Run("store", func(b *testing.B) {
		for b.Loop() {
			got := 0
			for _, err := range s.Scan(ctx, []byte("scan"), kv.ScanOptions{}) {
				if err != nil {
					b.Fatal(err)
				}
				got++
			}
			if got != n {
				b.Fatalf("store scan: %d keys, want %d", got, n)
			}
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
	})
}

func BenchmarkScan10k(b *testing.B) { benchScan(b, 10_000) }

// BenchmarkScanLarge scans GRAVELER_BENCH_SCAN_KEYS keys (e.g. 1000000);
// skipped unless set, since loading takes minutes.
func BenchmarkScanLarge(b *testing.B) {
	n, _ := strconv.Atoi(os.Getenv("GRAVELER_BENCH_SCAN_KEYS"))
	if n <= 0 {
		b.Skip("set GRAVELER_BENCH_SCAN_KEYS=1000000 to run")
	}
	benchScan(b, n)
}

// BenchmarkFencedWrite prices the ways a staged write can be fenced
// against a concurrent commit, in raw etcd calls on one server, for 1, 16
// and 64 concurrent writers (ns/op is wall time over all writes):
//
//	go test ./etcdkv -run '^$' -bench FencedWrite -benchtime 2s
//
// "put" is the bare put, the baseline. "put+get" is the put, then a
// linearizable read of the branch record: the writer flow's fence today
// (its repository re-check runs beside it). "guarded-txn" is one Txn that
// puts only if the repository and branch records still have the
// revisions the writer cached: the fence folded into the write.
func BenchmarkFencedWrite(b *testing.B) {
	srv := etcdkvtest.NewServer(b)
	cli, ctx := srv.Client, context.Background()
	repo, err := cli.Put(ctx, "/graveler/fence/repo", "r")
	if err != nil {
		b.Fatal(err)
	}
	branch, err := cli.Put(ctx, "/graveler/fence/branch", "b")
	if err != nil {
		b.Fatal(err)
	}
	v := string(benchVal[:144])
	var run atomic.Int64
	for _, n := range []int{1, 16, 64} {
		parallel := func(b *testing.B, op func(key string) error) {
			prefix := fmt.Sprintf("/graveler/fence/w%d/", run.Add(1))
			var next atomic.Int64
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						if err := op(prefix + strconv.FormatInt(i, 10)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		}
		b.Run(fmt.Sprintf("writers=%d/put", n), func(b *testing.B) {
			parallel(b, func(k string) error { _, err := cli.Put(ctx, k, v); return err })
		})
		b.Run(fmt.Sprintf("writers=%d/put+get", n), func(b *testing.B) {
			parallel(b, func(k string) error {
				if _, err := cli.Put(ctx, k, v); err != nil {
					return err
				}
				_, err := cli.Get(ctx, "/graveler/fence/branch")
				return err
			})
		})
		b.Run(fmt.Sprintf("writers=%d/guarded-txn", n), func(b *testing.B) {
			parallel(b, func(k string) error {
				r, err := cli.Txn(ctx).If(
					clientv3.Compare(clientv3.ModRevision("/graveler/fence/repo"), "=", repo.Header.Revision),
					clientv3.Compare(clientv3.ModRevision("/graveler/fence/branch"), "=", branch.Header.Revision),
				).Then(clientv3.OpPut(k, v)).Commit()
				if err == nil && !r.Succeeded {
					err = fmt.Errorf("guard failed")
				}
				return err
			})
		})
	}
}
