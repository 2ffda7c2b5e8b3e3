package server

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "graveler/api/graveler/v1"
	"graveler/etcdkv"
	"graveler/etcdkv/embedded"
	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/gravelertest"
	"graveler/kv"
)

// TestQuotaExceededIsNotUnavailable: the layers above kv mark a write
// refused for space graveler.ErrUnavailable too; the status must still say
// RESOURCE_EXHAUSTED, which clients do not retry blindly.
func TestQuotaExceededIsNotUnavailable(t *testing.T) {
	err := fmt.Errorf("staging: set: %w: %w", graveler.ErrUnavailable, fmt.Errorf("%w: etcdkv: set", kv.ErrQuotaExceeded))
	st := ToStatus(withResource(err, "branch", "repositories/r/branches/main"), "rid")
	if ei := errorInfo(t, st); st.Code() != codes.ResourceExhausted || ei.GetReason() != "STORE_QUOTA_EXCEEDED" {
		t.Fatalf("got %v %s", st.Code(), ei.GetReason())
	}
}

// TestNoSpaceOnTheWire drives a real etcd with a small quota into NOSPACE
// through the API (one staged key overwritten until the history of its
// revisions fills the quota, the usual way a cluster without compaction
// fills up). Then every write RPC answers RESOURCE_EXHAUSTED with reason
// STORE_QUOTA_EXCEEDED and a message that names the cause and what the
// operator must do; reads of staged and committed data, refs and the log
// still answer; after compaction, defragmentation and disarming the alarm,
// writes and commits work again.
func TestNoSpaceOnTheWire(t *testing.T) {
	srv := etcdkvtest.NewServerConfig(t, embedded.Config{QuotaBackendBytes: 4 << 20})
	store := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	h := start(t, gravelertest.New(t, store, gravelertest.Options{}), GRPCOptions{})
	c, ctx := h.client, context.Background()
	const repo, main = "repositories/full", "repositories/full/branches/main"
	entry := func(key, data string) *pb.Entry {
		return &pb.Entry{Key: []byte(key), Value: &pb.Value{Identity: []byte("id-" + key), Data: []byte(data)}}
	}
	if _, err := c.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "full"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutEntry(ctx, &pb.PutEntryRequest{Branch: main, Entry: entry("committed", "c")}); err != nil {
		t.Fatal(err)
	}
	cr, err := c.Commit(ctx, &pb.CommitRequest{Branch: main, Options: &pb.CommitOptions{Message: "first"}})
	if err != nil {
		t.Fatal(err)
	}
	commitID := cr.GetCommit().GetId()
	if _, err := c.PutEntry(ctx, &pb.PutEntryRequest{Branch: main, Entry: entry("staged", "s")}); err != nil {
		t.Fatal(err)
	}

	big := strings.Repeat("x", 256<<10)
	var refused error
	for i := 0; refused == nil; i++ {
		if i > 64 {
			t.Fatal("64 writes of 256 KiB and no NOSPACE under a 4 MiB quota")
		}
		_, err := c.PutEntry(ctx, &pb.PutEntryRequest{Branch: main, Entry: entry("fill", fmt.Sprint(i, big))})
		if err == nil {
			continue
		}
		if code, reason, _ := reasonOf(t, err); code == codes.Aborted && reason == "OUTCOME_UNKNOWN" &&
			strings.Contains(status.Convert(err).Message(), "past the quota") {
			// The write that crossed the quota: etcd applied it and
			// answered NOSPACE, so its outcome is unknown.
			continue
		}
		refused = err
	}
	if !srv.NoSpaceAlarm(t) {
		t.Fatalf("write refused (%v) without a NOSPACE alarm", refused)
	}
	wantNoSpace := func(what string, err error) {
		t.Helper()
		st, _ := status.FromError(err)
		code, reason, _ := reasonOf(t, err)
		if code != codes.ResourceExhausted || reason != "STORE_QUOTA_EXCEEDED" {
			t.Errorf("%s under NOSPACE: %v %s (%v), want RESOURCE_EXHAUSTED STORE_QUOTA_EXCEEDED", what, code, reason, err)
			return
		}
		for _, want := range []string{"NOSPACE", "compacts", "defragments", "disarms"} {
			if !strings.Contains(st.Message(), want) {
				t.Errorf("%s under NOSPACE: message %q does not say %q", what, st.Message(), want)
			}
		}
	}
	wantNoSpace("filling PutEntry", refused)
	_, err = c.PutEntry(ctx, &pb.PutEntryRequest{Branch: main, Entry: entry("other", "o")})
	wantNoSpace("PutEntry", err)
	_, err = c.BatchPutEntries(ctx, &pb.BatchPutEntriesRequest{Branch: main, Entries: []*pb.Entry{entry("b1", "1"), entry("b2", "2")}})
	wantNoSpace("BatchPutEntries", err)
	_, err = c.DeleteEntry(ctx, &pb.DeleteEntryRequest{Branch: main, Key: []byte("committed")})
	wantNoSpace("DeleteEntry", err)
	_, err = c.Commit(ctx, &pb.CommitRequest{Branch: main, Options: &pb.CommitOptions{Message: "second"}})
	wantNoSpace("Commit", err)
	_, err = c.CreateBranch(ctx, &pb.CreateBranchRequest{Parent: repo, BranchId: "dev", SourceRef: "main"})
	wantNoSpace("CreateBranch", err)
	_, err = c.CreateTag(ctx, &pb.CreateTagRequest{Parent: repo, TagId: "v1", Ref: commitID})
	wantNoSpace("CreateTag", err)
	_, err = c.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "another"})
	wantNoSpace("CreateRepository", err)
	_, err = c.DeleteRepository(ctx, &pb.DeleteRepositoryRequest{Name: repo})
	wantNoSpace("DeleteRepository", err)

	// Reads answer from what is stored.
	for key, want := range map[string]string{"committed": "c", "staged": "s"} {
		got, err := c.GetEntry(ctx, &pb.GetEntryRequest{Repository: repo, Ref: "main", Key: []byte(key)})
		if err != nil || string(got.GetEntry().GetValue().GetData()) != want {
			t.Fatalf("GetEntry %s under NOSPACE: %v, %v", key, got, err)
		}
	}
	list, err := c.ListEntries(ctx, &pb.ListEntriesRequest{Repository: repo, Ref: "main"})
	if err != nil || len(list.GetEntries()) != 3 {
		t.Fatalf("ListEntries under NOSPACE: %d entries, %v", len(list.GetEntries()), err)
	}
	if _, err := c.GetRepository(ctx, &pb.GetRepositoryRequest{Name: repo}); err != nil {
		t.Fatalf("GetRepository under NOSPACE: %v", err)
	}
	if b, err := c.GetBranch(ctx, &pb.GetBranchRequest{Name: main}); err != nil || b.GetBranch().GetCommitId() != commitID {
		t.Fatalf("GetBranch under NOSPACE: %v, %v", b, err)
	}
	if _, err := c.GetCommit(ctx, &pb.GetCommitRequest{Name: repo + "/commits/" + commitID}); err != nil {
		t.Fatalf("GetCommit under NOSPACE: %v", err)
	}

	// The runbook: the space is history, so compaction and defragmentation
	// free it; disarming the alarm lets writes in again.
	srv.FreeSpace(t)
	if srv.NoSpaceAlarm(t) {
		t.Fatal("alarm still raised after the runbook")
	}
	if _, err := c.PutEntry(ctx, &pb.PutEntryRequest{Branch: main, Entry: entry("other", "o")}); err != nil {
		t.Fatalf("PutEntry after recovery: %v", err)
	}
	if _, err := c.Commit(ctx, &pb.CommitRequest{Branch: main, Options: &pb.CommitOptions{Message: "second"}}); err != nil {
		t.Fatalf("Commit after recovery: %v", err)
	}
	got, err := c.GetEntry(ctx, &pb.GetEntryRequest{Repository: repo, Ref: "main", Key: []byte("fill")})
	if err != nil || !bytes.HasSuffix(got.GetEntry().GetValue().GetData(), []byte(big)) {
		t.Fatalf("the last accepted fill write after recovery: %v", err)
	}
}
