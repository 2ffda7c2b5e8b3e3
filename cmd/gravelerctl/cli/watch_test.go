package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "graveler/api/graveler/v1"
	"graveler/cmd/gravelerctl/cli"
)

// watchFake implements only WatchRefs: call i sends calls[i]'s messages,
// then ends with its error, or (nil) waits until the client goes away.
type watchFake struct {
	pb.UnimplementedGravelerServiceServer
	calls []watchCall

	mu   sync.Mutex
	reqs []*pb.WatchRefsRequest
}

type watchCall struct {
	msgs []*pb.WatchRefsResponse
	err  error
}

func (f *watchFake) WatchRefs(req *pb.WatchRefsRequest, s grpc.ServerStreamingServer[pb.WatchRefsResponse]) error {
	f.mu.Lock()
	c := f.calls[min(len(f.reqs), len(f.calls)-1)]
	f.reqs = append(f.reqs, proto.CloneOf(req))
	f.mu.Unlock()
	for _, m := range c.msgs {
		if err := s.Send(m); err != nil {
			return err
		}
	}
	if c.err != nil {
		return c.err
	}
	<-s.Context().Done()
	return s.Context().Err()
}

func (f *watchFake) requests() []*pb.WatchRefsRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

func startWatchFake(t *testing.T, calls ...watchCall) (*watchFake, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &watchFake{calls: calls}
	g := grpc.NewServer()
	pb.RegisterGravelerServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return f, lis.Addr().String()
}

// untilWriter collects output and ends the watch (as an interrupt would)
// once until says the output is complete.
type untilWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	until  func(string) bool
	cancel context.CancelFunc
}

func (w *untilWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if w.until(w.buf.String()) {
		w.cancel()
	}
	return n, err
}

func contains(s string) func(string) bool {
	return func(out string) bool { return strings.Contains(out, s) }
}
func lines(n int) func(string) bool {
	return func(out string) bool { return strings.Count(out, "\n") >= n }
}
func never(string) bool { return false }

// watch runs gravelerctl until until(stdout) holds, or until it ends by itself.
func watch(t *testing.T, addr string, until func(string) bool, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &untilWriter{until: until, cancel: cancel}
	var errOut bytes.Buffer
	code := cli.Main(ctx, append([]string{"--server", addr}, args...), cli.Streams{In: strings.NewReader(""), Out: out, Err: &errOut})
	return code, out.buf.String(), errOut.String()
}

const (
	kChanges    = pb.WatchRefsResponse_KIND_CHANGES
	kInitial    = pb.WatchRefsResponse_KIND_INITIAL
	kInitialEnd = pb.WatchRefsResponse_KIND_INITIAL_END
	kBookmark   = pb.WatchRefsResponse_KIND_BOOKMARK
)

func msg(kind pb.WatchRefsResponse_Kind, rev, resume int64, evs ...*pb.RefEvent) *pb.WatchRefsResponse {
	return &pb.WatchRefsResponse{Kind: kind, Revision: rev, ResumeRevision: resume, Events: evs}
}

func ev(typ pb.RefEvent_Type, rev int64, repo, branch, tag, oldID, newID string) *pb.RefEvent {
	e := &pb.RefEvent{Type: typ, Revision: rev, Repository: "repositories/" + repo, OldCommitId: oldID, CommitId: newID}
	if branch != "" {
		e.Branch = e.Repository + "/branches/" + branch
	}
	if tag != "" {
		e.Tag = e.Repository + "/tags/" + tag
	}
	return e
}

// feed is one of every kind of change, at revisions 11 to 15.
func feed() []*pb.WatchRefsResponse {
	created := ev(pb.RefEvent_TYPE_REPOSITORY_CREATED, 11, "sales", "", "", "", "c0c0c0c0c0c0c0c0")
	created.RepositoryInfo = &pb.Repository{Name: "repositories/sales", DefaultBranch: "main"}
	moved := ev(pb.RefEvent_TYPE_BRANCH_MOVED, 12, "sales", "main", "", "c0c0c0c0c0c0c0c0", "e4f5a6b7c8d9e0f1")
	moved.Cause = pb.RefEvent_CAUSE_COMMIT
	moved.Commit = &pb.Commit{Message: "load day 1\n\nlong body", Committer: "alice"}
	evil := ev(pb.RefEvent_TYPE_BRANCH_CREATED, 12, "sales", "x\x1b[2Jy\nrev=99", "", "", "e4f5a6b7c8d9e0f1")
	reset := ev(pb.RefEvent_TYPE_BRANCH_MOVED, 14, "sales", "main", "", "e4f5a6b7c8d9e0f1", "e4f5a6b7c8d9e0f1")
	reset.Cause = pb.RefEvent_CAUSE_RESET
	return []*pb.WatchRefsResponse{
		msg(kChanges, 11, 11, created),
		msg(kChanges, 12, 12, moved, evil),
		msg(kBookmark, 13, 13),
		msg(kChanges, 14, 14, reset, ev(pb.RefEvent_TYPE_TAG_CREATED, 14, "sales", "", "v1", "", "e4f5a6b7c8d9e0f1")),
		msg(kChanges, 15, 15, ev(pb.RefEvent_TYPE_BRANCH_DELETED, 15, "sales", "dev", "", "aaaabbbbccccdddd", ""),
			ev(pb.RefEvent_TYPE_REPOSITORY_DELETED, 15, "sales", "", "", "", "")),
	}
}

func TestWatchHumanOutput(t *testing.T) {
	f, addr := startWatchFake(t, watchCall{msgs: feed()})
	code, out, errOut := watch(t, addr, contains("repository sales deleted\n"), "watch", "sales")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := []string{
		"rev=11 repository sales created (default branch main at c0c0c0c0c0c0)",
		`rev=12 branch main moved c0c0c0c0c0c0..e4f5a6b7c8d9 commit "load day 1" by alice`,
		`rev=12 branch "x\x1b[2Jy\nrev=99" created at e4f5a6b7c8d9`,
		"rev=14 branch main staged changes discarded (at e4f5a6b7c8d9)",
		"rev=14 tag v1 created at e4f5a6b7c8d9",
		"rev=15 branch dev deleted (was aaaabbbbcccc)",
		"rev=15 repository sales deleted",
	}
	if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); !slices.Equal(got, want) {
		t.Fatalf("output:\n%s\nwant:\n%s", out, strings.Join(want, "\n"))
	}
	if r := f.requests()[0]; r.GetRepository() != "repositories/sales" || r.GetStartRevision() != 0 || r.GetSendInitialState() {
		t.Fatalf("request %v", r)
	}
}

func TestWatchJSONLines(t *testing.T) {
	f, addr := startWatchFake(t, watchCall{msgs: feed()})
	code, out, errOut := watch(t, addr, lines(8), "-o", "json", "watch", "--progress-interval", "2s")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// kind revision resume type: one line per event, the resume revision
	// on the line that completes a message.
	var got []string
	for l := range strings.SplitSeq(strings.TrimSuffix(out, "\n"), "\n") {
		var m pb.WatchRefsResponse
		if err := protojson.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		s := fmt.Sprintf("%s %d %d", m.GetKind(), m.GetRevision(), m.GetResumeRevision())
		for _, e := range m.GetEvents() {
			s += " " + e.GetType().String()
		}
		got = append(got, s)
	}
	want := []string{
		"KIND_CHANGES 11 11 TYPE_REPOSITORY_CREATED",
		"KIND_CHANGES 12 0 TYPE_BRANCH_MOVED",
		"KIND_CHANGES 12 12 TYPE_BRANCH_CREATED",
		"KIND_BOOKMARK 13 13",
		"KIND_CHANGES 14 0 TYPE_BRANCH_MOVED",
		"KIND_CHANGES 14 14 TYPE_TAG_CREATED",
		"KIND_CHANGES 15 0 TYPE_BRANCH_DELETED",
		"KIND_CHANGES 15 15 TYPE_REPOSITORY_DELETED",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r := f.requests()[0]; r.GetRepository() != "" || r.GetProgressIntervalMs() != 2000 {
		t.Fatalf("request %v", r)
	}
}

func TestWatchSinceResumes(t *testing.T) {
	f, addr := startWatchFake(t,
		watchCall{msgs: feed()[1:3], err: status.Error(codes.Unavailable, "server shutting down")},
		watchCall{msgs: feed()[3:4]},
	)
	code, out, errOut := watch(t, addr, contains("tag v1 created"), "watch", "sales", "--since", "11")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// The bookmark (13) is not shown, but it is where the stream resumes.
	var starts []int64
	for _, r := range f.requests() {
		starts = append(starts, r.GetStartRevision())
	}
	if !slices.Equal(starts, []int64{11, 13}) {
		t.Fatalf("start revisions %v", starts)
	}
	if strings.Count(out, "\n") != 4 || strings.Contains(out, "rev=13") || !strings.Contains(errOut, "resuming in") {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", out, errOut)
	}
}

func TestWatchInitialStateShownOnce(t *testing.T) {
	exists := func(branch string) *pb.WatchRefsResponse {
		return msg(kInitial, 50, 0, ev(pb.RefEvent_TYPE_BRANCH_EXISTS, 50, "sales", branch, "", "", "c0c0c0c0c0c0c0c0"))
	}
	repo := msg(kInitial, 50, 0, ev(pb.RefEvent_TYPE_REPOSITORY_EXISTS, 50, "sales", "", "", "", ""))
	change := msg(kChanges, 51, 51, ev(pb.RefEvent_TYPE_TAG_CREATED, 51, "sales", "", "v1", "", "c0c0c0c0c0c0c0c0"))
	f, addr := startWatchFake(t,
		// The stream breaks in the middle of the initial state: it is sent again.
		watchCall{msgs: []*pb.WatchRefsResponse{repo, exists("main")}, err: status.Error(codes.Unavailable, "server shutting down")},
		watchCall{msgs: []*pb.WatchRefsResponse{repo, exists("main"), exists("dev"), msg(kInitialEnd, 50, 50), change}},
	)
	code, out, errOut := watch(t, addr, contains("v1"), "watch", "--initial")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := "rev=50 repository sales exists\n" +
		"rev=50 sales: branch main at c0c0c0c0c0c0\n" +
		"rev=50 sales: branch dev at c0c0c0c0c0c0\n" +
		"-- initial state ends at rev=50\n" +
		"rev=51 sales: tag v1 created at c0c0c0c0c0c0\n"
	if out != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out, want)
	}
	for _, r := range f.requests() {
		if !r.GetSendInitialState() || r.GetStartRevision() != 0 || r.GetRepository() != "" {
			t.Fatalf("request %v", r)
		}
	}
}

func TestWatchCompactedAndUsage(t *testing.T) {
	st, err := status.New(codes.OutOfRange, "revision 5 is compacted").WithDetails(&errdetails.ErrorInfo{
		Reason: "REVISION_COMPACTED", Domain: "graveler.v1", Metadata: map[string]string{"compact_revision": "9"},
	})
	if err != nil {
		t.Fatal(err)
	}
	f, addr := startWatchFake(t, watchCall{err: st.Err()})
	code, out, errOut := watch(t, addr, never, "watch", "sales", "--since", "5")
	if code != cli.ExitInvalidArgument || out != "" ||
		!strings.Contains(errOut, "revision 5 was compacted (compact revision 9); run again with --initial") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if n := len(f.requests()); n != 1 {
		t.Fatalf("%d requests: a compacted revision must not be retried", n)
	}
	for _, args := range [][]string{
		{"watch", "sales", "--since", "5", "--initial"},
		{"watch", "sales", "--since", "-1"},
		{"watch", "sales", "other"},
		{"watch", "--progress-interval", "soon"},
	} {
		if code, _, errOut := watch(t, addr, never, args...); code != cli.ExitUsage {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
	}
	if n := len(f.requests()); n != 1 {
		t.Fatalf("usage errors reached the server: %d requests", n)
	}
}
