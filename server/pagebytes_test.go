package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"

	"google.golang.org/grpc"

	pb "graveler/api/graveler/v1"
	"graveler/graveler/gravelertest"
	"graveler/kv"
)

// clientDefault is what a gRPC client receives in one message unless told
// otherwise; every response must fit it.
const clientDefault = 4 << 20

var fitsClient = grpc.MaxCallRecvMsgSize(clientDefault)

// largeRepo serves a repository "repo" on a memory store and returns its
// client.
func largeRepo(t *testing.T) pb.GravelerServiceClient {
	t.Helper()
	mem := kv.NewMemoryStore()
	t.Cleanup(func() { _ = mem.Close() })
	c := start(t, gravelertest.New(t, mem, gravelertest.Options{}), GRPCOptions{}).client
	if _, err := c.CreateRepository(context.Background(), &pb.CreateRepositoryRequest{RepositoryId: "repo"}); err != nil {
		t.Fatal(err)
	}
	return c
}

const largeBranch = "repositories/repo/branches/main"

func putLarge(t *testing.T, c pb.GravelerServiceClient, i, size int) {
	t.Helper()
	data := bytes.Repeat([]byte{byte(i)}, size)
	if _, err := c.PutEntry(context.Background(), &pb.PutEntryRequest{Branch: largeBranch,
		Entry: &pb.Entry{Key: fmt.Appendf(nil, "k%02d", i), Value: &pb.Value{Identity: []byte("id"), Data: data}}}); err != nil {
		t.Fatal(err)
	}
}

// pages calls page with each next-page token until it returns none.
func pages(t *testing.T, page func(token string) (string, error)) {
	t.Helper()
	for token := ""; ; {
		next, err := page(token)
		if err != nil {
			t.Fatal(err)
		}
		if token = next; token == "" {
			return
		}
	}
}

// drain reads a stream to its end, passing each message to each.
func drain[M any](t *testing.T, recv func() (M, error), each func(M)) {
	t.Helper()
	for {
		m, err := recv()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		each(m)
	}
}

// TestListingOfLargeValues: 40 values of 500 KiB, 20 MB in all. A
// ListEntries or uncommitted Diff page of the default size, and a message
// of their streams, would each be larger than gRPC carries; pages end
// short by bytes instead, every message fits a client's default 4 MiB,
// and paging or streaming returns every entry once, in order.
func TestListingOfLargeValues(t *testing.T) {
	ctx := context.Background()
	c := largeRepo(t)
	const n = 40
	for i := range n {
		putLarge(t, c, i, 500<<10)
	}
	var keys [][]byte
	check := func(what string) {
		t.Helper()
		if len(keys) != n {
			t.Fatalf("%s: %d entries, want %d", what, len(keys), n)
		}
		for i, k := range keys {
			if string(k) != fmt.Sprintf("k%02d", i) {
				t.Fatalf("%s: entry %d is %q", what, i, k)
			}
		}
		keys = nil
	}
	pageCount := 0
	pages(t, func(token string) (string, error) {
		resp, err := c.ListEntries(ctx, &pb.ListEntriesRequest{Repository: "repositories/repo", Ref: "main", PageToken: token}, fitsClient)
		pageCount++
		for _, e := range resp.GetEntries() {
			keys = append(keys, e.GetKey())
		}
		return resp.GetNextPageToken(), err
	})
	check("ListEntries")
	if pageCount < 2 {
		t.Fatalf("20 MB listed in %d page", pageCount)
	}
	entries, err := c.StreamEntries(ctx, &pb.StreamEntriesRequest{Repository: "repositories/repo", Ref: "main"}, fitsClient)
	if err != nil {
		t.Fatal(err)
	}
	drain(t, entries.Recv, func(m *pb.StreamEntriesResponse) {
		for _, e := range m.GetEntries() {
			keys = append(keys, e.GetKey())
		}
	})
	check("StreamEntries")
	pages(t, func(token string) (string, error) {
		resp, err := c.DiffUncommitted(ctx, &pb.DiffUncommittedRequest{Branch: largeBranch, PageToken: token}, fitsClient)
		for _, d := range resp.GetDifferences() {
			keys = append(keys, d.GetKey())
		}
		return resp.GetNextPageToken(), err
	})
	check("DiffUncommitted")
	diffs, err := c.StreamDiffUncommitted(ctx, &pb.StreamDiffUncommittedRequest{Branch: largeBranch}, fitsClient)
	if err != nil {
		t.Fatal(err)
	}
	drain(t, diffs.Recv, func(m *pb.StreamDiffUncommittedResponse) {
		for _, d := range m.GetDifferences() {
			keys = append(keys, d.GetKey())
		}
	})
	check("StreamDiffUncommitted")
}

// TestDumpOfLargeCommits: commits with messages of 900 KiB. DumpRefs and
// StreamLog batches and Log pages end by bytes, so every message fits a
// client's default 4 MiB and the dump and the log hold every commit.
func TestDumpOfLargeCommits(t *testing.T) {
	ctx := context.Background()
	c := largeRepo(t)
	const n = 12
	for i := range n {
		putLarge(t, c, i, 1)
		msg := string(bytes.Repeat([]byte{'a' + byte(i)}, 900<<10))
		if _, err := c.Commit(ctx, &pb.CommitRequest{Branch: largeBranch, Options: &pb.CommitOptions{Message: msg}}); err != nil {
			t.Fatal(err)
		}
	}
	const want = n + 1 // and the repository's initial commit
	commits := 0
	dump, err := c.DumpRefs(ctx, &pb.DumpRefsRequest{Repository: "repositories/repo"}, fitsClient)
	if err != nil {
		t.Fatal(err)
	}
	drain(t, dump.Recv, func(m *pb.DumpRefsResponse) {
		for _, r := range m.GetRecords() {
			if r.GetCommit() != nil {
				commits++
			}
		}
	})
	if commits != want {
		t.Fatalf("dumped %d commits, want %d", commits, want)
	}
	commits = 0
	pages(t, func(token string) (string, error) {
		resp, err := c.Log(ctx, &pb.LogRequest{Repository: "repositories/repo", Ref: "main", PageToken: token}, fitsClient)
		commits += len(resp.GetCommits())
		return resp.GetNextPageToken(), err
	})
	if commits != want {
		t.Fatalf("logged %d commits page by page, want %d", commits, want)
	}
	commits = 0
	log, err := c.StreamLog(ctx, &pb.StreamLogRequest{Repository: "repositories/repo", Ref: "main"}, fitsClient)
	if err != nil {
		t.Fatal(err)
	}
	drain(t, log.Recv, func(m *pb.StreamLogResponse) { commits += len(m.GetCommits()) })
	if commits != want {
		t.Fatalf("streamed %d commits, want %d", commits, want)
	}
}

// TestListCommitsFitsClient: like Log, StreamLog and DumpRefs
// (TestDumpOfLargeCommits), a ListCommits page of the default size fits a
// client's default 4 MiB, and the pages list every commit.
func TestListCommitsFitsClient(t *testing.T) {
	ctx := context.Background()
	c := largeRepo(t)
	const n = 12
	for i := range n {
		putLarge(t, c, i, 1)
		msg := string(bytes.Repeat([]byte{'a' + byte(i)}, 900<<10))
		if _, err := c.Commit(ctx, &pb.CommitRequest{Branch: largeBranch, Options: &pb.CommitOptions{Message: msg}}); err != nil {
			t.Fatal(err)
		}
	}
	commits := 0
	pages(t, func(token string) (string, error) {
		resp, err := c.ListCommits(ctx, &pb.ListCommitsRequest{Parent: "repositories/repo", PageToken: token}, fitsClient)
		if err != nil {
			return "", fmt.Errorf("ListCommits after %d commits: %w", commits, err)
		}
		if len(resp.GetCommits()) == 0 {
			return "", fmt.Errorf("an empty page after %d commits", commits)
		}
		commits += len(resp.GetCommits())
		return resp.GetNextPageToken(), nil
	})
	if commits != n+1 {
		t.Fatalf("listed %d commits, want %d", commits, n+1)
	}
}
