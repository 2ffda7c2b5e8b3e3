package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "graveler/api/graveler/v1"
	"graveler/graveler"
)

// plainServer serves the health service (and an unimplemented Graveler
// service) over plain text.
func plainServer(t *testing.T, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	pb.RegisterGravelerServiceServer(gs, pb.UnimplementedGravelerServiceServer{})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return lis.Addr().String()
}

func closedPort(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// TestDialFailsFast: Dial returns the cause of the first failed connection
// attempt rather than waiting for its context to end.
func TestDialFailsFast(t *testing.T) {
	// Far longer than a connection attempt: reaching it is the bug.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	_, err := Dial(ctx, closedPort(t))
	if !errors.Is(err, ErrNotReady) || !errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("closed port: %v", err)
	}

	addr := plainServer(t)
	_, err = Dial(ctx, addr, WithTLS(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})) //nolint:gosec // test
	if !errors.Is(err, ErrNotReady) || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "handshake") {
		t.Fatalf("TLS to a plain-text server: %v", err)
	}

	cl, err := Dial(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()

	// An address that accepts nothing and refuses nothing: the context ends
	// the wait, and the error says so.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() { // accept TCP, never speak HTTP/2
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer scancel()
	if _, err := Dial(sctx, lis.Addr().String()); !errors.Is(err, ErrNotReady) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("silent server: %v", err)
	}
}

// TestLimitsCheckedBeforeSending: requests over the server's limits fail in
// the client with the server's code and reason and a message naming the
// limit; a request over a message size limit matches ErrMessageTooLarge,
// whoever found it.
func TestLimitsCheckedBeforeSending(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := Dial(ctx, plainServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	entry := func(key, id, data int) *pb.Entry {
		return &pb.Entry{Key: bytes.Repeat([]byte("k"), key), Value: &pb.Value{Identity: bytes.Repeat([]byte("i"), id), Data: make([]byte, data)}}
	}
	for name, tc := range map[string]struct {
		call   func() error
		reason string
		limit  string
	}{
		"data": {func() error {
			_, err := cl.PutEntry(ctx, &pb.PutEntryRequest{Branch: Branch("r", "b"), Entry: entry(1, 1, 10<<20)})
			return err
		}, "VALUE_TOO_LARGE", "524288 bytes (512 KiB)"},
		"identity": {func() error {
			_, err := cl.PutEntry(ctx, &pb.PutEntryRequest{Branch: Branch("r", "b"), Entry: entry(1, 257, 1)})
			return err
		}, "VALUE_TOO_LARGE", "256 bytes"},
		"key in batch": {func() error {
			_, err := cl.BatchPutEntries(ctx, &pb.BatchPutEntriesRequest{Branch: Branch("r", "b"), Entries: []*pb.Entry{entry(1, 1, 1), entry(1025, 1, 1)}})
			return err
		}, "INVALID_KEY", "1024 bytes (1 KiB)"},
		"repository id": {func() error {
			_, err := cl.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: strings.Repeat("r", 64)})
			return err
		}, "INVALID_REPOSITORY_ID", "63 bytes"},
		"branch id": {func() error {
			_, err := cl.CreateBranch(ctx, &pb.CreateBranchRequest{Parent: Repository("r"), BranchId: strings.Repeat("b", 257)})
			return err
		}, "INVALID_BRANCH_ID", "256 bytes"},
	} {
		err := tc.call()
		if !errors.Is(err, ErrInvalidArgument) || Reason(err) != tc.reason || !strings.Contains(err.Error(), "the limit is "+tc.limit) ||
			errors.Is(err, ErrMessageTooLarge) {
			t.Errorf("%s: %v", name, err)
		}
	}

	// Each entry is within limits, the message is not.
	var es []*pb.Entry
	for range 10 {
		es = append(es, entry(1, 1, 500<<10))
	}
	_, err = cl.BatchPutEntries(ctx, &pb.BatchPutEntriesRequest{Branch: Branch("r", "b"), Entries: es})
	if !errors.Is(err, ErrMessageTooLarge) || !errors.Is(err, ErrResourceExhausted) || Reason(err) != "REQUEST_TOO_LARGE" ||
		!strings.Contains(err.Error(), "the limit is 4194304 bytes (4 MiB)") {
		t.Fatalf("large batch: %v", err)
	}
}

// TestServerMessageSizeError: gRPC's own message size refusal (no
// ErrorInfo) matches ErrMessageTooLarge, so that callers can tell it from
// a RESOURCE_EXHAUSTED worth retrying.
func TestServerMessageSizeError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := Dial(ctx, plainServer(t, grpc.MaxRecvMsgSize(1024)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	_, err = cl.PutEntry(ctx, &pb.PutEntryRequest{Branch: Branch("r", "b"), Entry: &pb.Entry{Key: []byte("k"), Value: &pb.Value{Identity: []byte("i"), Data: make([]byte, 2048)}}})
	if !errors.Is(err, ErrMessageTooLarge) || !errors.Is(err, ErrResourceExhausted) {
		t.Fatalf("over the server's limit: %v", err)
	}
	quota, err := status.New(codes.ResourceExhausted, "etcdserver: mvcc: database space exceeded").WithDetails(
		&errdetails.ErrorInfo{Reason: "STORE_QUOTA_EXCEEDED", Domain: "graveler.v1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := fromStatus(quota.Err()); errors.Is(err, ErrMessageTooLarge) || !errors.Is(err, ErrResourceExhausted) {
		t.Fatal("an etcd quota error is not a message size error")
	}
}

// TestLimitsMatchTheServer: the client's copy of the limits is the
// server's.
func TestLimitsMatchTheServer(t *testing.T) {
	for name, p := range map[string][2]int{
		"key": {MaxKeyLen, graveler.MaxKeyLen}, "identity": {MaxIdentityLen, graveler.MaxIdentityLen},
		"data": {MaxValueDataLen, graveler.MaxValueDataLen}, "repository": {MaxRepositoryIDLen, graveler.MaxRepositoryIDLen},
		"branch": {MaxBranchIDLen, graveler.MaxBranchIDLen}, "tag": {MaxTagIDLen, graveler.MaxTagIDLen},
	} {
		if p[0] != p[1] {
			t.Errorf("%s: client %d, server %d", name, p[0], p[1])
		}
	}
}
