package server_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	pb "graveler/api/graveler/v1"
)

// TestLogTokenFromBeforeRecreateIsInvalid: a Log page token taken before
// its repository was deleted and created again under the same name, sent
// afterwards, is INVALID_ARGUMENT / INVALID_PAGE_TOKEN (the token no
// longer fits: start the listing again), not NOT_FOUND / COMMIT_NOT_FOUND
// naming a commit the client never sent.
func TestLogTokenFromBeforeRecreateIsInvalid(t *testing.T) {
	e := startDaemon(t)
	ctx := context.Background()
	if _, err := e.c.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "gone"}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := e.c.Commit(ctx, &pb.CommitRequest{Branch: "repositories/gone/branches/main", Options: &pb.CommitOptions{AllowEmpty: true}}); err != nil {
			t.Fatal(err)
		}
	}
	var tokens []string
	for _, firstParent := range []bool{false, true} {
		r, err := e.c.Log(ctx, &pb.LogRequest{Repository: "repositories/gone", Ref: "main", FirstParent: firstParent, PageSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, r.GetNextPageToken())
	}
	if _, err := e.c.DeleteRepository(ctx, &pb.DeleteRepositoryRequest{Name: "repositories/gone"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "gone"}); err != nil {
		t.Fatal(err)
	}
	for i, firstParent := range []bool{false, true} {
		_, err := e.c.Log(ctx, &pb.LogRequest{Repository: "repositories/gone", Ref: "main", FirstParent: firstParent, PageSize: 1, PageToken: tokens[i]})
		if code, reason, _ := statusInfo(err); code != codes.InvalidArgument || reason != "INVALID_PAGE_TOKEN" {
			t.Errorf("Log token (first_parent %v) from before the repository was created again: %v", firstParent, err)
		}
	}
}
