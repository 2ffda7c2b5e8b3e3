package server

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	pb "graveler/api/graveler/v1"
	"graveler/graveler"
)

// fakeService serves a fixed list of repositories and fails the rest in
// configurable ways. Methods it does not override panic (nil interface),
// which the server must turn into INTERNAL.
type fakeService struct {
	Service
	repos     []graveler.RepositoryID
	branchErr error
	block     chan struct{}
}

func (f *fakeService) ListRepositories(ctx context.Context, opts graveler.ListOptions) iter.Seq2[*graveler.RepositoryRecord, error] {
	return func(yield func(*graveler.RepositoryRecord, error) bool) {
		for _, r := range f.repos {
			if string(r) <= opts.After {
				continue
			}
			if !yield(&graveler.RepositoryRecord{RepositoryID: r, Repository: &graveler.Repository{DefaultBranchID: "main"}}, nil) {
				return
			}
		}
	}
}

func (f *fakeService) GetBranch(ctx context.Context, repo graveler.RepositoryID, b graveler.BranchID) (*graveler.BranchRecord, error) {
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return nil, fmt.Errorf("fake: %w", ctx.Err())
		}
	}
	if f.branchErr != nil {
		return nil, fmt.Errorf("fake get branch %s: %w", b, f.branchErr)
	}
	return &graveler.BranchRecord{BranchID: b, Branch: &graveler.Branch{CommitID: "c1"}}, nil
}

type harness struct {
	conn   *grpc.ClientConn
	client pb.GravelerServiceClient
	g      *GRPC
}

func start(t *testing.T, svc Service, o GRPCOptions) *harness {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := NewGRPCServer(New(svc, Config{StorageNamespaceRoot: "mem://x"}), o)
	go func() { _ = g.Server.Serve(lis) }()
	t.Cleanup(g.Server.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &harness{conn: conn, client: pb.NewGravelerServiceClient(conn), g: g}
}

func reasonOf(t *testing.T, err error) (codes.Code, string, map[string]string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("not a status: %v", err)
	}
	ei := errorInfo(t, st)
	return st.Code(), ei.GetReason(), ei.GetMetadata()
}

func TestWireErrorMapping(t *testing.T) {
	f := &fakeService{branchErr: graveler.ErrBranchNotFound}
	h := start(t, f, GRPCOptions{})
	ctx := context.Background()
	var hdr metadata.MD
	_, err := h.client.GetBranch(ctx, &pb.GetBranchRequest{Name: "repositories/repo1/branches/dev"}, grpc.Header(&hdr))
	c, reason, md := reasonOf(t, err)
	if c != codes.NotFound || reason != "BRANCH_NOT_FOUND" || md["branch"] != "repositories/repo1/branches/dev" {
		t.Fatalf("got %v %s %v", c, reason, md)
	}
	if rid := hdr.Get(RequestIDHeader); len(rid) != 1 || rid[0] != md["requestId"] {
		t.Fatalf("request id header %v, metadata %v", rid, md)
	}

	f.branchErr = graveler.ErrTooManyRetries
	_, err = h.client.GetBranch(ctx, &pb.GetBranchRequest{Name: "repositories/repo1/branches/dev"})
	if c, reason, _ := reasonOf(t, err); c != codes.Aborted || reason != "TOO_MANY_RETRIES" {
		t.Fatalf("got %v %s", c, reason)
	}

	_, err = h.client.GetBranch(ctx, &pb.GetBranchRequest{Name: "repositories/repo1/tags/dev"})
	if c, reason, _ := reasonOf(t, err); c != codes.InvalidArgument || reason != "INVALID_RESOURCE_NAME" {
		t.Fatalf("got %v %s", c, reason)
	}

	// A panicking handler (the fake does not implement GetTag) is INTERNAL
	// with nothing of the panic in the message.
	before := counterValue(t, "GetTag", "Internal")
	_, err = h.client.GetTag(ctx, &pb.GetTagRequest{Name: "repositories/repo1/tags/v1"})
	if c, reason, _ := reasonOf(t, err); c != codes.Internal || reason != "INTERNAL" {
		t.Fatalf("got %v %s", c, reason)
	}
	if st, _ := status.FromError(err); len(st.Message()) > 60 {
		t.Fatalf("internal message leaks: %q", st.Message())
	}
	if got := counterValue(t, "GetTag", "Internal"); got != before+1 {
		t.Fatalf("requests_total{GetTag,Internal} = %v, want %v", got, before+1)
	}
}

func TestWireDeadlinePassedThrough(t *testing.T) {
	f := &fakeService{block: make(chan struct{})}
	h := start(t, f, GRPCOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := h.client.GetBranch(ctx, &pb.GetBranchRequest{Name: "repositories/repo1/branches/dev"})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v", err)
	}
}

func TestWirePaging(t *testing.T) {
	f := &fakeService{}
	for i := range 25 {
		f.repos = append(f.repos, graveler.RepositoryID(fmt.Sprintf("repo-%03d", i)))
	}
	h := start(t, f, GRPCOptions{})
	ctx := context.Background()
	var got []string
	token := ""
	pages := 0
	for {
		resp, err := h.client.ListRepositories(ctx, &pb.ListRepositoriesRequest{PageSize: 10, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range resp.GetRepositories() {
			got = append(got, r.GetName())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if pages != 3 || len(got) != 25 || got[0] != "repositories/repo-000" || got[24] != "repositories/repo-024" {
		t.Fatalf("pages %d, got %v", pages, got)
	}

	_, err := h.client.ListRepositories(ctx, &pb.ListRepositoriesRequest{PageSize: -1})
	if c, reason, _ := reasonOf(t, err); c != codes.InvalidArgument || reason != "INVALID_PAGE_SIZE" {
		t.Fatalf("negative page size: %v %s", c, reason)
	}
	resp, err := h.client.ListRepositories(ctx, &pb.ListRepositoriesRequest{PageSize: 5})
	if err != nil {
		t.Fatal(err)
	}
	tok := []byte(resp.GetNextPageToken())
	tok[len(tok)/2] ^= 1
	_, err = h.client.ListRepositories(ctx, &pb.ListRepositoriesRequest{PageSize: 5, PageToken: string(tok)})
	if c, reason, _ := reasonOf(t, err); c != codes.InvalidArgument || reason != "INVALID_PAGE_TOKEN" {
		t.Fatalf("tampered token: %v %s", c, reason)
	}
	_, err = h.client.ListRepositories(ctx, &pb.ListRepositoriesRequest{PageSize: 5, PageToken: "!!not base64"})
	if c, reason, _ := reasonOf(t, err); c != codes.InvalidArgument || reason != "INVALID_PAGE_TOKEN" {
		t.Fatalf("garbage token: %v %s", c, reason)
	}
	// A token from another method is bound to other parameters.
	_, err = h.client.ListBranches(ctx, &pb.ListBranchesRequest{Parent: "repositories/repo-001", PageToken: resp.GetNextPageToken()})
	if c, reason, _ := reasonOf(t, err); c != codes.InvalidArgument || reason != "INVALID_PAGE_TOKEN" {
		t.Fatalf("token of another method: %v %s", c, reason)
	}
}

func TestPageTokenBoundToParameters(t *testing.T) {
	p := pager{key: defaultPageTokenKey}
	req := &pb.ListEntriesRequest{Repository: "repositories/r", Ref: "main", Prefix: []byte("a/"), PageSize: 3}
	tok := p.encode("ListEntries", req, []byte("a/5"))
	same := &pb.ListEntriesRequest{Repository: "repositories/r", Ref: "main", Prefix: []byte("a/"), PageSize: 50, PageToken: tok}
	cur, err := p.decode("ListEntries", same, tok)
	if err != nil || string(cur) != "a/5" {
		t.Fatalf("decode with another page size: %q %v", cur, err)
	}
	other := &pb.ListEntriesRequest{Repository: "repositories/r", Ref: "dev", Prefix: []byte("a/")}
	if _, err := p.decode("ListEntries", other, tok); !errors.Is(err, graveler.ErrInvalidPageToken) {
		t.Fatalf("token accepted with another ref: %v", err)
	}
	if _, err := (pager{key: []byte("other")}).decode("ListEntries", same, tok); !errors.Is(err, graveler.ErrInvalidPageToken) {
		t.Fatalf("token accepted under another key: %v", err)
	}
}

func TestWireAuth(t *testing.T) {
	f := &fakeService{}
	h := start(t, f, GRPCOptions{Tokens: NewTokens(map[string]string{"s3cret": "alice"})})
	ctx := context.Background()
	_, err := h.client.ListRepositories(ctx, &pb.ListRepositoriesRequest{})
	if c, reason, _ := reasonOf(t, err); c != codes.Unauthenticated || reason != "UNAUTHENTICATED" {
		t.Fatalf("no token: %v %s", c, reason)
	}
	bad := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer wrong")
	if _, err := h.client.ListRepositories(bad, &pb.ListRepositoriesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("bad token: %v", err)
	}
	good := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret")
	if _, err := h.client.ListRepositories(good, &pb.ListRepositoriesRequest{}); err != nil {
		t.Fatalf("good token: %v", err)
	}
	// Health is exempt so that load balancers and kubelets need no token.
	if _, err := healthpb.NewHealthClient(h.conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health without token: %v", err)
	}
}

func TestHealthFollowsProbe(t *testing.T) {
	h := start(t, &fakeService{}, GRPCOptions{})
	hc := healthpb.NewHealthClient(h.conn)
	statusOf := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: pb.GravelerService_ServiceDesc.ServiceName})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	if s := statusOf(); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("before the first probe: %v", s)
	}
	probeErr := make(chan error, 1)
	probeErr <- nil
	var last error
	probe := func(context.Context) error {
		select {
		case last = <-probeErr:
		default:
		}
		return last
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.g.RunHealth(ctx, probe, 10*time.Millisecond, time.Second, nil); close(done) }()
	defer func() { cancel(); <-done }()
	waitFor(t, func() bool { return statusOf() == healthpb.HealthCheckResponse_SERVING })
	probeErr <- errors.New("etcd down")
	waitFor(t, func() bool { return statusOf() == healthpb.HealthCheckResponse_NOT_SERVING })
	probeErr <- nil
	waitFor(t, func() bool { return statusOf() == healthpb.HealthCheckResponse_SERVING })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestReflectionListsService(t *testing.T) {
	h := start(t, &fakeService{}, GRPCOptions{})
	stream, err := reflectionpb.NewServerReflectionClient(h.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range resp.GetListServicesResponse().GetService() {
		if s.GetName() == "graveler.v1.GravelerService" {
			found = true
		}
	}
	if !found {
		t.Fatalf("services: %v", resp.GetListServicesResponse().GetService())
	}
}

func counterValue(t *testing.T, method, code string) float64 {
	t.Helper()
	var m dto.Metric
	if err := requestsTotal.WithLabelValues(method, code).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
