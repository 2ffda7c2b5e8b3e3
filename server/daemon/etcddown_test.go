package daemon_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pb "graveler/api/graveler/v1"
	"graveler/client"
	"graveler/server/daemon"
	"graveler/server/daemon/daemontest"
)

// TestEtcdUnreachableUnavailable: against an etcd that accepts no
// connection, a call that lists (a scan of etcd) fails as one that gets
// does, UNAVAILABLE with STORE_UNAVAILABLE after its attempts of the
// request timeout, not at the client's deadline.
func TestEtcdUnreachableUnavailable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + ln.Addr().String()
	ln.Close()
	const requestTimeout = 200 * time.Millisecond
	srv := daemontest.Start(t, func(c *daemon.Config) {
		c.Etcd.Endpoints = []string{endpoint}
		c.Etcd.RequestTimeout = requestTimeout
	})
	cl := dial(t, srv.Addr)
	for _, c := range []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"GetRepository", func(ctx context.Context) error {
			_, err := cl.GetRepository(ctx, &pb.GetRepositoryRequest{Name: "repositories/repo1"})
			return err
		}},
		{"ListRepositories", func(ctx context.Context) error {
			_, err := cl.ListRepositories(ctx, &pb.ListRepositoriesRequest{})
			return err
		}},
	} {
		// Far longer than the attempts: a call that waits for it fails.
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		start := time.Now()
		err := c.call(ctx)
		cancel()
		wantErr(t, err, client.ErrUnavailable, codes.Unavailable, "STORE_UNAVAILABLE")
		if took, most := time.Since(start), 10*3*requestTimeout; took > most {
			t.Fatalf("%s with etcd unreachable failed after %v, want within about 3 x %v", c.name, took, requestTimeout)
		}
	}
}
