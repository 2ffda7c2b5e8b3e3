package server

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	pb "graveler/api/graveler/v1"
	"graveler/graveler/committed"
	"graveler/graveler/committed/blobtest"
	"graveler/graveler/gravelertest"
	"graveler/kv"
)

// TestStorageNamespaceOnTheWire: over real gRPC, a create on a namespace
// another repository holds (another spelling of it, or one nested in it)
// is ALREADY_EXISTS / NAMESPACE_IN_USE naming the namespace and the
// holder; one on a namespace that cannot be written (a file:// directory
// that cannot be made, a missing S3 bucket) is FAILED_PRECONDITION /
// NAMESPACE_UNWRITABLE naming the namespace and the cause, and creates
// nothing; a malformed one is INVALID_ARGUMENT.
func TestStorageNamespaceOnTheWire(t *testing.T) {
	s3 := blobtest.StartFakeS3(t, "present")
	blobs := committed.NewBucketStore(s3.Config)
	t.Cleanup(func() { blobs.Close() })
	store := kv.NewMemoryStore()
	t.Cleanup(func() { _ = store.Close() })
	h := start(t, gravelertest.New(t, store, gravelertest.Options{Blobs: blobs}), GRPCOptions{})
	ctx := context.Background()
	create := func(id, ns string) error {
		req := &pb.CreateRepositoryRequest{RepositoryId: id}
		if ns != "" {
			req.Repository = &pb.Repository{StorageNamespace: ns}
		}
		_, err := h.client.CreateRepository(ctx, req)
		return err
	}

	if err := create("alpha", "s3://present/lake/alpha"); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"s3://present/lake/alpha/", "s3://Present//lake/alpha", "s3://present/lake/alpha/inner", "s3://present/lake"} {
		err := create("beta", ns)
		c, reason, meta := reasonOf(t, err)
		if c != codes.AlreadyExists || reason != "NAMESPACE_IN_USE" || meta["storage_namespace"] != ns ||
			meta["held_namespace"] != "s3://present/lake/alpha" || meta["holding_repository"] != "alpha" ||
			meta["holder_state"] != "active" || meta["repository"] != "repositories/beta" || !strings.Contains(err.Error(), ns) {
			t.Fatalf("create on %s: %v %s %v (%v)", ns, c, reason, meta, err)
		}
	}
	// A deleted repository holds its namespace until the cleaner reclaims
	// it; the default namespace is one per incarnation, so the name itself
	// is reusable at once.
	first, err := h.client.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "gamma"})
	if err != nil {
		t.Fatal(err)
	}
	gammaNS := first.GetRepository().GetStorageNamespace()
	if !strings.HasPrefix(gammaNS, "mem://x/gamma-") {
		t.Fatalf("default namespace %q", gammaNS)
	}
	if _, err := h.client.DeleteRepository(ctx, &pb.DeleteRepositoryRequest{Name: "repositories/gamma"}); err != nil {
		t.Fatal(err)
	}
	again, err := h.client.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "gamma"})
	if err != nil {
		t.Fatalf("re-create with the default namespace: %v", err)
	}
	if again.GetRepository().GetStorageNamespace() == gammaNS {
		t.Fatalf("re-create got the deleted incarnation's namespace %q", gammaNS)
	}
	if _, err := h.client.DeleteRepository(ctx, &pb.DeleteRepositoryRequest{Name: "repositories/gamma"}); err != nil {
		t.Fatal(err)
	}
	err = create("gamma", gammaNS)
	if c, reason, meta := reasonOf(t, err); c != codes.AlreadyExists || reason != "NAMESPACE_IN_USE" ||
		meta["storage_namespace"] != gammaNS || meta["holder_state"] != "deleted, until the cleaner reclaims it" {
		t.Fatalf("re-create on the deleted repository's namespace: %v %s %v (%v)", c, reason, meta, err)
	}

	notDir := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(notDir, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	fileNS := (&url.URL{Scheme: "file", Path: filepath.ToSlash(filepath.Join(notDir, "repo"))}).String()
	for _, c := range []struct{ ns, cause string }{
		{fileNS, "not a directory"},
		{"s3://missing-bucket/repo", "NoSuchBucket"},
	} {
		for _, bare := range []bool{false, true} {
			_, err := h.client.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "delta", Bare: bare,
				Repository: &pb.Repository{StorageNamespace: c.ns}})
			code, reason, meta := reasonOf(t, err)
			if code != codes.FailedPrecondition || reason != "NAMESPACE_UNWRITABLE" || meta["repository"] != "repositories/delta" ||
				!strings.Contains(err.Error(), c.ns) || !strings.Contains(err.Error(), c.cause) {
				t.Fatalf("create on %s: %v %s %v (%v)", c.ns, code, reason, meta, err)
			}
			_, err = h.client.GetRepository(ctx, &pb.GetRepositoryRequest{Name: "repositories/delta"})
			if code, reason, _ := reasonOf(t, err); code != codes.NotFound || reason != "REPOSITORY_NOT_FOUND" {
				t.Fatalf("after a failed create: %v %s", code, reason)
			}
		}
	}
	// Nothing was claimed: the name and a good namespace are free.
	if err := create("delta", "s3://present/lake/delta"); err != nil {
		t.Fatal(err)
	}

	for _, ns := range []string{"s3://present/a//b", "file://relative", "s3://present/p?versionId=1"} {
		err := create("epsilon", ns)
		if c, reason, _ := reasonOf(t, err); c != codes.InvalidArgument || reason != "INVALID_STORAGE_NAMESPACE" || !strings.Contains(err.Error(), ns) {
			t.Fatalf("create on %s: %v %s (%v)", ns, c, reason, err)
		}
	}
}
