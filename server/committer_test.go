package server

import (
	"context"
	"testing"

	"google.golang.org/grpc/metadata"

	pb "graveler/api/graveler/v1"
	"graveler/graveler/gravelertest"
	"graveler/kv"
)

// TestCommitterDefaultsToToken: a commit, merge, revert or cherry-pick that
// names no committer is made by the label of the token it authenticated
// with; one that names a committer keeps it.
func TestCommitterDefaultsToToken(t *testing.T) {
	store := kv.NewMemoryStore()
	t.Cleanup(func() { _ = store.Close() })
	h := start(t, gravelertest.New(t, store, gravelertest.Options{}), GRPCOptions{Tokens: NewTokens(map[string]string{"s3cret": "ci-bot"})})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer s3cret")
	c := h.client
	if _, err := c.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "repo"}); err != nil {
		t.Fatal(err)
	}
	main, dev := "repositories/repo/branches/main", "repositories/repo/branches/dev"
	put := func(branch, key string) {
		t.Helper()
		if _, err := c.PutEntry(ctx, &pb.PutEntryRequest{Branch: branch,
			Entry: &pb.Entry{Key: []byte(key), Value: &pb.Value{Identity: []byte(key), Data: []byte(key)}}}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, got *pb.Commit, err error, want string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got.GetCommitter() != want {
			t.Fatalf("%s: committer %q, want %q", what, got.GetCommitter(), want)
		}
	}

	put(main, "a")
	r, err := c.Commit(ctx, &pb.CommitRequest{Branch: main, Options: &pb.CommitOptions{Message: "a"}})
	check("commit", r.GetCommit(), err, "ci-bot")
	first := r.GetCommit().GetId()

	put(main, "b")
	r, err = c.Commit(ctx, &pb.CommitRequest{Branch: main, Options: &pb.CommitOptions{Message: "b", Committer: "alice"}})
	check("commit with a committer", r.GetCommit(), err, "alice")
	second := r.GetCommit().GetId()

	if _, err := c.CreateBranch(ctx, &pb.CreateBranchRequest{Parent: "repositories/repo", BranchId: "dev", SourceRef: first}); err != nil {
		t.Fatal(err)
	}
	put(dev, "c")
	if _, err := c.Commit(ctx, &pb.CommitRequest{Branch: dev, Options: &pb.CommitOptions{Message: "c"}}); err != nil {
		t.Fatal(err)
	}
	m, err := c.Merge(ctx, &pb.MergeRequest{Destination: main, SourceRef: "dev", NoFf: true, Options: &pb.CommitOptions{Message: "merge"}})
	check("merge", m.GetCommit(), err, "ci-bot")
	rv, err := c.Revert(ctx, &pb.RevertRequest{Branch: main, Ref: second, Options: &pb.CommitOptions{Message: "revert"}})
	check("revert", rv.GetCommit(), err, "ci-bot")
	cp, err := c.CherryPick(ctx, &pb.CherryPickRequest{Branch: dev, Ref: second, Options: &pb.CommitOptions{Message: "pick"}})
	check("cherry-pick", cp.GetCommit(), err, "ci-bot")
}
