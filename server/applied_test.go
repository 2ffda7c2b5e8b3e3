package server

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "graveler/api/graveler/v1"
	"graveler/graveler/gravelertest"
	"graveler/kv"
	"graveler/kv/kvtest"
)

// TestCommitAppliedNeverAnsweredUnavailable fails each kv operation of a
// Commit RPC in turn. Where the commit was applied (the branch moved) and
// the RPC still failed, the failure came after the decisive write (the
// read back of the new commit): the answer must say the outcome is
// unknown, never UNAVAILABLE, which tells a client to retry as if nothing
// happened (a retry of an allow-empty commit would commit twice).
func TestCommitAppliedNeverAnsweredUnavailable(t *testing.T) {
	ctx := context.Background()
	const main = "repositories/repo/branches/main"
	setup := func(t *testing.T) (*kvtest.FaultStore, pb.GravelerServiceClient, string) {
		mem := kv.NewMemoryStore()
		t.Cleanup(func() { _ = mem.Close() })
		fs := kvtest.NewFaultStore(mem)
		c := start(t, gravelertest.New(t, fs, gravelertest.Options{}), GRPCOptions{}).client
		if _, err := c.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "repo"}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.PutEntry(ctx, &pb.PutEntryRequest{Branch: main,
			Entry: &pb.Entry{Key: []byte("a"), Value: &pb.Value{Identity: []byte("a"), Data: []byte("a")}}}); err != nil {
			t.Fatal(err)
		}
		b, err := c.GetBranch(ctx, &pb.GetBranchRequest{Name: main})
		if err != nil {
			t.Fatal(err)
		}
		return fs, c, b.GetBranch().GetCommitId()
	}
	commit := func(c pb.GravelerServiceClient) error {
		_, err := c.Commit(ctx, &pb.CommitRequest{Branch: main, Options: &pb.CommitOptions{Message: "m"}})
		return err
	}
	fs, c, _ := setup(t)
	fs.Reset()
	if err := commit(c); err != nil {
		t.Fatal(err)
	}
	total := fs.Ops()
	afterApply := 0
	for n := int64(1); n <= total; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			fs, c, before := setup(t)
			fs.Reset()
			fs.FailAt(n, kvtest.FaultError)
			err := commit(c)
			fs.Reset()
			b, gerr := c.GetBranch(ctx, &pb.GetBranchRequest{Name: main})
			if gerr != nil {
				t.Fatal(gerr)
			}
			if err == nil || b.GetBranch().GetCommitId() == before {
				return
			}
			afterApply++
			st := status.Convert(err)
			if st.Code() != codes.Aborted || errorInfo(t, st).GetReason() != "OUTCOME_UNKNOWN" {
				t.Errorf("a failure at kv operation %d of %d, after the commit was applied, answered %v; want ABORTED OUTCOME_UNKNOWN", n, total, err)
			}
		})
	}
	if afterApply == 0 {
		t.Fatalf("no fault among the %d operations came after the commit was applied", total)
	}
}
