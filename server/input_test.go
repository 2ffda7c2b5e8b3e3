package server_test

import (
	"bytes"
	"context"
	"io"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "graveler/api/graveler/v1"
	"graveler/graveler"
	"graveler/server/daemon/daemontest"
)

// daemonEnv is a real gravelerd on embedded etcd with repository "input":
// main has one commit with keys a/1, a/2, b/1; branch dev and tag v1 are
// at that commit.
type daemonEnv struct {
	c    pb.GravelerServiceClient
	conn *grpc.ClientConn
}

func startDaemon(t *testing.T) *daemonEnv {
	t.Helper()
	srv := daemontest.Start(t, nil)
	// The client may send what the server's receive limit still takes.
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	e := &daemonEnv{c: pb.NewGravelerServiceClient(conn), conn: conn}
	ctx := context.Background()
	if _, err := e.c.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "input"}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a/1", "a/2", "b/1"} {
		e.put(t, "main", k)
	}
	if _, err := e.c.Commit(ctx, &pb.CommitRequest{Branch: "repositories/input/branches/main", Options: &pb.CommitOptions{Message: "first"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.CreateBranch(ctx, &pb.CreateBranchRequest{Parent: "repositories/input", BranchId: "dev", SourceRef: "main"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.CreateTag(ctx, &pb.CreateTagRequest{Parent: "repositories/input", TagId: "v1", Ref: "main"}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *daemonEnv) put(t *testing.T, branch, key string) {
	t.Helper()
	_, err := e.c.PutEntry(context.Background(), &pb.PutEntryRequest{Branch: "repositories/input/branches/" + branch,
		Entry: &pb.Entry{Key: []byte(key), Value: &pb.Value{Identity: []byte("id-" + key), Data: []byte(key)}}})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// statusInfo returns the code, ErrorInfo reason and metadata of err.
func statusInfo(err error) (codes.Code, string, map[string]string) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), ei.GetReason(), ei.GetMetadata()
		}
	}
	return st.Code(), "", nil
}

// recvAll reads a server stream to its end; nil when it ended cleanly.
func recvAll[T any](s interface{ Recv() (T, error) }, err error) error {
	if err != nil {
		return err
	}
	for {
		if _, err := s.Recv(); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// TestListEntriesPrefixOverKeyLimit: no key is longer than
// graveler.MaxKeyLen, so a listing prefix or delimiter longer than that is
// the client's mistake, refused as INVALID_ARGUMENT / INVALID_KEY as
// DeletePrefix refuses such a prefix, on a branch (staged entries read
// from etcd) and on a tag alike. A megabytes-long prefix used to reach
// etcd's range request and come back RESOURCE_EXHAUSTED with etcd's words.
func TestListEntriesPrefixOverKeyLimit(t *testing.T) {
	e := startDaemon(t)
	ctx := context.Background()
	long := bytes.Repeat([]byte("p"), graveler.MaxKeyLen+1)
	huge := make([]byte, 3<<20)
	for _, ref := range []string{"main", "v1"} {
		for _, c := range []struct {
			name              string
			prefix, delimiter []byte
		}{
			{"1025-byte prefix", long, nil},
			{"3 MiB prefix", huge, nil},
			{"3 MiB delimiter", nil, huge},
		} {
			_, err := e.c.ListEntries(ctx, &pb.ListEntriesRequest{Repository: "repositories/input", Ref: ref, Prefix: c.prefix, Delimiter: c.delimiter})
			if code, reason, _ := statusInfo(err); code != codes.InvalidArgument || reason != "INVALID_KEY" {
				t.Errorf("ListEntries at %s with a %s: %v", ref, c.name, err)
			}
			err = recvAll(e.c.StreamEntries(ctx, &pb.StreamEntriesRequest{Repository: "repositories/input", Ref: ref, Prefix: c.prefix, Delimiter: c.delimiter}))
			if code, reason, _ := statusInfo(err); code != codes.InvalidArgument || reason != "INVALID_KEY" {
				t.Errorf("StreamEntries at %s with a %s: %v", ref, c.name, err)
			}
		}
		// A prefix as long as a key can be is fine.
		full := bytes.Repeat([]byte("a"), graveler.MaxKeyLen)
		if _, err := e.c.ListEntries(ctx, &pb.ListEntriesRequest{Repository: "repositories/input", Ref: ref, Prefix: full, Delimiter: full}); err != nil {
			t.Errorf("ListEntries at %s with a %d-byte prefix and delimiter: %v", ref, graveler.MaxKeyLen, err)
		}
	}
}
