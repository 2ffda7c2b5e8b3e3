package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "graveler/api/graveler/v1"
	"graveler/graveler"
	"graveler/graveler/ref"
)

// restoreInto creates the bare repository id and restores recs into it in
// one message.
func restoreInto(t *testing.T, e *daemonEnv, id string, recs ...*pb.RefsRecord) error {
	t.Helper()
	ctx := context.Background()
	if _, err := e.c.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: id, Bare: true}); err != nil {
		t.Fatal(err)
	}
	s, err := e.c.RestoreRefs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&pb.RestoreRefsRequest{Repository: "repositories/" + id, Records: recs}); err != nil {
		t.Fatal(err)
	}
	_, err = s.CloseAndRecv()
	return err
}

// commitRecord is gc as a dump record, under the id its content hashes to.
func commitRecord(gc graveler.Commit) *pb.RefsRecord {
	id := ref.ComputeCommitID(&gc)
	pc := &pb.Commit{Id: string(id), Message: gc.Message, MetaRangeId: string(gc.MetaRangeID),
		CreateTime: timestamppb.New(gc.CreationDate), Generation: int64(gc.Generation), Version: int32(gc.Version)}
	for _, p := range gc.Parents {
		pc.Parents = append(pc.Parents, string(p))
	}
	return &pb.RefsRecord{Record: &pb.RefsRecord_Commit{Commit: pc}}
}

// mainRecord is a dump record of branch main of repository id at commit.
func mainRecord(id, commit string) *pb.RefsRecord {
	return &pb.RefsRecord{Record: &pb.RefsRecord_Branch{Branch: &pb.Branch{Name: "repositories/" + id + "/branches/main", CommitId: commit}}}
}

// TestRestoreRefusesUnreadableMetaRangeID: a restored commit whose
// meta_range_id is no id the committed store can read is refused at
// restore with INVALID_ARGUMENT naming the field, before anything is
// stored; accepted, it made every later read or commit of a branch on it
// answer INVALID_ARGUMENT to a request that was itself valid.
func TestRestoreRefusesUnreadableMetaRangeID(t *testing.T) {
	e := startDaemon(t)
	for i, mr := range []string{"../../../etc/passwd", strings.Repeat("A", 64), strings.Repeat("a", 63)} {
		id := []string{"badmr-a", "badmr-b", "badmr-c"}[i]
		bad := commitRecord(graveler.Commit{Version: 1, Message: "bad", CreationDate: time.Now().UTC().Truncate(time.Millisecond),
			Generation: 1, MetaRangeID: graveler.MetaRangeID(mr)})
		err := restoreInto(t, e, id, bad, mainRecord(id, bad.GetCommit().GetId()))
		if code, _, msg := statusInfo(err); code != codes.InvalidArgument || !strings.Contains(msg, "meta_range_id") {
			_, gerr := e.c.GetEntry(context.Background(), &pb.GetEntryRequest{Repository: "repositories/" + id, Ref: "main", Key: []byte("k")})
			t.Errorf("restore of a commit with meta_range_id %q: %v; GetEntry then answers %v", mr, err, gerr)
		}
		list, err := e.c.ListCommits(context.Background(), &pb.ListCommitsRequest{Parent: "repositories/" + id})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(list.GetCommits()); n != 0 {
			t.Errorf("the refused record left %d commits in %s", n, id)
		}
	}
	// The empty tree's commit has no metarange: still restorable.
	empty := commitRecord(graveler.Commit{Version: 1, Message: "empty", CreationDate: time.Now().UTC().Truncate(time.Millisecond), Generation: 1})
	if err := restoreInto(t, e, "emptymr", empty, mainRecord("emptymr", empty.GetCommit().GetId())); err != nil {
		t.Errorf("restore of a commit of the empty tree: %v", err)
	}
}

// TestRestoreRefusesCommitWithMissingParent: a dump lists parents before
// children, so a commit whose parent is neither earlier in the dump nor in
// the repository means the dump was cut short or altered. The restore
// refuses that record with INVALID_ARGUMENT naming the commit and the
// missing parent, and stores nothing of it; accepted, Log and main~1 of a
// branch on it answered NOT_FOUND for a commit the client never sent.
func TestRestoreRefusesCommitWithMissingParent(t *testing.T) {
	e := startDaemon(t)
	missing := strings.Repeat("ab", 32)
	orphan := commitRecord(graveler.Commit{Version: 1, Message: "orphan", CreationDate: time.Now().UTC().Truncate(time.Millisecond),
		Generation: 7, Parents: []graveler.CommitID{graveler.CommitID(missing)}})
	err := restoreInto(t, e, "orphan", orphan, mainRecord("orphan", orphan.GetCommit().GetId()))
	if code, _, msg := statusInfo(err); code != codes.InvalidArgument || !strings.Contains(msg, orphan.GetCommit().GetId()) || !strings.Contains(msg, missing) {
		_, lerr := e.c.Log(context.Background(), &pb.LogRequest{Repository: "repositories/orphan", Ref: "main"})
		t.Errorf("restore of a commit whose parent is missing: %v; Log then answers %v", err, lerr)
	}
	list, err := e.c.ListCommits(context.Background(), &pb.ListCommitsRequest{Parent: "repositories/orphan"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetCommits()); n != 0 {
		t.Errorf("the refused record left %d commits", n)
	}
	// The parent first, as a dump has it: restored.
	when := time.Now().UTC().Truncate(time.Millisecond)
	root := commitRecord(graveler.Commit{Version: 1, Message: "root", CreationDate: when, Generation: 1})
	child := commitRecord(graveler.Commit{Version: 1, Message: "child", CreationDate: when, Generation: 2,
		Parents: []graveler.CommitID{graveler.CommitID(root.GetCommit().GetId())}})
	if err := restoreInto(t, e, "chain", root, child, mainRecord("chain", child.GetCommit().GetId())); err != nil {
		t.Errorf("restore of a root and its child: %v", err)
	}
}
