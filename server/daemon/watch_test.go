package daemon_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "graveler/api/graveler/v1"
	"graveler/server/daemon"
	"graveler/server/daemon/daemontest"
)

// gravelerd serves WatchRefs from its etcd, and its shutdown ends the
// streams (which never end by themselves) with UNAVAILABLE at once, instead
// of leaving them to the drain bound.
func TestWatchRefsShutdownUnavailable(t *testing.T) {
	srv := daemontest.Start(t, func(c *daemon.Config) { c.ShutdownTimeout = 5 * time.Minute })
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := pb.NewGravelerServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := cl.WatchRefs(ctx, &pb.WatchRefsRequest{ProgressIntervalMs: 100})
	if err != nil {
		t.Fatal(err)
	}
	// The stream starts "now" when the server gets it: wait for its first
	// bookmark, so the create below is after the start.
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "shut", Repository: &pb.Repository{StorageNamespace: "mem://shut"}}); err != nil {
		t.Fatal(err)
	}
	for created := false; !created; {
		m, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range m.GetEvents() {
			created = created || e.GetType() == pb.RefEvent_TYPE_REPOSITORY_CREATED && e.GetRepository() == "repositories/shut"
		}
	}
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Stop() }()
	var m *pb.WatchRefsResponse
	for err == nil {
		m, err = s.Recv()
		if err == nil && m.GetKind() != pb.WatchRefsResponse_KIND_BOOKMARK {
			t.Fatalf("unexpected %v", m)
		}
	}
	st := status.Convert(err)
	var reason string
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			reason = ei.GetReason()
		}
	}
	if st.Code() != codes.Unavailable || reason != "SERVER_SHUTTING_DOWN" {
		t.Fatalf("stream ended with %v %q (%v)", st.Code(), reason, err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}
