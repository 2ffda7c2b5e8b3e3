package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "graveler/api/graveler/v1"
)

// restoreCommit restores one commit record into repo.
func restoreCommit(t *testing.T, c pb.GravelerServiceClient, repo string, cm *pb.Commit) error {
	t.Helper()
	st, err := c.RestoreRefs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.RestoreRefsRequest{Repository: "repositories/" + repo,
		Records: []*pb.RefsRecord{{Record: &pb.RefsRecord_Commit{Commit: cm}}}}); err != nil {
		t.Fatal(err)
	}
	_, err = st.CloseAndRecv()
	return err
}

// TestRestoreRefusedCommitWritesNothing: a restore record refused because
// its id does not match its content leaves the bare repository bare, so
// that the corrected dump can be restored into it.
func TestRestoreRefusedCommitWritesNothing(t *testing.T) {
	ctx := context.Background()
	c := largeRepo(t)
	for _, id := range []string{"bare", "fresh"} {
		if _, err := c.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: id, Bare: true}); err != nil {
			t.Fatal(err)
		}
	}
	when := timestamppb.New(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC))
	bad := &pb.Commit{Id: strings.Repeat("0", 64), Message: "m", Committer: "x", Generation: 1, Version: 1, CreateTime: when}
	err := restoreCommit(t, c, "bare", bad)
	if code, _ := codeAndReason(t, err); code != codes.InvalidArgument {
		t.Fatalf("restore of a commit with a wrong id: %v", err)
	}
	// The corrected record carries the id the server computed.
	msg := status.Convert(err).Message()
	good := &pb.Commit{Id: msg[strings.LastIndex(msg, " ")+1:], Message: "m", Committer: "x", Generation: 1, Version: 1, CreateTime: when}
	if err := restoreCommit(t, c, "fresh", good); err != nil {
		t.Fatalf("control: the corrected record into a fresh bare repository: %v", err)
	}
	list, err := c.ListCommits(ctx, &pb.ListCommitsRequest{Parent: "repositories/bare"})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range list.GetCommits() {
		t.Errorf("the refused record left commit %s in the bare repository", cm.GetId())
	}
	if err := restoreCommit(t, c, "bare", good); err != nil {
		t.Errorf("restoring the corrected record after the refused one: %v", err)
	}
}

// TestRestoreCommitWithoutCreateTime: a restored commit is stored as the
// dump has it; one without a create_time is refused as invalid rather
// than dated at the restore (whose id could then never match the dump's),
// and nothing is stored.
func TestRestoreCommitWithoutCreateTime(t *testing.T) {
	ctx := context.Background()
	c := largeRepo(t)
	if _, err := c.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "bare", Bare: true}); err != nil {
		t.Fatal(err)
	}
	cm := &pb.Commit{Id: strings.Repeat("0", 64), Message: "m", Committer: "x", Generation: 1, Version: 1}
	err := restoreCommit(t, c, "bare", cm)
	if code, _ := codeAndReason(t, err); code != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "create_time") {
		t.Fatalf("restore of a commit without create_time: %v, want InvalidArgument naming create_time", err)
	}
	list, err := c.ListCommits(ctx, &pb.ListCommitsRequest{Parent: "repositories/bare"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetCommits()); n != 0 {
		t.Errorf("the refused record left %d commits in the bare repository", n)
	}
}
