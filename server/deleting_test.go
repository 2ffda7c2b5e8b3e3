package server

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	pb "graveler/api/graveler/v1"
	"graveler/graveler/gravelertest"
	"graveler/graveler/ref/refpb"
	"graveler/keys"
	"graveler/kv"
)

// markDeleting leaves repository id as a delete that stopped after its
// first step: the record marked deleting, still in place.
func markDeleting(t *testing.T, store kv.Store, id string) {
	t.Helper()
	ctx := context.Background()
	data, _, err := store.Get(ctx, keys.Graveler(), keys.Repository(id))
	if err != nil {
		t.Fatal(err)
	}
	var rec refpb.Repository
	if err := proto.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	rec.State = refpb.RepositoryState_REPOSITORY_STATE_DELETING
	if data, err = proto.Marshal(&rec); err != nil {
		t.Fatal(err)
	}
	if err := store.Set(ctx, keys.Graveler(), keys.Repository(id), data); err != nil {
		t.Fatal(err)
	}
}

// TestRepositoryDeletingOnTheWire: over real gRPC, a repository being
// deleted answers FAILED_PRECONDITION with reason REPOSITORY_DELETING (to
// reads and to writes, also from a replica that cached it), is not listed,
// and its name can be created again at once.
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
	markDeleting(t, store, "going")

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
	if _, err := h.client.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "going"}); err != nil {
		t.Fatalf("create over a repository being deleted: %v", err)
	}
	if _, err := h.client.PutEntry(ctx, put); err != nil {
		t.Fatalf("write to the new incarnation: %v", err)
	}
}
