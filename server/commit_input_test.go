package server_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	pb "graveler/api/graveler/v1"
	"graveler/graveler"
)

// TestCommitRecordTooLargeNamesItsParts: every RPC that writes a commit
// record refuses one whose message, committer and metadata would not fit
// in the store's record before doing any work, with INVALID_ARGUMENT /
// VALUE_TOO_LARGE and a message naming each part's size and the API
// limit, not the store's internals; a refused commit leaves the branch's
// staged changes to the next commit.
func TestCommitRecordTooLargeNamesItsParts(t *testing.T) {
	e := startDaemon(t)
	ctx := context.Background()
	const dev = "repositories/repo/branches/dev"
	const main = "repositories/repo/branches/main"
	e.put(t, "dev", "c/1")
	picked, err := e.c.Commit(ctx, &pb.CommitRequest{Branch: dev, Options: &pb.CommitOptions{Message: "c"}})
	if err != nil {
		t.Fatal(err)
	}
	e.put(t, "dev", "c/2")
	bigMeta := map[string]string{"k": strings.Repeat("v", 2<<20)}
	mixed := &pb.CommitOptions{AllowEmpty: true, Message: strings.Repeat("m", graveler.MaxCommitMessageLen), Metadata: map[string]string{"k": strings.Repeat("v", 200<<10)}}
	calls := map[string]func() error{
		"Commit metadata": func() error {
			_, err := e.c.Commit(ctx, &pb.CommitRequest{Branch: dev, Options: &pb.CommitOptions{Metadata: bigMeta}})
			return err
		},
		"Commit committer": func() error {
			_, err := e.c.Commit(ctx, &pb.CommitRequest{Branch: dev, Options: &pb.CommitOptions{AllowEmpty: true, Committer: strings.Repeat("c", 2<<20)}})
			return err
		},
		"Commit message and metadata": func() error {
			_, err := e.c.Commit(ctx, &pb.CommitRequest{Branch: dev, Options: mixed})
			return err
		},
		"Merge metadata": func() error {
			_, err := e.c.Merge(ctx, &pb.MergeRequest{Destination: main, SourceRef: picked.GetCommit().GetId(), NoFf: true, Options: &pb.CommitOptions{Metadata: bigMeta}})
			return err
		},
		"Revert metadata": func() error {
			_, err := e.c.Revert(ctx, &pb.RevertRequest{Branch: main, Ref: "main", Options: &pb.CommitOptions{Metadata: bigMeta}})
			return err
		},
		"CherryPick metadata": func() error {
			_, err := e.c.CherryPick(ctx, &pb.CherryPickRequest{Branch: main, Ref: picked.GetCommit().GetId(), Options: &pb.CommitOptions{Metadata: bigMeta}})
			return err
		},
	}
	for name, call := range calls {
		err := call()
		code, reason, msg := statusInfo(err)
		field := name[strings.Index(name, " ")+1:]
		if code != codes.InvalidArgument || reason != "VALUE_TOO_LARGE" || strings.Contains(msg, "kv:") ||
			!strings.Contains(msg, strconv.Itoa(graveler.MaxCommitUserBytes)) || !strings.Contains(msg, strings.Fields(field)[0]) {
			t.Errorf("%s over the record's limit: %v", name, err)
		}
	}
	for _, b := range []string{"main", "dev"} {
		r, err := e.c.GetBranch(ctx, &pb.GetBranchRequest{Name: "repositories/repo/branches/" + b})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]string{"main": e.head, "dev": picked.GetCommit().GetId()}[b]; r.GetBranch().GetCommitId() != want {
			t.Errorf("a refused commit moved %s to %s", b, r.GetBranch().GetCommitId())
		}
	}
	if _, err := e.c.Commit(ctx, &pb.CommitRequest{Branch: dev, Options: &pb.CommitOptions{Message: "after"}}); err != nil {
		t.Errorf("the change staged before the refused commits: %v", err)
	}
}

// TestCommitRecordAtTheLimitIsStored: the limit refuses nothing the store
// could hold: a commit whose message, committer and metadata take exactly
// MaxCommitUserBytes is committed, and one byte more is refused.
func TestCommitRecordAtTheLimitIsStored(t *testing.T) {
	e := startDaemon(t)
	ctx := context.Background()
	msg, committer := strings.Repeat("m", graveler.MaxCommitMessageLen), "c"
	n := graveler.MaxCommitUserBytes - graveler.CommitUserBytes(msg, committer, graveler.Metadata{"k": ""})
	for graveler.CommitUserBytes(msg, committer, graveler.Metadata{"k": strings.Repeat("v", n)}) > graveler.MaxCommitUserBytes {
		n--
	}
	md := map[string]string{"k": strings.Repeat("v", n)}
	if got := graveler.CommitUserBytes(msg, committer, md); got != graveler.MaxCommitUserBytes {
		t.Fatalf("could not size the metadata to the limit: %d bytes", got)
	}
	_, err := e.c.Commit(ctx, &pb.CommitRequest{Branch: "repositories/repo/branches/dev", Options: &pb.CommitOptions{AllowEmpty: true, Message: msg, Committer: committer, Metadata: md}})
	if err != nil {
		t.Fatalf("a commit at the limit: %v", err)
	}
	_, err = e.c.Commit(ctx, &pb.CommitRequest{Branch: "repositories/repo/branches/dev", Options: &pb.CommitOptions{AllowEmpty: true, Message: msg, Committer: committer + "c", Metadata: md}})
	if code, reason, _ := statusInfo(err); code != codes.InvalidArgument || reason != "VALUE_TOO_LARGE" {
		t.Errorf("a commit one byte over the limit: %v", err)
	}
}
