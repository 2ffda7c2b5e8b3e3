package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "graveler/api/graveler/v1"
	"graveler/graveler/gravelertest"
	"graveler/kv"
)

// TestListingOfLargeValues: 40 values of 500 KiB, 20 MB in all. A
// ListEntries page of the default size and a StreamEntries stream would
// each need one message larger than gRPC carries; pages end short by
// bytes instead, every message fits a client's default 4 MiB, and paging
// or streaming returns every entry once, in order.
func TestListingOfLargeValues(t *testing.T) {
	ctx := context.Background()
	mem := kv.NewMemoryStore()
	t.Cleanup(func() { _ = mem.Close() })
	c := start(t, gravelertest.New(t, mem, gravelertest.Options{}), GRPCOptions{}).client
	if _, err := c.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "repo"}); err != nil {
		t.Fatal(err)
	}
	const branch = "repositories/repo/branches/main"
	const n = 40
	for i := range n {
		data := bytes.Repeat([]byte{byte(i)}, 500<<10)
		if _, err := c.PutEntry(ctx, &pb.PutEntryRequest{Branch: branch,
			Entry: &pb.Entry{Key: fmt.Appendf(nil, "k%02d", i), Value: &pb.Value{Identity: []byte("id"), Data: data}}}); err != nil {
			t.Fatal(err)
		}
	}
	const clientDefault = 4 << 20
	check := func(what string, got [][]byte) {
		t.Helper()
		if len(got) != n {
			t.Fatalf("%s: %d entries, want %d", what, len(got), n)
		}
		for i, k := range got {
			if string(k) != fmt.Sprintf("k%02d", i) {
				t.Fatalf("%s: entry %d is %q", what, i, k)
			}
		}
	}
	var keys [][]byte
	token, pages := "", 0
	for {
		resp, err := c.ListEntries(ctx, &pb.ListEntriesRequest{Repository: "repositories/repo", Ref: "main", PageToken: token},
			grpc.MaxCallRecvMsgSize(clientDefault))
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		for _, e := range resp.GetEntries() {
			keys = append(keys, e.GetKey())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	check("ListEntries", keys)
	if pages < 2 {
		t.Fatalf("20 MB listed in %d page", pages)
	}
	stream, err := c.StreamEntries(ctx, &pb.StreamEntriesRequest{Repository: "repositories/repo", Ref: "main"}, grpc.MaxCallRecvMsgSize(clientDefault))
	if err != nil {
		t.Fatal(err)
	}
	keys = nil
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if size := proto.Size(msg); size > clientDefault {
			t.Fatalf("a StreamEntries message of %d bytes", size)
		}
		for _, e := range msg.GetEntries() {
			keys = append(keys, e.GetKey())
		}
	}
	check("StreamEntries", keys)
	keys, token = nil, ""
	for {
		resp, err := c.DiffUncommitted(ctx, &pb.DiffUncommittedRequest{Branch: branch, PageToken: token}, grpc.MaxCallRecvMsgSize(clientDefault))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range resp.GetDifferences() {
			keys = append(keys, d.GetKey())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	check("DiffUncommitted", keys)
	diff, err := c.StreamDiffUncommitted(ctx, &pb.StreamDiffUncommittedRequest{Branch: branch}, grpc.MaxCallRecvMsgSize(clientDefault))
	if err != nil {
		t.Fatal(err)
	}
	keys = nil
	for {
		msg, err := diff.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range msg.GetDifferences() {
			keys = append(keys, d.GetKey())
		}
	}
	check("StreamDiffUncommitted", keys)
}

// TestDumpOfLargeCommits: commits with messages of 900 KiB. DumpRefs and
// StreamLog batches and Log pages end by bytes, so every message fits a
// client's default 4 MiB and the dump and the log hold every commit.
func TestDumpOfLargeCommits(t *testing.T) {
	ctx := context.Background()
	mem := kv.NewMemoryStore()
	t.Cleanup(func() { _ = mem.Close() })
	c := start(t, gravelertest.New(t, mem, gravelertest.Options{}), GRPCOptions{}).client
	if _, err := c.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "repo"}); err != nil {
		t.Fatal(err)
	}
	const branch = "repositories/repo/branches/main"
	const n = 12
	for i := range n {
		if _, err := c.PutEntry(ctx, &pb.PutEntryRequest{Branch: branch,
			Entry: &pb.Entry{Key: fmt.Appendf(nil, "k%02d", i), Value: &pb.Value{Identity: []byte("id"), Data: []byte("v")}}}); err != nil {
			t.Fatal(err)
		}
		msg := string(bytes.Repeat([]byte{'a' + byte(i)}, 900<<10))
		if _, err := c.Commit(ctx, &pb.CommitRequest{Branch: branch, Options: &pb.CommitOptions{Message: msg}}); err != nil {
			t.Fatal(err)
		}
	}
	dump, err := c.DumpRefs(ctx, &pb.DumpRefsRequest{Repository: "repositories/repo"}, grpc.MaxCallRecvMsgSize(4<<20))
	if err != nil {
		t.Fatal(err)
	}
	commits := 0
	for {
		msg, err := dump.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range msg.GetRecords() {
			if r.GetCommit() != nil {
				commits++
			}
		}
	}
	if commits != n+1 { // and the initial commit
		t.Fatalf("dumped %d commits, want %d", commits, n+1)
	}
	var logged int
	for token := ""; ; {
		resp, err := c.Log(ctx, &pb.LogRequest{Repository: "repositories/repo", Ref: "main", PageToken: token}, grpc.MaxCallRecvMsgSize(4<<20))
		if err != nil {
			t.Fatal(err)
		}
		logged += len(resp.GetCommits())
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if logged != n+1 {
		t.Fatalf("logged %d commits page by page, want %d", logged, n+1)
	}
	log, err := c.StreamLog(ctx, &pb.StreamLogRequest{Repository: "repositories/repo", Ref: "main"}, grpc.MaxCallRecvMsgSize(4<<20))
	if err != nil {
		t.Fatal(err)
	}
	commits = 0
	for {
		msg, err := log.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		commits += len(msg.GetCommits())
	}
	if commits != n+1 {
		t.Fatalf("streamed %d commits, want %d", commits, n+1)
	}
}
