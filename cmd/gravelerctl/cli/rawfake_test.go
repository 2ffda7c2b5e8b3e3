package cli_test

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "graveler/api/graveler/v1"
)

// rawFake implements a few API methods directly, answering what a test
// needs (a fast-forward, a server version, a server that fails part way
// through a bulk put) whatever the real service does; the rest are
// UNIMPLEMENTED.
type rawFake struct {
	pb.UnimplementedGravelerServiceServer
	mu sync.Mutex
	// batches are the sizes of the BatchPutEntries requests received.
	batches []int
	// failAfter: BatchPutEntries fails with UNAVAILABLE from this call on (0: never).
	failAfter int
	merges    []*pb.MergeRequest
}

func (f *rawFake) BatchPutEntries(ctx context.Context, req *pb.BatchPutEntriesRequest) (*pb.BatchPutEntriesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failAfter > 0 && len(f.batches) >= f.failAfter {
		return nil, status.Error(codes.Unavailable, "fake: server going away")
	}
	f.batches = append(f.batches, len(req.GetEntries()))
	return &pb.BatchPutEntriesResponse{}, nil
}

func (f *rawFake) Merge(ctx context.Context, req *pb.MergeRequest) (*pb.MergeResponse, error) {
	f.mu.Lock()
	f.merges = append(f.merges, req)
	f.mu.Unlock()
	if req.GetNoFf() {
		return &pb.MergeResponse{Revision: 42, Commit: &pb.Commit{Id: "m0000000000000000000000000000000000000000000000000000000000000001",
			Message: req.GetOptions().GetMessage(), Parents: []string{"d000000000000000", "s000000000000000"}}}, nil
	}
	return &pb.MergeResponse{Revision: 41, FastForward: true, Commit: &pb.Commit{Id: "s000000000000000000000000000000000000000000000000000000000000002"}}, nil
}

func (f *rawFake) GetServerVersion(context.Context, *pb.GetServerVersionRequest) (*pb.GetServerVersionResponse, error) {
	return &pb.GetServerVersionResponse{Version: "v9.8.7", GoVersion: "go1.99"}, nil
}

func startRawFake(t *testing.T, f *rawFake, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	pb.RegisterGravelerServiceServer(gs, f)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}
