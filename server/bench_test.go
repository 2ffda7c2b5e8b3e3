//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	pb "graveler/api/graveler/v1"
	"graveler/graveler"
)

// entryService answers Get and Set at once, so that a benchmark through it
// measures the server's own cost per call (transport, interceptor, names,
// conversion) and none of the store's.
type entryService struct {
	Service
	v graveler.Value
}

func (f *entryService) Get(ctx context.Context, repo graveler.RepositoryID, ref graveler.Ref, key graveler.Key) (*graveler.Value, error) {
	return &f.v, nil
}

func (f *entryService) Set(ctx context.Context, repo graveler.RepositoryID, branch graveler.BranchID, key graveler.Key, value graveler.Value, opts graveler.SetOptions) error {
	return nil
}

// benchServer serves an entryService as gravelerd does (production log
// encoder at info, to nowhere; default access log mode) and returns a
// client connected to it over loopback TCP.
func benchServer(b *testing.B, o GRPCOptions) pb.GravelerServiceClient {
	b.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))
	svc := &entryService{v: graveler.Value{Identity: make([]byte, 16), Data: make([]byte, 128)}}
	g := NewGRPCServer(New(svc, Config{StorageNamespaceRoot: "mem://x"}), withLogger(o, log))
	go func() { _ = g.Server.Serve(lis) }()
	b.Cleanup(g.Server.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return pb.NewGravelerServiceClient(conn)
}

// BenchmarkGRPCGetEntry and BenchmarkGRPCPutEntry time one call through
// gRPC on loopback, client and server in this process, with a service that
// does no work: what gravelerd adds to a read or a staged write before
// the store. Run with -benchmem -cpu 2 to compare allocations per call.
func BenchmarkGRPCGetEntry(b *testing.B) {
	req := &pb.GetEntryRequest{Repository: "repositories/bench", Ref: "main", Key: []byte("s0000/000000000042xxxxxxxxxxxxxx")}
	benchCalls(b, func(c pb.GravelerServiceClient) error {
		_, err := c.GetEntry(context.Background(), req)
		return err
	})
}

func BenchmarkGRPCPutEntry(b *testing.B) {
	req := &pb.PutEntryRequest{Branch: "repositories/bench/branches/main", Entry: &pb.Entry{
		Key: []byte("p1-0000/000000000042xxxxxxxxxxxx"), Value: &pb.Value{Identity: make([]byte, 16), Data: make([]byte, 128)}}}
	benchCalls(b, func(c pb.GravelerServiceClient) error {
		_, err := c.PutEntry(context.Background(), req)
		return err
	})
}

// benchCalls runs call from 1, 8 and 32 goroutines per GOMAXPROCS, with
// the server's stream workers and without, and reports the CPU time of
// the process per call beside the wall time.
func benchCalls(b *testing.B, call func(pb.GravelerServiceClient) error) {
	for _, workers := range []int{0, -1} {
		for _, par := range []int{1, 8, 32} {
			b.Run(fmt.Sprintf("workers=%d/par=%d", workers, par), func(b *testing.B) {
				c := benchServer(b, GRPCOptions{StreamWorkers: workers})
				b.SetParallelism(par)
				b.ReportAllocs()
				t0 := cpuTime()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := call(c); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(cpuTime()-t0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

func withLogger(o GRPCOptions, log *zap.Logger) GRPCOptions {
	o.Logger = log
	return o
}

// serverStream is the least of a grpc.ServerTransportStream that
// grpc.SetHeader needs, for calling the interceptor without a transport.
type serverStream struct{ grpc.ServerTransportStream }

func (serverStream) Method() string                  { return "/graveler.v1.GravelerService/GetEntry" }
func (serverStream) SetHeader(metadata.MD) error     { return nil }
func (serverStream) SendHeader(md metadata.MD) error { return nil }
func (serverStream) SetTrailer(md metadata.MD) error { return nil }

// BenchmarkUnaryInterceptor is the interceptor alone around a handler that
// does nothing: request id, auth check, deadline, metrics, access log.
func BenchmarkUnaryInterceptor(b *testing.B) {
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zap.InfoLevel))
	info := &grpc.UnaryServerInfo{FullMethod: "/graveler.v1.GravelerService/GetEntry"}
	o := &observer{log: log, every: 100, slow: 1e9, methods: map[string]*methodMetrics{info.FullMethod: newMethodMetrics(info.FullMethod)}}
	// The headers a grpc-go client sends, as the transport hands them on.
	md := metadata.MD{":authority": {"127.0.0.1:7070"}, "content-type": {"application/grpc"}, "user-agent": {"grpc-go/1.85.0"}}
	ctx := grpc.NewContextWithServerTransportStream(metadata.NewIncomingContext(context.Background(), md), serverStream{})
	req := &pb.GetEntryRequest{Repository: "repositories/bench", Ref: "main", Key: []byte("k")}
	resp := &pb.GetEntryResponse{}
	h := func(ctx context.Context, req any) (any, error) { return resp, nil }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := o.unary(ctx, req, info, h); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the CPU time (user and system) this process has used: on a
// machine shared with other work it varies far less than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
