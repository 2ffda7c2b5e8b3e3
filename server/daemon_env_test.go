package server_test

import (
	"context"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "graveler/api/graveler/v1"
	"graveler/server/daemon/daemontest"
)

// daemonEnv is a real gravelerd on embedded etcd with repository "repo":
// main has one commit over the initial one (keys a/1, a/2, b/1), and
// branch dev and tag v1 are at it.
type daemonEnv struct {
	c    pb.GravelerServiceClient
	conn *grpc.ClientConn
	head string
}

// The client sends and receives messages past gRPC's 4 MiB default, so
// that the server's own limits are what a test meets.
func startDaemon(t *testing.T) *daemonEnv {
	t.Helper()
	srv := daemontest.Start(t, nil)
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	e := &daemonEnv{c: pb.NewGravelerServiceClient(conn), conn: conn}
	ctx := context.Background()
	if _, err := e.c.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "repo"}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a/1", "a/2", "b/1"} {
		e.put(t, "main", k)
	}
	r, err := e.c.Commit(ctx, &pb.CommitRequest{Branch: "repositories/repo/branches/main", Options: &pb.CommitOptions{Message: "first"}})
	if err != nil {
		t.Fatal(err)
	}
	e.head = r.GetCommit().GetId()
	if _, err := e.c.CreateBranch(ctx, &pb.CreateBranchRequest{Parent: "repositories/repo", BranchId: "dev", SourceRef: "main"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.CreateTag(ctx, &pb.CreateTagRequest{Parent: "repositories/repo", TagId: "v1", Ref: "main"}); err != nil {
		t.Fatal(err)
	}
	return e
}

// put stages key on branch of "repo".
func (e *daemonEnv) put(t *testing.T, branch, key string) {
	t.Helper()
	_, err := e.c.PutEntry(context.Background(), &pb.PutEntryRequest{Branch: "repositories/repo/branches/" + branch,
		Entry: &pb.Entry{Key: []byte(key), Value: &pb.Value{Identity: []byte("id-" + key), Data: []byte(key)}}})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// statusInfo returns the code, ErrorInfo reason and message of err.
func statusInfo(err error) (codes.Code, string, string) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), ei.GetReason(), st.Message()
		}
	}
	return st.Code(), "", st.Message()
}

// statusMeta returns the ErrorInfo metadata of err.
func statusMeta(err error) map[string]string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetMetadata()
		}
	}
	return nil
}
