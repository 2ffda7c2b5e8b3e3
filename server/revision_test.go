package server

import (
	"context"
	"io"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	pb "graveler/api/graveler/v1"
	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/gravelertest"
	"graveler/graveler/ref"
	"graveler/graveler/staging/stagingpb"
	"graveler/keys"
)

// etcdWorld is a server on a real graveler on a real embedded etcd, with
// a raw etcd client to check what the responses say against etcd itself.
type etcdWorld struct {
	t     *testing.T
	ctx   context.Context
	srv   *etcdkvtest.Server
	store *etcdkv.Store
	c     pb.GravelerServiceClient
}

func newEtcdWorld(t *testing.T) *etcdWorld {
	srv := etcdkvtest.NewServer(t)
	store := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	h := start(t, gravelertest.New(t, store, gravelertest.Options{}), GRPCOptions{})
	return &etcdWorld{t: t, ctx: context.Background(), srv: srv, store: store, c: h.client}
}

// at reads the etcd key of (partition, key) at revision rev (0: now).
func (w *etcdWorld) at(part, key []byte, rev int64) (value []byte, modRev int64, ok bool) {
	w.t.Helper()
	var opts []clientv3.OpOption
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := w.srv.Client.Get(w.ctx, w.store.RawKey(part, key), opts...)
	if err != nil {
		w.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, false
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision, true
}

// written checks that the key was written at exactly rev and not since.
func (w *etcdWorld) written(what string, part, key []byte, rev int64) []byte {
	w.t.Helper()
	v, mod, ok := w.at(part, key, 0)
	if !ok || mod != rev {
		w.t.Fatalf("%s: response revision %d, the key %q is at revision %d (present %v)", what, rev, key, mod, ok)
	}
	return v
}

// deleted checks that the key was deleted at exactly rev.
func (w *etcdWorld) deleted(what string, part, key []byte, rev int64) {
	w.t.Helper()
	_, _, after := w.at(part, key, rev)
	_, _, before := w.at(part, key, rev-1)
	if after || !before {
		w.t.Fatalf("%s: response revision %d, but the key %q was not deleted there (present before %v, at %v)", what, rev, key, before, after)
	}
}

func (w *etcdWorld) repoPart(repo string) []byte {
	w.t.Helper()
	data, _, ok := w.at(keys.Graveler(), keys.Repository(repo), 0)
	if !ok {
		w.t.Fatalf("repository %s has no record", repo)
	}
	r, err := ref.DecodeRepository(data)
	if err != nil {
		w.t.Fatal(err)
	}
	return keys.RepositoryPartition(repo, string(r.UniqueID))
}

// branchWritten checks a branch write at rev and that it says change.
func (w *etcdWorld) branchWritten(what, repo, branch string, rev int64, change graveler.BranchChange) *graveler.Branch {
	w.t.Helper()
	b, err := ref.DecodeBranch(w.written(what, w.repoPart(repo), keys.Branch(branch), rev))
	if err != nil {
		w.t.Fatal(err)
	}
	if b.Change != change {
		w.t.Fatalf("%s: the branch record says change %d, want %d", what, b.Change, change)
	}
	return b
}

func (w *etcdWorld) put(repo, branch, key string) {
	w.t.Helper()
	if _, err := w.c.PutEntry(w.ctx, &pb.PutEntryRequest{Branch: "repositories/" + repo + "/branches/" + branch,
		Entry: &pb.Entry{Key: []byte(key), Value: &pb.Value{Identity: []byte(key), Data: []byte(key)}}}); err != nil {
		w.t.Fatal(err)
	}
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// TestMutationRevisions: over real gRPC on a real etcd, every mutation's
// response revision is the etcd revision at which its ref record changed
// (a put's ModRevision, a delete's own revision), not a later write of
// the same operation (a token queued for the cleaner after a commit).
func TestMutationRevisions(t *testing.T) {
	if testing.Short() {
		t.Skip("embedded etcd")
	}
	w := newEtcdWorld(t)
	c := w.c
	const repo, main, dev = "revs", "repositories/revs/branches/main", "repositories/revs/branches/dev"

	cr := must[*pb.CreateRepositoryResponse](t)(c.CreateRepository(w.ctx, &pb.CreateRepositoryRequest{RepositoryId: repo}))
	rec, err := ref.DecodeRepository(w.written("CreateRepository", keys.Graveler(), keys.Repository(repo), cr.GetRevision()))
	if err != nil || rec.State != graveler.RepositoryStateActive {
		t.Fatalf("CreateRepository: the record at its revision is %v, %v", rec, err)
	}
	w.branchWritten("CreateRepository's default branch", repo, "main", w.branchRev(repo, "main"), graveler.ChangeCreate)

	w.put(repo, "main", "a")
	cm := must[*pb.CommitResponse](t)(c.Commit(w.ctx, &pb.CommitRequest{Branch: main, Options: &pb.CommitOptions{Message: "a"}}))
	w.branchWritten("Commit", repo, "main", cm.GetRevision(), graveler.ChangeCommit)
	if cur := w.currentRevision(); cur <= cm.GetRevision() {
		t.Fatalf("Commit: nothing written after its branch write (now %d): the test does not tell the decisive write from the last", cur)
	}

	cb := must[*pb.CreateBranchResponse](t)(c.CreateBranch(w.ctx, &pb.CreateBranchRequest{Parent: "repositories/" + repo, BranchId: "dev", SourceRef: "main"}))
	w.branchWritten("CreateBranch", repo, "dev", cb.GetRevision(), graveler.ChangeCreate)

	w.put(repo, "dev", "b")
	devCommit := must[*pb.CommitResponse](t)(c.Commit(w.ctx, &pb.CommitRequest{Branch: dev, Options: &pb.CommitOptions{Message: "b"}})).GetCommit()
	ff := must[*pb.MergeResponse](t)(c.Merge(w.ctx, &pb.MergeRequest{Destination: main, SourceRef: "dev"}))
	w.branchWritten("Merge (fast-forward)", repo, "main", ff.GetRevision(), graveler.ChangeMerge)
	if !ff.GetFastForward() || ff.GetCommit().GetId() != devCommit.GetId() {
		t.Fatalf("Merge of a descendant: fast_forward %v, commit %s; want the source's commit %s", ff.GetFastForward(), ff.GetCommit().GetId(), devCommit.GetId())
	}

	w.put(repo, "dev", "c")
	must[*pb.CommitResponse](t)(c.Commit(w.ctx, &pb.CommitRequest{Branch: dev, Options: &pb.CommitOptions{Message: "c"}}))
	noFF := must[*pb.MergeResponse](t)(c.Merge(w.ctx, &pb.MergeRequest{Destination: main, SourceRef: "dev", NoFf: true}))
	w.branchWritten("Merge (no_ff)", repo, "main", noFF.GetRevision(), graveler.ChangeMerge)
	if noFF.GetFastForward() || len(noFF.GetCommit().GetParents()) != 2 {
		t.Fatalf("Merge with no_ff: fast_forward %v, parents %v; want a merge commit", noFF.GetFastForward(), noFF.GetCommit().GetParents())
	}

	rv := must[*pb.RevertResponse](t)(c.Revert(w.ctx, &pb.RevertRequest{Branch: main, Ref: devCommit.GetId()}))
	w.branchWritten("Revert", repo, "main", rv.GetRevision(), graveler.ChangeRevert)
	cp := must[*pb.CherryPickResponse](t)(c.CherryPick(w.ctx, &pb.CherryPickRequest{Branch: main, Ref: devCommit.GetId()}))
	w.branchWritten("CherryPick", repo, "main", cp.GetRevision(), graveler.ChangeCherryPick)

	w.put(repo, "main", "s")
	rs := must[*pb.ResetResponse](t)(c.Reset(w.ctx, &pb.ResetRequest{Branch: main, Scope: pb.ResetScope_RESET_SCOPE_ALL}))
	w.branchWritten("Reset (all)", repo, "main", rs.GetRevision(), graveler.ChangeReset)

	// A reset of a key writes no branch record: its revision is that of
	// its last write, here the reset record written over the staged
	// entry.
	w.put(repo, "main", "k")
	before := w.branchRev(repo, "main")
	tok := w.branch(repo, "main").StagingToken
	rk := must[*pb.ResetResponse](t)(c.Reset(w.ctx, &pb.ResetRequest{Branch: main, Scope: pb.ResetScope_RESET_SCOPE_KEY, Key: []byte("k")}))
	var resetRec stagingpb.Entry
	if err := proto.Unmarshal(w.written("Reset (key)", keys.StagingPartition(string(tok)), keys.Entry([]byte("k")), rk.GetRevision()), &resetRec); err != nil || !resetRec.GetReset_() {
		t.Fatalf("Reset (key): the record at the response revision is %v (%v), want a reset record", &resetRec, err)
	}
	if w.branchRev(repo, "main") != before {
		t.Fatal("Reset (key) wrote the branch record")
	}

	rh := must[*pb.ResetHardResponse](t)(c.ResetHard(w.ctx, &pb.ResetHardRequest{Name: main, Ref: cm.GetCommit().GetId(), Force: true}))
	w.branchWritten("ResetHard", repo, "main", rh.GetRevision(), graveler.ChangeResetHard)

	ct := must[*pb.CreateTagResponse](t)(c.CreateTag(w.ctx, &pb.CreateTagRequest{Parent: "repositories/" + repo, TagId: "v1", Ref: "main"}))
	w.written("CreateTag", w.repoPart(repo), keys.Tag("v1"), ct.GetRevision())
	dt := must[*pb.DeleteTagResponse](t)(c.DeleteTag(w.ctx, &pb.DeleteTagRequest{Name: "repositories/" + repo + "/tags/v1"}))
	w.deleted("DeleteTag", w.repoPart(repo), keys.Tag("v1"), dt.GetRevision())

	part := w.repoPart(repo)
	db := must[*pb.DeleteBranchResponse](t)(c.DeleteBranch(w.ctx, &pb.DeleteBranchRequest{Name: dev}))
	w.deleted("DeleteBranch", part, keys.Branch("dev"), db.GetRevision())

	// Dump, then restore into a bare repository: the revision is that of
	// the restore's last ref record, and restored branches say so.
	must[*pb.CreateTagResponse](t)(c.CreateTag(w.ctx, &pb.CreateTagRequest{Parent: "repositories/" + repo, TagId: "v2", Ref: "main"}))
	dump, err := c.DumpRefs(w.ctx, &pb.DumpRefsRequest{Repository: "repositories/" + repo})
	if err != nil {
		t.Fatal(err)
	}
	var records []*pb.RefsRecord
	for {
		msg, err := dump.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		records = append(records, msg.GetRecords()...)
	}
	bare := must[*pb.CreateRepositoryResponse](t)(c.CreateRepository(w.ctx, &pb.CreateRepositoryRequest{RepositoryId: "copy", Bare: true}))
	rec, err = ref.DecodeRepository(w.written("CreateRepository (bare)", keys.Graveler(), keys.Repository("copy"), bare.GetRevision()))
	if err != nil || rec.State != graveler.RepositoryStateActive {
		t.Fatalf("CreateRepository (bare): the record at its revision is %v, %v", rec, err)
	}
	restore, err := c.RestoreRefs(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := restore.Send(&pb.RestoreRefsRequest{Repository: "repositories/copy", Records: records}); err != nil {
		t.Fatal(err)
	}
	rr, err := restore.CloseAndRecv()
	if err != nil {
		t.Fatal(err)
	}
	w.written("RestoreRefs (its last record, tag v2)", w.repoPart("copy"), keys.Tag("v2"), rr.GetRevision())
	restored := w.branch("copy", "main")
	if restored.Change != graveler.ChangeRestore {
		t.Fatalf("a restored branch says change %d", restored.Change)
	}

	// DeleteRepository: the write that takes it away from readers, the
	// record marked deleting; the record is removed after it.
	dr := must[*pb.DeleteRepositoryResponse](t)(c.DeleteRepository(w.ctx, &pb.DeleteRepositoryRequest{Name: "repositories/" + repo}))
	data, mod, ok := w.at(keys.Graveler(), keys.Repository(repo), dr.GetRevision())
	if !ok || mod != dr.GetRevision() {
		t.Fatalf("DeleteRepository: response revision %d, the record there is at %d (present %v)", dr.GetRevision(), mod, ok)
	}
	if rec, err := ref.DecodeRepository(data); err != nil || rec.State != graveler.RepositoryStateDeleting {
		t.Fatalf("DeleteRepository: the record at its revision is %v, %v", rec, err)
	}
	if _, _, ok := w.at(keys.Graveler(), keys.Repository(repo), 0); ok {
		t.Fatal("DeleteRepository left the record")
	}
}

// branchRev is the revision of a branch's record now.
func (w *etcdWorld) branchRev(repo, branch string) int64 {
	w.t.Helper()
	_, mod, ok := w.at(w.repoPart(repo), keys.Branch(branch), 0)
	if !ok {
		w.t.Fatalf("branch %s of %s has no record", branch, repo)
	}
	return mod
}

func (w *etcdWorld) branch(repo, branch string) *graveler.Branch {
	w.t.Helper()
	data, _, ok := w.at(w.repoPart(repo), keys.Branch(branch), 0)
	if !ok {
		w.t.Fatalf("branch %s of %s has no record", branch, repo)
	}
	b, err := ref.DecodeBranch(data)
	if err != nil {
		w.t.Fatal(err)
	}
	return b
}

func (w *etcdWorld) currentRevision() int64 {
	w.t.Helper()
	resp, err := w.srv.Client.Get(w.ctx, "any")
	if err != nil {
		w.t.Fatal(err)
	}
	return resp.Header.Revision
}
