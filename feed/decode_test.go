package feed_test

import (
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"graveler/feed"
	"graveler/graveler"
	"graveler/graveler/ref/refpb"
	"graveler/keys"
)

// Every kind of ref change made through the service reads as one event of
// the right type, with the cause its write recorded and, for moves that
// write a commit, that commit.
func TestWatchEventTypes(t *testing.T) {
	e := newEnv(t, feed.Config{})
	s := e.subscribe(feed.Request{})
	const repo = graveler.RepositoryID("events")
	e.createRepo(repo)
	main0 := e.head(repo, "main")
	if _, err := e.svc.CreateBranch(e.ctx, repo, "dev", "main"); err != nil {
		t.Fatal(err)
	}
	c1 := e.commit(repo, "dev", "a", "first")
	if id, ff, err := e.svc.Merge(e.ctx, repo, "main", "dev", graveler.MergeParams{CommitParams: graveler.CommitParams{Committer: "tester", Message: "merge"}}); err != nil || !ff || id != c1 {
		t.Fatalf("merge: %s %v %v", id, ff, err)
	}
	c2 := e.commit(repo, "dev", "b", "second")
	rv, err := e.svc.Revert(e.ctx, repo, "dev", graveler.Ref(c2), 0, graveler.CommitParams{Committer: "tester", Message: "revert second"})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := e.svc.CherryPick(e.ctx, repo, "main", graveler.Ref(c2), 0, graveler.CommitParams{Committer: "tester", Message: "pick second"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Set(e.ctx, repo, "dev", graveler.Key("c"), graveler.Value{Identity: []byte("c"), Data: []byte("c")}, graveler.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Reset(e.ctx, repo, "dev", graveler.ResetTypeAll, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.ResetHard(e.ctx, repo, "dev", graveler.Ref(main0), graveler.ResetHardOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.CreateTag(e.ctx, repo, "v1", graveler.Ref(c1)); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.DeleteTag(e.ctx, repo, "v1"); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.DeleteBranch(e.ctx, repo, "dev"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.CreateBareRepository(e.ctx, "bare", "mem://bare", "main"); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.DeleteRepository(e.ctx, repo); err != nil {
		t.Fatal(err)
	}
	e.clean()
	got := shows(events(e.until(s, e.rev())))
	sameLines(t, got, []string{
		fmt.Sprintf("REPOSITORY_CREATED events new=%s default=main", short(main0)),
		fmt.Sprintf("BRANCH_CREATED events branch=dev new=%s cause=CREATE", short(main0)),
		fmt.Sprintf("BRANCH_MOVED events branch=dev old=%s new=%s cause=COMMIT commit=%q", short(main0), short(c1), "first"),
		fmt.Sprintf("BRANCH_MOVED events branch=main old=%s new=%s cause=MERGE commit=%q", short(main0), short(c1), "first"),
		fmt.Sprintf("BRANCH_MOVED events branch=dev old=%s new=%s cause=COMMIT commit=%q", short(c1), short(c2), "second"),
		fmt.Sprintf("BRANCH_MOVED events branch=dev old=%s new=%s cause=REVERT commit=%q", short(c2), short(rv), "revert second"),
		fmt.Sprintf("BRANCH_MOVED events branch=main old=%s new=%s cause=CHERRY_PICK commit=%q", short(c1), short(cp), "pick second"),
		fmt.Sprintf("BRANCH_MOVED events branch=dev old=%s new=%s cause=RESET", short(rv), short(rv)),
		fmt.Sprintf("BRANCH_MOVED events branch=dev old=%s new=%s cause=RESET_HARD", short(rv), short(main0)),
		fmt.Sprintf("TAG_CREATED events tag=v1 new=%s", short(c1)),
		fmt.Sprintf("TAG_DELETED events tag=v1 old=%s", short(c1)),
		fmt.Sprintf("BRANCH_DELETED events branch=dev old=%s", short(main0)),
		"REPOSITORY_CREATED bare default=main",
		"REPOSITORY_DELETED events",
	})
}

// A deleted repository says so once: neither the rest of the delete nor
// the cleaner dropping its partition (and its staging partitions) shows.
func TestWatchDeletedRepositoryOnlyOnce(t *testing.T) {
	e := newEnv(t, feed.Config{})
	const repo = graveler.RepositoryID("doomed")
	e.createRepo(repo)
	for i := range 3 {
		b := graveler.BranchID(fmt.Sprintf("b%d", i))
		if _, err := e.svc.CreateBranch(e.ctx, repo, b, "main"); err != nil {
			t.Fatal(err)
		}
		e.commit(repo, b, "k", fmt.Sprintf("c%d", i))
		if _, err := e.svc.CreateTag(e.ctx, repo, graveler.TagID(fmt.Sprintf("t%d", i)), graveler.Ref(b)); err != nil {
			t.Fatal(err)
		}
	}
	s := e.subscribe(feed.Request{})
	if err := e.svc.DeleteRepository(e.ctx, repo); err != nil {
		t.Fatal(err)
	}
	e.clean()
	e.createRepo("after") // the cleaner's writes come before this one
	got := shows(events(e.until(s, e.rev())))
	sameLines(t, got, []string{
		"REPOSITORY_DELETED doomed",
		fmt.Sprintf("REPOSITORY_CREATED after new=%s default=main", short(e.head("after", "main"))),
	})
	// The partition is really gone: the cleaner did drop it.
	resp, err := e.srv.Client.Get(e.ctx, e.store.Prefix()+"/repo:doomed-", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("partition of the deleted repository: %d keys, %v", resp.Count, err)
	}
}

// rawRepository writes a repository record as ref would.
func (e *env) rawRepository(id, uid string, state refpb.RepositoryState) {
	e.t.Helper()
	e.rawPut(keys.Graveler(), keys.Repository(id), &refpb.Repository{
		FormatVersion: 1, StorageNamespace: "mem://" + id, DefaultBranchId: "main",
		CreationDate: timestamppb.New(time.Now().Add(-time.Hour)), State: state, UniqueId: uid, WriteId: []byte(uid + state.String()),
	})
}

func (e *env) rawPut(part, key []byte, m proto.Message) {
	e.t.Helper()
	data, err := proto.Marshal(m)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.store.Set(e.ctx, part, key, data); err != nil {
		e.t.Fatal(err)
	}
}

// A creation that stopped half way (its record initial, its commit and
// default branch written) and the cleaner retiring it emit nothing, and
// neither does a late write into its partition once the name is reused.
func TestWatchAbandonedCreationIsSilent(t *testing.T) {
	e := newEnv(t, feed.Config{})
	s := e.subscribe(feed.Request{})
	part := keys.RepositoryPartition("ghost", "01ABANDONED")
	e.rawRepository("ghost", "01ABANDONED", refpb.RepositoryState_REPOSITORY_STATE_INITIAL)
	e.rawPut(part, keys.Commit("c0"), &refpb.Commit{FormatVersion: 1, Message: "initial"})
	e.rawPut(part, keys.Branch("main"), &refpb.Branch{FormatVersion: 1, CommitId: "c0", StagingToken: "ghost.tok", Change: int32(graveler.ChangeCreate)})
	e.rawPut(part, keys.Branch("dev"), &refpb.Branch{FormatVersion: 1, CommitId: "c0", StagingToken: "ghost.tok2", Change: int32(graveler.ChangeCreate)})
	e.clean()
	if _, _, err := e.store.Get(e.ctx, keys.Graveler(), keys.Repository("ghost")); err == nil {
		t.Fatal("the cleaner left the abandoned record")
	}
	e.createRepo("ghost")
	e.rawPut(part, keys.Branch("late"), &refpb.Branch{FormatVersion: 1, CommitId: "c0", StagingToken: "ghost.tok3", Change: int32(graveler.ChangeCreate)})
	if _, err := e.svc.CreateBranch(e.ctx, "ghost", "real", "main"); err != nil {
		t.Fatal(err)
	}
	h := short(e.head("ghost", "main"))
	got := shows(events(e.until(s, e.rev())))
	sameLines(t, got, []string{
		fmt.Sprintf("REPOSITORY_CREATED ghost new=%s default=main", h),
		fmt.Sprintf("BRANCH_CREATED ghost branch=real new=%s cause=CREATE", h),
	})
}

// Changes etcd applies at one revision come in one message, in the order
// of the transaction; a record written by a server that does not record
// causes still reads as a move when its head changed, and a rewrite that
// changes nothing but tokens (sealing) is no event.
func TestWatchOneRevisionOneMessage(t *testing.T) {
	e := newEnv(t, feed.Config{})
	const repo = graveler.RepositoryID("txn")
	e.createRepo(repo)
	rec, err := e.svc.GetRepository(e.ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	h := e.head(repo, "main")
	s := e.subscribe(feed.Request{})
	part := keys.RepositoryPartition(string(repo), string(rec.UniqueID))
	branch := func(commit string, change graveler.BranchChange) string {
		data, err := proto.Marshal(&refpb.Branch{FormatVersion: 1, CommitId: commit, StagingToken: "txn.tok", Change: int32(change), WriteId: []byte(time.Now().String())})
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	resp, err := e.srv.Client.Txn(e.ctx).Then(
		clientv3.OpPut(e.store.RawKey(part, keys.Branch("y")), branch(string(h), graveler.ChangeCreate)),
		clientv3.OpPut(e.store.RawKey(part, keys.Branch("x")), branch(string(h), graveler.ChangeRestore)),
	).Commit()
	if err != nil {
		t.Fatal(err)
	}
	txnRev := resp.Header.Revision
	if _, err := e.srv.Client.Txn(e.ctx).Then(
		clientv3.OpPut(e.store.RawKey(part, keys.Branch("x")), branch("c-older-server", graveler.ChangeNone)),
		clientv3.OpPut(e.store.RawKey(part, keys.Branch("y")), branch(string(h), graveler.ChangeNone)),
		clientv3.OpDelete(e.store.RawKey(part, keys.Branch("main"))),
	).Commit(); err != nil {
		t.Fatal(err)
	}
	ms := e.until(s, e.rev())
	if len(ms) != 2 || ms[0].Revision != txnRev {
		t.Fatalf("want 2 messages, the first at revision %d; got %d: %+v", txnRev, len(ms), ms)
	}
	sameLines(t, shows(ms[0].Events), []string{
		fmt.Sprintf("BRANCH_CREATED txn branch=y new=%s cause=CREATE", short(h)),
		fmt.Sprintf("BRANCH_CREATED txn branch=x new=%s cause=RESTORE", short(h)),
	})
	sameLines(t, shows(ms[1].Events), []string{
		fmt.Sprintf("BRANCH_MOVED txn branch=x old=%s new=c-older-", short(h)),
		fmt.Sprintf("BRANCH_DELETED txn branch=main old=%s", short(h)),
	})
}
