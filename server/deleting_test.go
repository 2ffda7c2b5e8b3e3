package server

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	pb "graveler/api/graveler/v1"
	"graveler/graveler/gravelertest"
	"graveler/kv"
)

// TestRepositoryDeletingOnTheWire: over real gRPC, a repository being
// deleted answers FAILED_PRECONDITION with reason REPOSITORY_DELETING (to
// reads and to writes, also from a replica that cached it), is not listed,
// and its name can be created again at once (on another namespace).
func TestRepositoryDeletingOnTheWire(t *testing.T) {
	store := kv.NewMemoryStore()
	t.Cleanup(func() { _ = store.Close() })
	h := start(t, gravelertest.New(t, store, gravelertest.Options{}), GRPCOptions{})
	ctx := context.Background()
	for _, id := range []string{"going", "staying"} {
		if _, err := h.client.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: id}); err != nil {
			t.Fatal(err)
		}
	}
	put := &pb.PutEntryRequest{Branch: "repositories/going/branches/main",
		Entry: &pb.Entry{Key: []byte("k"), Value: &pb.Value{Identity: []byte("i"), Data: []byte("d")}}}
	if _, err := h.client.PutEntry(ctx, put); err != nil {
		t.Fatal(err) // the service now caches the repository
	}
	gravelertest.MarkDeleting(t, store, "going")

	_, err := h.client.GetRepository(ctx, &pb.GetRepositoryRequest{Name: "repositories/going"})
	if c, reason, meta := reasonOf(t, err); c != codes.FailedPrecondition || reason != "REPOSITORY_DELETING" || meta["repository"] != "repositories/going" {
		t.Fatalf("get: %v %s %v (%v)", c, reason, meta, err)
	}
	_, err = h.client.PutEntry(ctx, put)
	if c, reason, _ := reasonOf(t, err); c != codes.FailedPrecondition || reason != "REPOSITORY_DELETING" {
		t.Fatalf("write: %v %s (%v)", c, reason, err)
	}
	list, err := h.client.ListRepositories(ctx, &pb.ListRepositoriesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetRepositories()) != 1 || list.GetRepositories()[0].GetName() != "repositories/staying" {
		t.Fatalf("listed %v", list.GetRepositories())
	}
	// The name is reusable at once: the default namespace is one per
	// incarnation, and the deleted one's stays claimed until the cleaner has
	// reclaimed it.
	if _, err := h.client.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "going"}); err != nil {
		t.Fatalf("create over a repository being deleted: %v", err)
	}
	if _, err := h.client.PutEntry(ctx, put); err != nil {
		t.Fatalf("write to the new incarnation: %v", err)
	}
}
