package daemon_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	pb "graveler/api/graveler/v1"
	"graveler/client"
	"graveler/etcdkv/embedded"
	"graveler/server/daemon"
	"graveler/server/daemon/daemontest"
)

// BenchmarkStagedWrites compares staged writes through gRPC (PutEntry:
// client -> gravelerd -> Graveler -> etcd) with raw etcd puts of the same
// size from the same number of goroutines, on one embedded etcd. The ratio
// of the two ns/op figures is the overhead of the whole stack. Run:
//
//	go test -run '^$' -bench BenchmarkStagedWrites -benchtime 5s ./server/daemon/
func BenchmarkStagedWrites(b *testing.B) {
	etcd, err := embedded.Start(embedded.Config{Dir: b.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer etcd.Close()
	srv := daemontest.Start(b, func(c *daemon.Config) {
		c.Etcd.Endpoints = etcd.Endpoints()
		// The production encoder at info, as gravelerd logs, but to nowhere.
		c.Logger = zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))
	})
	ctx := context.Background()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	cl, err := client.Dial(dctx, srv.Addr)
	cancel()
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "bench"}); err != nil {
		b.Fatal(err)
	}
	raw, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()

	data := make([]byte, 100)
	identity := make([]byte, 32)
	for _, writers := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("writers=%d/raw-etcd", writers), func(b *testing.B) {
			parallel(b, writers, func(i int64) error {
				_, err := raw.Put(ctx, fmt.Sprintf("/bench-raw/%d/%d", writers, i), string(data))
				return err
			})
		})
		b.Run(fmt.Sprintf("writers=%d/grpc", writers), func(b *testing.B) {
			branch := client.Branch("bench", "main")
			parallel(b, writers, func(i int64) error {
				_, err := cl.PutEntry(ctx, &pb.PutEntryRequest{Branch: branch, Entry: &pb.Entry{
					Key: []byte(fmt.Sprintf("grpc/%d/%d", writers, i)), Value: &pb.Value{Identity: identity, Data: data}}})
				return err
			})
		})
	}
}

// parallel runs b.N calls of op from exactly writers goroutines.
func parallel(b *testing.B, writers int, op func(i int64) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range writers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
}
