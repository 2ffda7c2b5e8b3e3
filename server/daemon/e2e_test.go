package daemon_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	pb "graveler/api/graveler/v1"
	"graveler/client"
	"graveler/server/daemon"
	"graveler/server/daemon/daemontest"
)

func dial(t *testing.T, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, addr, append([]client.Option{client.WithTimeout(30 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
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

// wantErr checks an error's class, status code and ErrorInfo reason.
func wantErr(t *testing.T, err error, sentinel error, code codes.Code, reason string) *client.Error {
	t.Helper()
	e, ok := errors.AsType[*client.Error](err)
	if !ok {
		t.Fatalf("error %v is not a *client.Error", err)
	}
	if !errors.Is(err, sentinel) || e.Code != code || e.Reason != reason {
		t.Fatalf("got %v (code %v, reason %q), want %v / %v / %s", err, e.Code, e.Reason, sentinel, code, reason)
	}
	return e
}

func put(t *testing.T, cl *client.Client, repo, branch, key, data string) {
	t.Helper()
	_, err := cl.PutEntry(context.Background(), &pb.PutEntryRequest{Branch: client.Branch(repo, branch),
		Entry: &pb.Entry{Key: []byte(key), Value: &pb.Value{Identity: []byte("id-" + data), Data: []byte(data)}}})
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func get(t *testing.T, cl *client.Client, repo, ref, key string) (string, error) {
	t.Helper()
	r, err := cl.GetEntry(context.Background(), &pb.GetEntryRequest{Repository: client.Repository(repo), Ref: ref, Key: []byte(key)})
	return string(r.GetEntry().GetValue().GetData()), err
}

func listAll(t *testing.T, cl *client.Client, req *pb.ListEntriesRequest) []string {
	t.Helper()
	var keys []string
	for {
		r, err := cl.ListEntries(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.GetEntries() {
			k := string(e.GetKey())
			if e.GetCommonPrefix() {
				k += "*"
			}
			keys = append(keys, k)
		}
		if r.GetNextPageToken() == "" {
			return keys
		}
		req.PageToken = r.GetNextPageToken()
	}
}

func commit(t *testing.T, cl *client.Client, repo, branch, msg string) *pb.Commit {
	t.Helper()
	r, err := cl.Commit(context.Background(), &pb.CommitRequest{Branch: client.Branch(repo, branch),
		Options: &pb.CommitOptions{Message: msg, Committer: "tester", Metadata: map[string]string{"k": "v"}}})
	if err != nil {
		t.Fatalf("commit %s: %v", msg, err)
	}
	return r.GetCommit()
}

func TestEndToEnd(t *testing.T) {
	srv := daemontest.Start(t, nil)
	cl := dial(t, srv.Addr)
	ctx := context.Background()

	repo := must[*pb.CreateRepositoryResponse](t)(cl.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "repo1"})).GetRepository()
	if repo.GetName() != "repositories/repo1" || repo.GetDefaultBranch() != "main" || repo.GetStorageNamespace() == "" {
		t.Fatalf("created %v", repo)
	}
	_, err := cl.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "repo1"})
	wantErr(t, err, client.ErrAlreadyExists, codes.AlreadyExists, "REPOSITORY_ALREADY_EXISTS")

	// Stage, read back, list with paging and a delimiter.
	for _, k := range []string{"a/1", "a/2", "a/3", "b/1", "b/2", "c"} {
		put(t, cl, "repo1", "main", k, "v-"+k)
	}
	if v, err := get(t, cl, "repo1", "main", "a/2"); err != nil || v != "v-a/2" {
		t.Fatalf("get a/2 = %q, %v", v, err)
	}
	keys := listAll(t, cl, &pb.ListEntriesRequest{Repository: "repositories/repo1", Ref: "main", PageSize: 2})
	if !slices.Equal(keys, []string{"a/1", "a/2", "a/3", "b/1", "b/2", "c"}) {
		t.Fatalf("list: %v", keys)
	}
	keys = listAll(t, cl, &pb.ListEntriesRequest{Repository: "repositories/repo1", Ref: "main", Delimiter: []byte("/"), PageSize: 1})
	if !slices.Equal(keys, []string{"a/*", "b/*", "c"}) {
		t.Fatalf("list with delimiter: %v", keys)
	}
	keys = listAll(t, cl, &pb.ListEntriesRequest{Repository: "repositories/repo1", Ref: "main", Prefix: []byte("b/")})
	if !slices.Equal(keys, []string{"b/1", "b/2"}) {
		t.Fatalf("list with prefix: %v", keys)
	}
	du := must[*pb.DiffUncommittedResponse](t)(cl.DiffUncommitted(ctx, &pb.DiffUncommittedRequest{Branch: client.Branch("repo1", "main")}))
	if len(du.GetDifferences()) != 6 || du.GetDifferences()[0].GetType() != pb.DiffType_DIFF_TYPE_ADDED {
		t.Fatalf("diff uncommitted: %v", du.GetDifferences())
	}

	c1 := commit(t, cl, "repo1", "main", "first")
	if len(c1.GetId()) != 64 || c1.GetMessage() != "first" || c1.GetMetadata()["k"] != "v" || len(c1.GetParents()) != 1 {
		t.Fatalf("commit: %v", c1)
	}
	_, err = cl.Commit(ctx, &pb.CommitRequest{Branch: client.Branch("repo1", "main"), Options: &pb.CommitOptions{Message: "empty"}})
	wantErr(t, err, client.ErrFailedPrecondition, codes.FailedPrecondition, "NO_CHANGES")

	// Branch, change on both sides, merge.
	dev := must[*pb.CreateBranchResponse](t)(cl.CreateBranch(ctx, &pb.CreateBranchRequest{Parent: "repositories/repo1", BranchId: "dev", SourceRef: "main"})).GetBranch()
	if dev.GetCommitId() != c1.GetId() || dev.GetEtag() != c1.GetId() {
		t.Fatalf("branch: %v", dev)
	}
	put(t, cl, "repo1", "dev", "d/1", "dev-1")
	if _, err := cl.DeleteEntry(ctx, &pb.DeleteEntryRequest{Branch: client.Branch("repo1", "dev"), Key: []byte("c")}); err != nil {
		t.Fatal(err)
	}
	c2 := commit(t, cl, "repo1", "dev", "dev work")
	put(t, cl, "repo1", "main", "m/1", "main-1")
	c3 := commit(t, cl, "repo1", "main", "main work")
	merged := must[*pb.MergeResponse](t)(cl.Merge(ctx, &pb.MergeRequest{Destination: client.Branch("repo1", "main"), SourceRef: "dev",
		Options: &pb.CommitOptions{Message: "merge dev"}})).GetCommit()
	if !slices.Equal(merged.GetParents(), []string{c3.GetId(), c2.GetId()}) {
		t.Fatalf("merge parents %v, want [%s %s]", merged.GetParents(), c3.GetId(), c2.GetId())
	}
	if v, err := get(t, cl, "repo1", "main", "d/1"); err != nil || v != "dev-1" {
		t.Fatalf("merged d/1 = %q, %v", v, err)
	}
	_, err = get(t, cl, "repo1", "main", "c")
	wantErr(t, err, client.ErrNotFound, codes.NotFound, "ENTRY_NOT_FOUND")

	// Log: paged and streamed agree, newest first.
	var paged []string
	lreq := &pb.LogRequest{Repository: "repositories/repo1", Ref: "main", PageSize: 2}
	for {
		r := must[*pb.LogResponse](t)(cl.Log(ctx, lreq))
		for _, c := range r.GetCommits() {
			paged = append(paged, c.GetId())
		}
		if lreq.PageToken = r.GetNextPageToken(); lreq.PageToken == "" {
			break
		}
	}
	var streamed []string
	s := must[pb.GravelerService_StreamLogClient](t)(cl.StreamLog(ctx, &pb.StreamLogRequest{Repository: "repositories/repo1", Ref: "main"}))
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range m.GetCommits() {
			streamed = append(streamed, c.GetId())
		}
	}
	if len(paged) != 5 || paged[0] != merged.GetId() || !slices.Equal(paged, streamed) {
		t.Fatalf("log paged %v, streamed %v", paged, streamed)
	}
	for _, id := range []string{c1.GetId(), c2.GetId(), c3.GetId()} {
		if !slices.Contains(paged, id) {
			t.Fatalf("log %v lacks %s", paged, id)
		}
	}
	fp := must[*pb.LogResponse](t)(cl.Log(ctx, &pb.LogRequest{Repository: "repositories/repo1", Ref: "main", FirstParent: true, PageSize: 1}))
	if len(fp.GetCommits()) != 1 || fp.GetNextPageToken() == "" {
		t.Fatalf("first-parent log page: %v", fp)
	}

	// Diff between refs, paged and streamed.
	d := must[*pb.DiffResponse](t)(cl.Diff(ctx, &pb.DiffRequest{Repository: "repositories/repo1", LeftRef: c1.GetId(), RightRef: "main", PageSize: 1}))
	if len(d.GetDifferences()) != 1 || d.GetNextPageToken() == "" {
		t.Fatalf("diff page: %v", d)
	}
	var diffKeys []string
	ds := must[pb.GravelerService_StreamDiffClient](t)(cl.StreamDiff(ctx, &pb.StreamDiffRequest{Repository: "repositories/repo1", LeftRef: c1.GetId(), RightRef: "main"}))
	for {
		m, err := ds.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range m.GetDifferences() {
			diffKeys = append(diffKeys, fmt.Sprintf("%s%s", map[pb.DiffType]string{1: "+", 2: "-", 3: "~"}[x.GetType()], x.GetKey()))
		}
	}
	if !slices.Equal(diffKeys, []string{"-c", "+d/1", "+m/1"}) {
		t.Fatalf("diff: %v", diffKeys)
	}

	// Tags, GetCommit by ref expression.
	tag := must[*pb.CreateTagResponse](t)(cl.CreateTag(ctx, &pb.CreateTagRequest{Parent: "repositories/repo1", TagId: "v1", Ref: "main~1"})).GetTag()
	if tag.GetCommitId() != c3.GetId() {
		t.Fatalf("tag v1 at %s, want main~1 = %s", tag.GetCommitId(), c3.GetId())
	}
	_, err = cl.CreateTag(ctx, &pb.CreateTagRequest{Parent: "repositories/repo1", TagId: "v1", Ref: "main"})
	wantErr(t, err, client.ErrAlreadyExists, codes.AlreadyExists, "TAG_ALREADY_EXISTS")
	if got := must[*pb.GetCommitResponse](t)(cl.GetCommit(ctx, &pb.GetCommitRequest{Name: client.Commit("repo1", "v1")})).GetCommit(); got.GetId() != c3.GetId() {
		t.Fatalf("commit of v1: %v", got)
	}
	if v, err := get(t, cl, "repo1", "v1", "m/1"); err != nil || v != "main-1" {
		t.Fatalf("read at tag: %q %v", v, err)
	}

	// Revert the dev commit on main: c comes back, d/1 goes.
	if _, err := cl.Revert(ctx, &pb.RevertRequest{Branch: client.Branch("repo1", "main"), Ref: c2.GetId(), Options: &pb.CommitOptions{Message: "revert dev"}}); err != nil {
		t.Fatal(err)
	}
	if v, err := get(t, cl, "repo1", "main", "c"); err != nil || v != "v-c" {
		t.Fatalf("after revert c = %q, %v", v, err)
	}
	// Cherry-pick it back.
	if _, err := cl.CherryPick(ctx, &pb.CherryPickRequest{Branch: client.Branch("repo1", "main"), Ref: c2.GetId(), Options: &pb.CommitOptions{Message: "pick dev"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := get(t, cl, "repo1", "main", "c"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("after cherry-pick c: %v", err)
	}

	// Reset: a key, a prefix, everything.
	for _, k := range []string{"r/1", "r/2", "s/1", "t"} {
		put(t, cl, "repo1", "dev", k, k)
	}
	must[*pb.ResetResponse](t)(cl.Reset(ctx, &pb.ResetRequest{Branch: client.Branch("repo1", "dev"), Scope: pb.ResetScope_RESET_SCOPE_KEY, Key: []byte("t")}))
	must[*pb.ResetResponse](t)(cl.Reset(ctx, &pb.ResetRequest{Branch: client.Branch("repo1", "dev"), Scope: pb.ResetScope_RESET_SCOPE_PREFIX, Key: []byte("r/")}))
	keys = listAll(t, cl, &pb.ListEntriesRequest{Repository: "repositories/repo1", Ref: "dev"})
	if !slices.Equal(keys, []string{"a/1", "a/2", "a/3", "b/1", "b/2", "d/1", "s/1"}) {
		t.Fatalf("after partial resets: %v", keys)
	}
	_, err = cl.ResetHard(ctx, &pb.ResetHardRequest{Name: client.Branch("repo1", "dev"), Ref: c1.GetId(), Etag: c2.GetId()})
	wantErr(t, err, client.ErrFailedPrecondition, codes.FailedPrecondition, "DIRTY_BRANCH")
	must[*pb.ResetResponse](t)(cl.Reset(ctx, &pb.ResetRequest{Branch: client.Branch("repo1", "dev"), Scope: pb.ResetScope_RESET_SCOPE_ALL}))

	// ResetHard with a stale etag loses; with the current one wins.
	_, err = cl.ResetHard(ctx, &pb.ResetHardRequest{Name: client.Branch("repo1", "dev"), Ref: c1.GetId(), Etag: c1.GetId()})
	e := wantErr(t, err, client.ErrAborted, codes.Aborted, "BRANCH_HEAD_MOVED")
	if e.Metadata["branch"] != "repositories/repo1/branches/dev" {
		t.Fatalf("metadata: %v", e.Metadata)
	}
	moved := must[*pb.ResetHardResponse](t)(cl.ResetHard(ctx, &pb.ResetHardRequest{Name: client.Branch("repo1", "dev"), Ref: c1.GetId(), Etag: c2.GetId()})).GetBranch()
	if moved.GetCommitId() != c1.GetId() {
		t.Fatalf("reset hard: %v", moved)
	}

	// Listings of branches, tags, repositories, commits.
	br := must[*pb.ListBranchesResponse](t)(cl.ListBranches(ctx, &pb.ListBranchesRequest{Parent: "repositories/repo1", PageSize: 1}))
	if len(br.GetBranches()) != 1 || br.GetBranches()[0].GetName() != "repositories/repo1/branches/dev" || br.GetNextPageToken() == "" {
		t.Fatalf("branches page: %v", br)
	}
	tl := must[*pb.ListTagsResponse](t)(cl.ListTags(ctx, &pb.ListTagsRequest{Parent: "repositories/repo1"}))
	if len(tl.GetTags()) != 1 || tl.GetNextPageToken() != "" {
		t.Fatalf("tags: %v", tl)
	}
	cm := must[*pb.ListCommitsResponse](t)(cl.ListCommits(ctx, &pb.ListCommitsRequest{Parent: "repositories/repo1"}))
	if len(cm.GetCommits()) < 7 {
		t.Fatalf("commits: %d", len(cm.GetCommits()))
	}

	// Dump the refs, restore them into a bare repository, compare.
	var records []*pb.RefsRecord
	dr := must[pb.GravelerService_DumpRefsClient](t)(cl.DumpRefs(ctx, &pb.DumpRefsRequest{Repository: "repositories/repo1"}))
	for {
		m, err := dr.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		records = append(records, m.GetRecords()...)
	}
	// A namespace is held by one repository: the restore goes to a copy
	// of repo1's committed data.
	_, err = cl.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "repo2", Bare: true,
		Repository: &pb.Repository{StorageNamespace: repo.GetStorageNamespace()}})
	wantErr(t, err, client.ErrAlreadyExists, codes.AlreadyExists, "NAMESPACE_IN_USE")
	nsURL, err := url.Parse(repo.GetStorageNamespace())
	if err != nil {
		t.Fatal(err)
	}
	copyDir := filepath.FromSlash(nsURL.Path) + "-copy"
	if err := os.CopyFS(copyDir, os.DirFS(filepath.FromSlash(nsURL.Path))); err != nil {
		t.Fatal(err)
	}
	must[*pb.CreateRepositoryResponse](t)(cl.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "repo2", Bare: true,
		Repository: &pb.Repository{StorageNamespace: "file://" + filepath.ToSlash(copyDir)}}))
	rs := must[pb.GravelerService_RestoreRefsClient](t)(cl.RestoreRefs(ctx))
	for i := 0; i < len(records); i += 3 {
		msg := &pb.RestoreRefsRequest{Records: records[i:min(i+3, len(records))]}
		if i == 0 {
			msg.Repository = "repositories/repo2"
		}
		if err := rs.Send(msg); err != nil {
			t.Fatal(err)
		}
	}
	rr := must[*pb.RestoreRefsResponse](t)(rs.CloseAndRecv())
	if rr.GetRecords() != int64(len(records)) {
		t.Fatalf("restored %d of %d", rr.GetRecords(), len(records))
	}
	for _, b := range []string{"main", "dev"} {
		a := must[*pb.GetBranchResponse](t)(cl.GetBranch(ctx, &pb.GetBranchRequest{Name: client.Branch("repo1", b)})).GetBranch()
		r := must[*pb.GetBranchResponse](t)(cl.GetBranch(ctx, &pb.GetBranchRequest{Name: client.Branch("repo2", b)})).GetBranch()
		if a.GetCommitId() != r.GetCommitId() {
			t.Fatalf("branch %s: %s restored as %s", b, a.GetCommitId(), r.GetCommitId())
		}
	}
	if v, err := get(t, cl, "repo2", "v1", "m/1"); err != nil || v != "main-1" {
		t.Fatalf("restored repository read at tag: %q %v", v, err)
	}

	// Delete: tag, branch, repository.
	must[*pb.DeleteTagResponse](t)(cl.DeleteTag(ctx, &pb.DeleteTagRequest{Name: client.Tag("repo1", "v1")}))
	must[*pb.DeleteBranchResponse](t)(cl.DeleteBranch(ctx, &pb.DeleteBranchRequest{Name: client.Branch("repo1", "dev")}))
	_, err = cl.GetBranch(ctx, &pb.GetBranchRequest{Name: client.Branch("repo1", "dev")})
	wantErr(t, err, client.ErrNotFound, codes.NotFound, "BRANCH_NOT_FOUND")
	must[*pb.DeleteRepositoryResponse](t)(cl.DeleteRepository(ctx, &pb.DeleteRepositoryRequest{Name: "repositories/repo1"}))
	_, err = cl.GetRepository(ctx, &pb.GetRepositoryRequest{Name: "repositories/repo1"})
	e = wantErr(t, err, client.ErrNotFound, codes.NotFound, "REPOSITORY_NOT_FOUND")
	if e.Metadata["repository"] != "repositories/repo1" || client.Reason(err) != "REPOSITORY_NOT_FOUND" {
		t.Fatalf("ErrorInfo metadata %v", e.Metadata)
	}
}

func TestErrorsOverTheWire(t *testing.T) {
	srv := daemontest.Start(t, nil)
	cl := dial(t, srv.Addr)
	ctx := context.Background()
	must[*pb.CreateRepositoryResponse](t)(cl.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "errs"}))

	_, err := cl.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "Bad_Name"})
	wantErr(t, err, client.ErrInvalidArgument, codes.InvalidArgument, "INVALID_REPOSITORY_ID")
	_, err = cl.GetBranch(ctx, &pb.GetBranchRequest{Name: "repositories/errs/branches/nope"})
	wantErr(t, err, client.ErrNotFound, codes.NotFound, "BRANCH_NOT_FOUND")
	_, err = cl.GetBranch(ctx, &pb.GetBranchRequest{Name: "repositories/errs/nope"})
	wantErr(t, err, client.ErrInvalidArgument, codes.InvalidArgument, "INVALID_RESOURCE_NAME")
	_, err = cl.GetRepository(ctx, &pb.GetRepositoryRequest{Name: "repositories/nosuch"})
	wantErr(t, err, client.ErrNotFound, codes.NotFound, "REPOSITORY_NOT_FOUND")
	_, err = cl.ListEntries(ctx, &pb.ListEntriesRequest{Repository: "repositories/errs", Ref: "main", PageSize: -5})
	wantErr(t, err, client.ErrInvalidArgument, codes.InvalidArgument, "INVALID_PAGE_SIZE")

	// Page tokens: tampered, or replayed with other parameters.
	for i := range 5 {
		put(t, cl, "errs", "main", fmt.Sprintf("k%d", i), "x")
	}
	r := must[*pb.ListEntriesResponse](t)(cl.ListEntries(ctx, &pb.ListEntriesRequest{Repository: "repositories/errs", Ref: "main", PageSize: 2}))
	tok := []byte(r.GetNextPageToken())
	if len(tok) == 0 {
		t.Fatal("no next page token")
	}
	tampered := slices.Clone(tok)
	tampered[len(tampered)/2] ^= 0x01
	_, err = cl.ListEntries(ctx, &pb.ListEntriesRequest{Repository: "repositories/errs", Ref: "main", PageSize: 2, PageToken: string(tampered)})
	wantErr(t, err, client.ErrInvalidArgument, codes.InvalidArgument, "INVALID_PAGE_TOKEN")
	_, err = cl.ListEntries(ctx, &pb.ListEntriesRequest{Repository: "repositories/errs", Ref: "main", Prefix: []byte("k"), PageSize: 2, PageToken: string(tok)})
	wantErr(t, err, client.ErrInvalidArgument, codes.InvalidArgument, "INVALID_PAGE_TOKEN")

	// Merge conflict names the keys.
	must[*pb.CommitResponse](t)(cl.Commit(ctx, &pb.CommitRequest{Branch: client.Branch("errs", "main"), Options: &pb.CommitOptions{Message: "base"}}))
	must[*pb.CreateBranchResponse](t)(cl.CreateBranch(ctx, &pb.CreateBranchRequest{Parent: "repositories/errs", BranchId: "other", SourceRef: "main"}))
	put(t, cl, "errs", "main", "k1", "main-side")
	commit(t, cl, "errs", "main", "main side")
	put(t, cl, "errs", "other", "k1", "other-side")
	commit(t, cl, "errs", "other", "other side")
	_, err = cl.Merge(ctx, &pb.MergeRequest{Destination: client.Branch("errs", "main"), SourceRef: "other"})
	e := wantErr(t, err, client.ErrFailedPrecondition, codes.FailedPrecondition, "MERGE_CONFLICT")
	if e.Metadata["conflictingKeys"] != `["k1"]` || e.Metadata["branch"] != "repositories/errs/branches/main" {
		t.Fatalf("merge conflict metadata: %v", e.Metadata)
	}
	// Deadline passes through: an already expired deadline is DEADLINE_EXCEEDED.
	dctx, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	time.Sleep(time.Millisecond)
	_, err = cl.GetRepository(dctx, &pb.GetRepositoryRequest{Name: "repositories/errs"})
	if !errors.Is(err, client.ErrDeadlineExceeded) {
		t.Fatalf("expired deadline: %v", err)
	}
}

func TestAuth(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# operators\ns3cret alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := daemontest.Start(t, func(c *daemon.Config) { c.TokensFile = tokens })
	ctx := context.Background()
	for _, opts := range [][]client.Option{nil, {client.WithToken("wrong")}} {
		cl := dial(t, srv.Addr, opts...)
		_, err := cl.ListRepositories(ctx, &pb.ListRepositoriesRequest{})
		wantErr(t, err, client.ErrUnauthenticated, codes.Unauthenticated, "UNAUTHENTICATED")
		if _, err := healthpb.NewHealthClient(cl.Conn()).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("health must not need a token: %v", err)
		}
	}
	// With a valid token the call reaches the handler, whose own validation
	// then answers.
	cl := dial(t, srv.Addr, client.WithToken("s3cret"))
	_, err := cl.GetRepository(ctx, &pb.GetRepositoryRequest{Name: "not-a-name"})
	wantErr(t, err, client.ErrInvalidArgument, codes.InvalidArgument, "INVALID_RESOURCE_NAME")
}

// reachesHandler checks that a call passes the transport and the
// interceptors: the handler's validation answers it.
func reachesHandler(t *testing.T, cl *client.Client) error {
	t.Helper()
	_, err := cl.GetRepository(context.Background(), &pb.GetRepositoryRequest{Name: "not-a-name"})
	if client.Reason(err) == "INVALID_RESOURCE_NAME" {
		return nil
	}
	return err
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "gravelerd test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	// The same certificate is the client CA, so it also signs the client (mTLS).
	srv := daemontest.Start(t, func(c *daemon.Config) { c.TLSCertFile, c.TLSKeyFile, c.TLSClientCAFile = cert, key, cert })
	ctx := context.Background()

	cl := dial(t, srv.Addr, client.WithTLSFiles(cert, cert, key))
	if err := reachesHandler(t, cl); err != nil {
		t.Fatalf("mTLS call: %v", err)
	}
	if r, err := healthpb.NewHealthClient(cl.Conn()).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() == healthpb.HealthCheckResponse_SERVICE_UNKNOWN {
		t.Fatalf("health over mTLS: %v %v", r, err)
	}
	// Without a client certificate, or without TLS, no connection is made.
	for name, opts := range map[string][]client.Option{
		"no client cert": {client.WithTLSFiles(cert, "", "")},
		"plain text":     nil,
		"untrusted":      {client.WithTLS(&tls.Config{MinVersion: tls.VersionTLS12})},
	} {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := client.Dial(dctx, srv.Addr, opts...)
		cancel()
		if err == nil {
			err = reachesHandler(t, c)
			c.Close()
		}
		if err == nil {
			t.Fatalf("%s: call succeeded", name)
		}
	}
}

func TestHealthReflectionAndShutdown(t *testing.T) {
	srv := daemontest.Start(t, nil)
	cl := dial(t, srv.Addr)
	ctx := context.Background()
	hc := healthpb.NewHealthClient(cl.Conn())
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "graveler.v1.GravelerService"})
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not SERVING: %v %v", r, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rc := must[reflectionpb.ServerReflection_ServerReflectionInfoClient](t)(reflectionpb.NewServerReflectionClient(cl.Conn()).ServerReflectionInfo(ctx))
	if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	lr := must[*reflectionpb.ServerReflectionResponse](t)(rc.Recv())
	var names []string
	for _, s := range lr.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !slices.Contains(names, "graveler.v1.GravelerService") || !slices.Contains(names, "grpc.health.v1.Health") {
		t.Fatalf("reflection lists %v", names)
	}
	rc.CloseSend()

	// Graceful stop: Run returns nil and the port is closed.
	if err := srv.Stop(); err != nil {
		t.Fatalf("Run returned %v", err)
	}
	if c, err := net.DialTimeout("tcp", srv.Addr, time.Second); err == nil {
		c.Close()
		t.Fatal("still listening after shutdown")
	}
}
