package server

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	pb "graveler/api/graveler/v1"
	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/feed"
	"graveler/graveler"
	"graveler/graveler/gravelertest"
)

const watchToken = "w4tch"

// watchHarness is a gRPC server with a change feed over a real embedded
// etcd, requiring a bearer token.
type watchHarness struct {
	t      *testing.T
	ctx    context.Context // carries the token
	srv    *etcdkvtest.Server
	store  *etcdkv.Store
	feed   *feed.Feed
	svc    *graveler.Graveler
	addr   string
	client pb.GravelerServiceClient
}

func startWatch(t *testing.T, cfg feed.Config) *watchHarness {
	t.Helper()
	srv := etcdkvtest.NewServer(t)
	store := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	f := feed.New(store, cfg)
	t.Cleanup(func() { f.Close() })
	svc := gravelertest.New(t, store, gravelertest.Options{})
	g := NewGRPCServer(New(svc, Config{StorageNamespaceRoot: "mem://watch", Feed: f}), GRPCOptions{Tokens: NewTokens(map[string]string{watchToken: "watcher"})})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Server.Serve(lis) }()
	t.Cleanup(g.Server.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	h := &watchHarness{t: t, ctx: metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+watchToken),
		srv: srv, store: store, feed: f, svc: svc, addr: lis.Addr().String()}
	h.client = h.dial()
	return h
}

func (h *watchHarness) dial(opts ...grpc.DialOption) pb.GravelerServiceClient {
	h.t.Helper()
	conn, err := grpc.NewClient(h.addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { conn.Close() })
	return pb.NewGravelerServiceClient(conn)
}

func (h *watchHarness) rev() int64 {
	h.t.Helper()
	resp, err := h.srv.Client.Get(h.ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.Header.Revision
}

// until receives until a message resumes at rev or later, and returns the
// messages of kind CHANGES.
func (h *watchHarness) until(s grpc.ServerStreamingClient[pb.WatchRefsResponse], rev int64) []*pb.WatchRefsResponse {
	h.t.Helper()
	var out []*pb.WatchRefsResponse
	for {
		m, err := s.Recv()
		if err != nil {
			h.t.Fatalf("recv: %v", err)
		}
		if m.GetKind() == pb.WatchRefsResponse_KIND_CHANGES {
			out = append(out, m)
		}
		if m.GetResumeRevision() >= rev {
			return out
		}
	}
}

// A stream delivers the service's changes as API messages: resource
// names, causes, the commit of a commit; an initial state comes as pages
// and their end, then the changes after it.
func TestWatchRefsStream(t *testing.T) {
	h := startWatch(t, feed.Config{PageSize: 2})
	if _, err := h.svc.CreateRepository(h.ctx, "other", "mem://other", "main"); err != nil {
		t.Fatal(err)
	}
	// From the revision read here, not "now": the server takes "now" when
	// the stream reaches it, which may be after the create below.
	s, err := h.client.WatchRefs(h.ctx, &pb.WatchRefsRequest{Repository: "repositories/wat", StartRevision: h.rev(), ProgressIntervalMs: 100})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.CreateRepository(h.ctx, "wat", "mem://wat", "main"); err != nil {
		t.Fatal(err)
	}
	k := graveler.Key("k")
	if err := h.svc.Set(h.ctx, "wat", "main", k, graveler.Value{Identity: k, Data: k}, graveler.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	id, err := h.svc.Commit(h.ctx, "wat", "main", graveler.CommitParams{Committer: "ann", Message: "hello", Metadata: graveler.Metadata{"m": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.CreateRepository(h.ctx, "not-watched", "mem://nw", "main"); err != nil {
		t.Fatal(err)
	}
	ms := h.until(s, h.rev())
	if len(ms) != 2 {
		t.Fatalf("got %d messages: %v", len(ms), ms)
	}
	created, moved := ms[0], ms[1]
	ce, me := created.GetEvents()[0], moved.GetEvents()[0]
	if len(created.GetEvents()) != 1 || ce.GetType() != pb.RefEvent_TYPE_REPOSITORY_CREATED || ce.GetRepository() != "repositories/wat" ||
		ce.GetRepositoryInfo().GetName() != "repositories/wat" || ce.GetRepositoryInfo().GetDefaultBranch() != "main" ||
		ce.GetCommitId() == "" || ce.GetRevision() != created.GetRevision() || created.GetResumeRevision() != created.GetRevision() {
		t.Fatalf("creation: %v", created)
	}
	if len(moved.GetEvents()) != 1 || me.GetType() != pb.RefEvent_TYPE_BRANCH_MOVED || me.GetBranch() != "repositories/wat/branches/main" ||
		me.GetCause() != pb.RefEvent_CAUSE_COMMIT || me.GetOldCommitId() != ce.GetCommitId() || me.GetCommitId() != string(id) ||
		me.GetCommit().GetId() != string(id) || me.GetCommit().GetName() != "repositories/wat/commits/"+string(id) ||
		me.GetCommit().GetMessage() != "hello" || me.GetCommit().GetCommitter() != "ann" || me.GetCommit().GetMetadata()["m"] != "v" ||
		len(me.GetCommit().GetParents()) != 1 || moved.GetRevision() <= created.GetRevision() {
		t.Fatalf("commit: %v", moved)
	}

	if _, err := h.svc.CreateTag(h.ctx, "wat", "v1", graveler.Ref(id)); err != nil {
		t.Fatal(err)
	}
	is, err := h.client.WatchRefs(h.ctx, &pb.WatchRefsRequest{SendInitialState: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var snap int64
	for snap == 0 {
		m, err := is.Recv()
		if err != nil {
			t.Fatal(err)
		}
		switch m.GetKind() {
		case pb.WatchRefsResponse_KIND_INITIAL:
			if m.GetResumeRevision() != 0 || len(m.GetEvents()) > 2 {
				t.Fatalf("initial page %v", m)
			}
			for _, e := range m.GetEvents() {
				got = append(got, fmt.Sprintf("%s %s%s%s %s", e.GetType(), e.GetRepository(), e.GetBranch(), e.GetTag(), e.GetCommitId()))
			}
		case pb.WatchRefsResponse_KIND_INITIAL_END:
			snap = m.GetRevision()
			if m.GetResumeRevision() != snap {
				t.Fatalf("initial end %v", m)
			}
		default:
			t.Fatalf("unexpected %v", m)
		}
	}
	want := []string{
		"TYPE_REPOSITORY_EXISTS repositories/not-watched ",
		"TYPE_BRANCH_EXISTS repositories/not-watchedrepositories/not-watched/branches/main " + string(headOf(t, h, "not-watched")),
		"TYPE_REPOSITORY_EXISTS repositories/other ",
		"TYPE_BRANCH_EXISTS repositories/otherrepositories/other/branches/main " + string(headOf(t, h, "other")),
		"TYPE_REPOSITORY_EXISTS repositories/wat ",
		"TYPE_BRANCH_EXISTS repositories/watrepositories/wat/branches/main " + string(id),
		"TYPE_TAG_EXISTS repositories/watrepositories/wat/tags/v1 " + string(id),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("initial state:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if err := h.svc.DeleteBranch(h.ctx, "wat", "main"); err == nil {
		t.Fatal("deleted the default branch")
	}
	if err := h.svc.DeleteTag(h.ctx, "wat", "v1"); err != nil {
		t.Fatal(err)
	}
	after := h.until(is, h.rev())
	if len(after) != 1 || after[0].GetRevision() <= snap || after[0].GetEvents()[0].GetType() != pb.RefEvent_TYPE_TAG_DELETED ||
		after[0].GetEvents()[0].GetOldCommitId() != string(id) {
		t.Fatalf("after the initial state: %v", after)
	}
}

func headOf(t *testing.T, h *watchHarness, repo graveler.RepositoryID) graveler.CommitID {
	t.Helper()
	b, err := h.svc.GetBranch(h.ctx, repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	return b.CommitID
}

// recvErr receives until the stream fails.
func recvErr(s grpc.ServerStreamingClient[pb.WatchRefsResponse]) ([]*pb.WatchRefsResponse, error) {
	var out []*pb.WatchRefsResponse
	for {
		m, err := s.Recv()
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
}

func TestWatchRefsErrors(t *testing.T) {
	h := startWatch(t, feed.Config{})
	ctx := h.ctx
	cases := []struct {
		name   string
		ctx    context.Context
		req    *pb.WatchRefsRequest
		code   codes.Code
		reason string
	}{
		{"no token", context.Background(), &pb.WatchRefsRequest{}, codes.Unauthenticated, "UNAUTHENTICATED"},
		{"start and initial", ctx, &pb.WatchRefsRequest{StartRevision: 2, SendInitialState: true}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"interval too short", ctx, &pb.WatchRefsRequest{ProgressIntervalMs: 99}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"interval too long", ctx, &pb.WatchRefsRequest{ProgressIntervalMs: 600_001}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"interval negative", ctx, &pb.WatchRefsRequest{ProgressIntervalMs: -1}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"bad name", ctx, &pb.WatchRefsRequest{Repository: "repos/x"}, codes.InvalidArgument, "INVALID_RESOURCE_NAME"},
		{"future", ctx, &pb.WatchRefsRequest{StartRevision: 1 << 40}, codes.OutOfRange, "REVISION_IN_FUTURE"},
	}
	for _, c := range cases {
		s, err := h.client.WatchRefs(c.ctx, c.req)
		if err == nil {
			_, err = recvErr(s)
		}
		if code, reason, _ := reasonOf(t, err); code != c.code || reason != c.reason {
			t.Errorf("%s: got %v %s (%v), want %v %s", c.name, code, reason, err, c.code, c.reason)
		}
	}
}

// A server whose store has no feed says so.
func TestWatchRefsUnsupported(t *testing.T) {
	h := start(t, &fakeService{}, GRPCOptions{})
	s, err := h.client.WatchRefs(context.Background(), &pb.WatchRefsRequest{})
	if err == nil {
		_, err = recvErr(s)
	}
	if code, reason, _ := reasonOf(t, err); code != codes.Unimplemented || reason != "WATCH_UNSUPPORTED" {
		t.Fatalf("got %v %s (%v)", code, reason, err)
	}
}

// A start revision before etcd's compaction is OUT_OF_RANGE, with the
// compaction revision to start again from.
func TestWatchRefsCompacted(t *testing.T) {
	h := startWatch(t, feed.Config{RingSize: 1})
	for _, r := range []graveler.RepositoryID{"one", "two", "three"} {
		if _, err := h.svc.CreateRepository(h.ctx, r, "mem://"+graveler.StorageNamespace(r), "main"); err != nil {
			t.Fatal(err)
		}
	}
	compact := h.rev()
	if _, err := h.srv.Client.Compact(h.ctx, compact); err != nil {
		t.Fatal(err)
	}
	s, err := h.client.WatchRefs(h.ctx, &pb.WatchRefsRequest{StartRevision: 2})
	if err == nil {
		_, err = recvErr(s)
	}
	code, reason, md := reasonOf(t, err)
	if code != codes.OutOfRange || reason != "REVISION_COMPACTED" || md["compact_revision"] != strconv.FormatInt(compact, 10) {
		t.Fatalf("got %v %s %v (%v)", code, reason, md, err)
	}
}

// Closing the feed (the server shutting down) ends every stream with
// UNAVAILABLE, which clients resume from elsewhere.
func TestWatchRefsFeedClosed(t *testing.T) {
	h := startWatch(t, feed.Config{})
	s, err := h.client.WatchRefs(h.ctx, &pb.WatchRefsRequest{ProgressIntervalMs: 100})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil { // the stream is up: a bookmark came
		t.Fatal(err)
	}
	h.feed.Close()
	_, err = recvErr(s)
	if code, reason, _ := reasonOf(t, err); code != codes.Unavailable || reason != "SERVER_SHUTTING_DOWN" {
		t.Fatalf("got %v %s (%v)", code, reason, err)
	}
}

// A client that stops reading is cut off with RESOURCE_EXHAUSTED once the
// feed drops what it did not read; resuming from the last resume_revision
// it received loses and repeats nothing.
func TestWatchRefsSlowConsumer(t *testing.T) {
	h := startWatch(t, feed.Config{RingSize: 4})
	if _, err := h.svc.CreateRepository(h.ctx, "slow", "mem://slow", "main"); err != nil {
		t.Fatal(err)
	}
	// Fixed small HTTP/2 windows: what the client does not read stays in
	// the server, whose Send then blocks.
	client := h.dial(grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	start := h.rev()
	s, err := client.WatchRefs(h.ctx, &pb.WatchRefsRequest{Repository: "repositories/slow", StartRevision: start})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 30<<10)
	var ids []string
	for i := range 30 {
		k := graveler.Key(fmt.Sprintf("k%d", i))
		if err := h.svc.Set(h.ctx, "slow", "main", k, graveler.Value{Identity: k, Data: k}, graveler.SetOptions{}); err != nil {
			t.Fatal(err)
		}
		id, err := h.svc.Commit(h.ctx, "slow", "main", graveler.CommitParams{Committer: "c", Message: big})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, string(id))
	}
	end := h.rev()
	// Another subscriber reading all along shows the feed has it all.
	probe, err := h.feed.Subscribe(h.ctx, feed.Request{StartRevision: end - 1, ProgressInterval: feed.MinProgressInterval})
	if err != nil {
		t.Fatal(err)
	}
	for m, err := probe.Next(h.ctx); m == nil || m.ResumeRevision < end; m, err = probe.Next(h.ctx) {
		if err != nil {
			t.Fatal(err)
		}
	}
	probe.Close()
	read, err := recvErr(s)
	code, reason, md := reasonOf(t, err)
	if code != codes.ResourceExhausted || reason != "WATCH_TOO_SLOW" {
		t.Fatalf("got %v %s after %d messages (%v)", code, reason, len(read), err)
	}
	// Whether any message went out before the cut depends on when the
	// stream's goroutine ran; with none, the client resumes where it
	// started.
	resume := start
	if len(read) > 0 {
		resume = read[len(read)-1].GetResumeRevision()
	}
	if r, err := strconv.ParseInt(md["resume_revision"], 10, 64); err != nil || r < resume {
		t.Fatalf("resume_revision %q, last received %d", md["resume_revision"], resume)
	}
	s, err = client.WatchRefs(h.ctx, &pb.WatchRefsRequest{Repository: "repositories/slow", StartRevision: resume, ProgressIntervalMs: 100})
	if err != nil {
		t.Fatal(err)
	}
	read = append(read, h.until(s, end)...)
	var got []string
	for _, m := range read {
		for _, e := range m.GetEvents() {
			got = append(got, e.GetCommitId())
		}
	}
	if strings.Join(got, "\n") != strings.Join(ids, "\n") {
		t.Fatalf("commits delivered:\n%v\nwant\n%v", got, ids)
	}
}
