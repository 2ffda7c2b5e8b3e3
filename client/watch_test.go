package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "graveler/api/graveler/v1"
	"graveler/client"
)

// step scripts one WatchRefs call of the fake: after sending `after`
// messages it ends with err, or, when kill is set, waits for kill to close
// and then drops every connection. A negative after serves until the
// caller goes away.
type step struct {
	after int
	err   error
	kill  chan struct{}
}

// fakeFeed is a GravelerService that implements only WatchRefs, over a
// scripted history: INITIAL pages at revision snapshot, then one message
// per revision after it (CHANGES or BOOKMARK). It honours start_revision
// like the contract says, and answers REVISION_COMPACTED below compact.
type fakeFeed struct {
	pb.UnimplementedGravelerServiceServer
	snapshot int64
	pages    [][]*pb.RefEvent
	history  []*pb.WatchRefsResponse
	steps    []step // one per call; the last one repeats
	compact  atomic.Int64
	lis      *trackingListener

	mu   sync.Mutex
	reqs []*pb.WatchRefsRequest
}

func (f *fakeFeed) WatchRefs(req *pb.WatchRefsRequest, s grpc.ServerStreamingServer[pb.WatchRefsResponse]) error {
	f.mu.Lock()
	call := len(f.reqs)
	f.reqs = append(f.reqs, proto.CloneOf(req))
	st := f.steps[min(call, len(f.steps)-1)]
	f.mu.Unlock()

	var msgs []*pb.WatchRefsResponse
	start := req.GetStartRevision()
	switch {
	case req.GetSendInitialState():
		for _, p := range f.pages {
			msgs = append(msgs, &pb.WatchRefsResponse{Kind: pb.WatchRefsResponse_KIND_INITIAL, Revision: f.snapshot, Events: p})
		}
		msgs = append(msgs, &pb.WatchRefsResponse{Kind: pb.WatchRefsResponse_KIND_INITIAL_END, Revision: f.snapshot, ResumeRevision: f.snapshot})
		start = f.snapshot
	case start == 0:
		start = f.snapshot
	case start < f.compact.Load():
		return compactedStatus(start, f.compact.Load())
	}
	for _, m := range f.history {
		if m.GetRevision() > start {
			msgs = append(msgs, m)
		}
	}
	for i := 0; ; i++ {
		if i == st.after {
			if st.kill != nil {
				<-st.kill
				f.lis.dropAll()
				<-s.Context().Done()
				return s.Context().Err()
			}
			return st.err
		}
		if i >= len(msgs) {
			<-s.Context().Done()
			return s.Context().Err()
		}
		if err := s.Send(msgs[i]); err != nil {
			return err
		}
	}
}

func (f *fakeFeed) starts() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, r := range f.reqs {
		if r.GetSendInitialState() {
			out = append(out, "initial")
		} else {
			out = append(out, strconv.FormatInt(r.GetStartRevision(), 10))
		}
	}
	return out
}

func statusErr(t *testing.T, c codes.Code, msg, reason string, meta map[string]string) error {
	t.Helper()
	st, err := status.New(c, msg).WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "graveler.v1", Metadata: meta})
	if err != nil {
		t.Fatal(err)
	}
	return st.Err()
}

func compactedStatus(rev, compact int64) error {
	st, _ := status.New(codes.OutOfRange, fmt.Sprintf("revision %d is compacted", rev)).WithDetails(&errdetails.ErrorInfo{
		Reason: "REVISION_COMPACTED", Domain: "graveler.v1",
		Metadata: map[string]string{"compact_revision": strconv.FormatInt(compact, 10)},
	})
	return st.Err()
}

// trackingListener remembers its connections so a test can break them.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *trackingListener) dropAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
}

// changes returns one CHANGES message per revision from..to, with a
// BOOKMARK instead at the revisions in bookmarks.
func changes(from, to int64, bookmarks ...int64) []*pb.WatchRefsResponse {
	var out []*pb.WatchRefsResponse
	for r := from; r <= to; r++ {
		if slices.Contains(bookmarks, r) {
			out = append(out, &pb.WatchRefsResponse{Kind: pb.WatchRefsResponse_KIND_BOOKMARK, Revision: r, ResumeRevision: r})
			continue
		}
		out = append(out, &pb.WatchRefsResponse{Kind: pb.WatchRefsResponse_KIND_CHANGES, Revision: r, ResumeRevision: r, Events: []*pb.RefEvent{{
			Type: pb.RefEvent_TYPE_BRANCH_MOVED, Revision: r, Repository: "repositories/sales", Branch: "repositories/sales/branches/main",
			OldCommitId: fmt.Sprintf("c%d", r-1), CommitId: fmt.Sprintf("c%d", r),
		}}})
	}
	return out
}

func startFeed(t *testing.T, f *fakeFeed, opts ...client.Option) *client.Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.lis = &trackingListener{Listener: lis}
	g := grpc.NewServer()
	pb.RegisterGravelerServiceServer(g, f)
	go func() { _ = g.Serve(f.lis) }()
	t.Cleanup(g.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, lis.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

var errStop = errors.New("stop")

// seen describes the messages a handler got, one word each:
// "i<rev>" INITIAL (with "!" when InitialRestart), "end<rev>", "c<rev>", "b<rev>".
func describe(m *client.WatchMessage) string {
	s := ""
	switch m.GetKind() {
	case pb.WatchRefsResponse_KIND_INITIAL:
		s = "i" + m.GetEvents()[0].GetBranch()
	case pb.WatchRefsResponse_KIND_INITIAL_END:
		s = fmt.Sprintf("end%d", m.GetRevision())
	case pb.WatchRefsResponse_KIND_CHANGES:
		s = fmt.Sprintf("c%d", m.GetRevision())
	case pb.WatchRefsResponse_KIND_BOOKMARK:
		s = fmt.Sprintf("b%d", m.GetRevision())
	}
	if m.InitialRestart {
		s += "!"
	}
	return s
}

// watchUntil runs Watch until a message of revision last arrives.
func watchUntil(ctx context.Context, cl *client.Client, opts client.WatchOptions, last int64) ([]string, error) {
	var got []string
	err := cl.Watch(ctx, opts, func(m *client.WatchMessage) error {
		got = append(got, describe(m))
		if m.GetKind() != pb.WatchRefsResponse_KIND_INITIAL && m.GetRevision() == last {
			return errStop
		}
		return nil
	})
	return got, err
}

func TestWatchResumesFromLastToken(t *testing.T) {
	f := &fakeFeed{snapshot: 10, history: changes(11, 20, 14, 15), steps: []step{
		{after: 3, err: status.Error(codes.Unavailable, "server shutting down")},
		{after: 2, err: statusErr(t, codes.ResourceExhausted, "watcher too slow", "WATCH_TOO_SLOW", nil)},
		{after: 0, err: status.Error(codes.Unavailable, "no leader")},
		{after: -1},
	}}
	cl := startFeed(t, f)
	var retried []codes.Code
	got, err := watchUntil(context.Background(), cl, client.WatchOptions{
		Repository: "sales", StartRevision: 10, ProgressInterval: 250 * time.Millisecond, MinBackoff: time.Millisecond,
		OnRetry: func(err error, _ time.Duration) { retried = append(retried, status.Code(err)) },
	}, 20)
	if !errors.Is(err, errStop) {
		t.Fatalf("Watch: %v", err)
	}
	want := []string{"c11", "c12", "c13", "b14", "b15", "c16", "c17", "c18", "c19", "c20"}
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	// Each stream resumes at the last resume_revision delivered, bookmarks included.
	if s := f.starts(); !slices.Equal(s, []string{"10", "13", "15", "15"}) {
		t.Fatalf("start revisions %v", s)
	}
	if !slices.Equal(retried, []codes.Code{codes.Unavailable, codes.ResourceExhausted, codes.Unavailable}) {
		t.Fatalf("retried %v", retried)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.reqs {
		if r.GetRepository() != "repositories/sales" || r.GetProgressIntervalMs() != 250 || r.GetSendInitialState() {
			t.Fatalf("request %v", r)
		}
	}
}

func TestWatchResumesAfterBrokenConnection(t *testing.T) {
	kill := make(chan struct{})
	f := &fakeFeed{snapshot: 10, history: changes(11, 15), steps: []step{{after: 2, kill: kill}, {after: -1}}}
	cl := startFeed(t, f)
	var got []string
	var retryErr error
	err := cl.Watch(context.Background(), client.WatchOptions{
		MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
		OnRetry: func(err error, _ time.Duration) {
			if retryErr == nil {
				retryErr = err
			}
		},
	}, func(m *client.WatchMessage) error {
		got = append(got, describe(m))
		switch m.GetRevision() {
		case 12:
			close(kill)
		case 15:
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) {
		t.Fatalf("Watch: %v", err)
	}
	if !slices.Equal(got, []string{"c11", "c12", "c13", "c14", "c15"}) {
		t.Fatalf("delivered %v", got)
	}
	// The first stream started now (0); the others after c12, whatever
	// number of attempts the reconnection took.
	s := f.starts()
	if s[0] != "0" || len(s) < 2 || slices.ContainsFunc(s[1:], func(v string) bool { return v != "12" }) {
		t.Fatalf("start revisions %v", s)
	}
	if !errors.Is(retryErr, client.ErrUnavailable) {
		t.Fatalf("retried after %v", retryErr)
	}
}

func TestWatchInitialStateRestart(t *testing.T) {
	page := func(b string) []*pb.RefEvent {
		return []*pb.RefEvent{{Type: pb.RefEvent_TYPE_BRANCH_EXISTS, Revision: 10, Repository: "repositories/r", Branch: b, CommitId: "c"}}
	}
	unavailable := status.Error(codes.Unavailable, "server shutting down")
	f := &fakeFeed{snapshot: 10, pages: [][]*pb.RefEvent{page("a"), page("b"), page("c")}, history: changes(11, 13), steps: []step{
		{after: 0, err: unavailable}, // before any page: nothing to discard
		{after: 2, err: unavailable}, // two pages delivered, then a break
		{after: 5, err: unavailable}, // the whole state, INITIAL_END and c11
		{after: -1},
	}}
	cl := startFeed(t, f)
	got, err := watchUntil(context.Background(), cl, client.WatchOptions{InitialState: true, MinBackoff: time.Millisecond}, 13)
	if !errors.Is(err, errStop) {
		t.Fatalf("Watch: %v", err)
	}
	want := []string{"ia", "ib", "ia!", "ib", "ic", "end10", "c11", "c12", "c13"}
	if !slices.Equal(got, want) {
		t.Fatalf("delivered %v, want %v", got, want)
	}
	// After INITIAL_END the watch resumes from its token, not with a new state.
	if s := f.starts(); !slices.Equal(s, []string{"initial", "initial", "initial", "11"}) {
		t.Fatalf("start revisions %v", s)
	}
}

func TestWatchRevisionCompacted(t *testing.T) {
	t.Run("asked for", func(t *testing.T) {
		f := &fakeFeed{snapshot: 10, history: changes(11, 12), steps: []step{{after: -1}}}
		f.compact.Store(8)
		cl := startFeed(t, f)
		err := cl.Watch(context.Background(), client.WatchOptions{StartRevision: 5, MinBackoff: time.Millisecond},
			func(*client.WatchMessage) error { return nil })
		ce, ok := errors.AsType[*client.RevisionCompactedError](err)
		if !errors.Is(err, client.ErrRevisionCompacted) || !ok || ce.Revision != 5 || ce.CompactRevision != 8 {
			t.Fatalf("Watch: %v (%+v)", err, ce)
		}
		if !errors.Is(err, client.ErrInvalidArgument) || client.Reason(err) != "REVISION_COMPACTED" {
			t.Fatalf("class and reason of %v", err)
		}
		if s := f.starts(); !slices.Equal(s, []string{"5"}) {
			t.Fatalf("retried a compacted revision: %v", s)
		}
	})
	t.Run("reached while resuming", func(t *testing.T) {
		f := &fakeFeed{snapshot: 10, history: changes(11, 20), steps: []step{
			{after: 2, err: status.Error(codes.Unavailable, "server shutting down")}, {after: -1},
		}}
		cl := startFeed(t, f)
		var got []string
		err := cl.Watch(context.Background(), client.WatchOptions{StartRevision: 10, MinBackoff: time.Millisecond}, func(m *client.WatchMessage) error {
			got = append(got, describe(m))
			if m.GetRevision() == 12 {
				f.compact.Store(15) // compacted while the stream is down
			}
			return nil
		})
		ce, ok := errors.AsType[*client.RevisionCompactedError](err)
		if !ok || ce.Revision != 12 || ce.CompactRevision != 15 || !strings.Contains(err.Error(), "revision 12 was compacted") {
			t.Fatalf("Watch: %v", err)
		}
		if !slices.Equal(got, []string{"c11", "c12"}) || !slices.Equal(f.starts(), []string{"10", "12"}) {
			t.Fatalf("delivered %v, starts %v", got, f.starts())
		}
	})
}

func TestWatchBackoffBoundedAndReset(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "down")
	f := &fakeFeed{snapshot: 10, history: changes(11, 12), steps: []step{
		{after: 0, err: unavailable}, {after: 0, err: unavailable}, {after: 0, err: unavailable},
		{after: 0, err: unavailable}, {after: 0, err: unavailable},
		{after: 1, err: unavailable}, // a message arrives: the backoff starts over
		{after: 0, err: unavailable},
		{after: -1},
	}}
	cl := startFeed(t, f)
	var waits []time.Duration
	_, err := watchUntil(context.Background(), cl, client.WatchOptions{
		StartRevision: 10, MinBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond,
		OnRetry: func(_ error, d time.Duration) { waits = append(waits, d) },
	}, 12)
	if !errors.Is(err, errStop) {
		t.Fatalf("Watch: %v", err)
	}
	ms := time.Millisecond
	bases := []time.Duration{ms, 2 * ms, 4 * ms, 4 * ms, 4 * ms, ms, 2 * ms}
	if len(waits) != len(bases) {
		t.Fatalf("waits %v", waits)
	}
	for i, b := range bases {
		if waits[i] < b/2 || waits[i] > b {
			t.Fatalf("wait %d is %v, want within [%v, %v] (all: %v)", i, waits[i], b/2, b, waits)
		}
	}
}

func TestWatchCancel(t *testing.T) {
	t.Run("while streaming", func(t *testing.T) {
		f := &fakeFeed{snapshot: 10, history: changes(11, 12), steps: []step{{after: -1}}}
		cl := startFeed(t, f)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		n := 0
		err := cl.Watch(ctx, client.WatchOptions{}, func(m *client.WatchMessage) error {
			if n++; n == 2 {
				cancel() // the stream then waits for changes that never come
			}
			return nil
		})
		if !errors.Is(err, context.Canceled) || n != 2 {
			t.Fatalf("Watch: %v after %d messages", err, n)
		}
	})
	t.Run("while waiting to retry", func(t *testing.T) {
		f := &fakeFeed{snapshot: 10, steps: []step{{after: 0, err: status.Error(codes.Unavailable, "down")}}}
		cl := startFeed(t, f)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		err := cl.Watch(ctx, client.WatchOptions{MinBackoff: time.Hour, OnRetry: func(error, time.Duration) { cancel() }},
			func(*client.WatchMessage) error { return nil })
		if !errors.Is(err, context.Canceled) || len(f.starts()) != 1 {
			t.Fatalf("Watch: %v after %d calls", err, len(f.starts()))
		}
	})
}

func TestWatchErrorsNotRetried(t *testing.T) {
	cases := []struct {
		name  string
		err   error
		match error
		opts  []client.Option
		large bool
	}{
		{name: "not found", err: status.Error(codes.NotFound, "repository sales not found"), match: client.ErrNotFound},
		{name: "internal", err: status.Error(codes.Internal, "bug"), match: client.ErrInternal},
		// The client's own message size limit is not a slow consumer.
		{name: "message too large", match: client.ErrResourceExhausted, opts: []client.Option{client.WithMaxRecvMsgSize(256)}, large: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeFeed{snapshot: 10, history: changes(11, 12), steps: []step{{after: 0, err: tc.err}}}
			if tc.large {
				f.history[0].Events[0].Commit = &pb.Commit{Message: strings.Repeat("m", 1024)}
				f.steps = []step{{after: -1}}
			}
			cl := startFeed(t, f, tc.opts...)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err := cl.Watch(ctx, client.WatchOptions{StartRevision: 10, MinBackoff: time.Millisecond, OnRetry: func(error, time.Duration) { cancel() }},
				func(*client.WatchMessage) error { return nil })
			if !errors.Is(err, tc.match) || len(f.starts()) != 1 {
				t.Fatalf("Watch: %v after %d calls", err, len(f.starts()))
			}
		})
	}
	t.Run("handler error", func(t *testing.T) {
		f := &fakeFeed{snapshot: 10, history: changes(11, 12), steps: []step{{after: -1}}}
		cl := startFeed(t, f)
		mine := errors.New("consumer full")
		err := cl.Watch(context.Background(), client.WatchOptions{}, func(*client.WatchMessage) error { return mine })
		if err != mine {
			t.Fatalf("Watch: %v", err)
		}
	})
	t.Run("initial state with a start revision", func(t *testing.T) {
		f := &fakeFeed{steps: []step{{after: -1}}}
		cl := startFeed(t, f)
		err := cl.Watch(context.Background(), client.WatchOptions{InitialState: true, StartRevision: 3}, func(*client.WatchMessage) error { return nil })
		if !errors.Is(err, client.ErrInvalidArgument) || len(f.starts()) != 0 {
			t.Fatalf("Watch: %v after %d calls", err, len(f.starts()))
		}
	})
}
