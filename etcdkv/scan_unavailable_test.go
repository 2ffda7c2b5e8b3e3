package etcdkv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/kv"
)

// refusedEndpoint is an etcd endpoint on which nothing listens: every
// connection is refused, as when etcd is down or the address is wrong.
func refusedEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// storeOn dials endpoint with requestTimeout, without keepalive (only the
// request timeout can bound a request).
func storeOn(t *testing.T, endpoint string, requestTimeout time.Duration) *etcdkv.Store {
	t.Helper()
	s, err := etcdkv.New(t.Context(), etcdkv.Config{
		Endpoints:         []string{endpoint},
		DialKeepAliveTime: -1,
		RequestTimeout:    requestTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// firstErr runs seq to its end and returns its error.
func firstErr[V any](seq func(func(V, error) bool)) error {
	for _, err := range seq {
		if err != nil {
			return err
		}
	}
	return nil
}

// TestScanUnreachableClusterUnavailable: with no member accepting a
// connection, every walk of a range (a streamed scan, a paged scan, the
// cleaner's partition listing, a partition drop) fails as a Get does:
// kv.ErrUnavailable after three attempts of Config.RequestTimeout each,
// not at the caller's deadline (nor never, without one). The client waits
// for a ready connection before it opens a stream, so an unbounded
// opening hung there.
func TestScanUnreachableClusterUnavailable(t *testing.T) {
	const requestTimeout = 200 * time.Millisecond
	endpoint := refusedEndpoint(t)
	part := []byte("p")
	ops := []struct {
		name  string
		paged bool
		do    func(ctx context.Context, s *etcdkv.Store) error
	}{
		{"get", false, func(ctx context.Context, s *etcdkv.Store) error {
			_, _, err := s.Get(ctx, part, []byte("k"))
			return err
		}},
		{"scan", false, func(ctx context.Context, s *etcdkv.Store) error {
			return firstErr(s.Scan(ctx, part, kv.ScanOptions{}))
		}},
		{"scan_paged", true, func(ctx context.Context, s *etcdkv.Store) error {
			return firstErr(s.Scan(ctx, part, kv.ScanOptions{}))
		}},
		{"list_partitions", false, func(ctx context.Context, s *etcdkv.Store) error {
			return firstErr(s.ListPartitions(ctx, nil))
		}},
		{"drop_partition", false, func(ctx context.Context, s *etcdkv.Store) error {
			_, err := s.DropPartition(ctx, part)
			return err
		}},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			s := storeOn(t, endpoint, requestTimeout)
			if op.paged {
				s.ForcePagedScanForTest()
			}
			// Far longer than three attempts: an operation that waits
			// for its caller's deadline fails here.
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			before := testutil.ToFloat64(etcdkv.AttemptTimeoutsForTest)
			start := time.Now()
			err := op.do(ctx, s)
			took := time.Since(start)
			if !errors.Is(err, kv.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s with etcd unreachable: %v after %v, want kv.ErrUnavailable", op.name, err, took)
			}
			if most := 10 * 3 * requestTimeout; took > most {
				t.Fatalf("%s with etcd unreachable failed after %v, want within about 3 x %v", op.name, took, requestTimeout)
			}
			if n := testutil.ToFloat64(etcdkv.AttemptTimeoutsForTest) - before; n != 3 {
				t.Errorf("%s: %v attempts abandoned, want 3", op.name, n)
			}
			if want := fmt.Sprintf("3 attempts of %v each", requestTimeout); !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not say %q", op.name, err, want)
			}
		})
	}
}

// TestScanMemberDiesMidScan: the only member dies while a scan is
// streaming, after it returned entries. The scan's resumption cannot
// connect, and the scan fails with kv.ErrUnavailable within its attempts,
// having returned each key at most once and in order.
func TestScanMemberDiesMidScan(t *testing.T) {
	const requestTimeout = 500 * time.Millisecond
	srv := etcdkvtest.NewServer(t)
	proxy := newStallProxy(t, srv.Endpoints()[0])
	s := storeOn(t, proxy.endpoint(), requestTimeout)
	part := []byte("dies")
	// Far more than the stream's flow-control window: most of the scan
	// is still in etcd when the member dies.
	const keys = 64
	value := bytes.Repeat([]byte("v"), 128<<10)
	for i := range keys {
		if err := s.Set(t.Context(), part, fmt.Appendf(nil, "k%03d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var got [][]byte
	var err error
	var start time.Time
	for e, serr := range s.Scan(ctx, part, kv.ScanOptions{}) {
		if serr != nil {
			err = serr
			break
		}
		if n := len(got); n > 0 && bytes.Compare(e.Key, got[n-1]) <= 0 {
			t.Fatalf("scan returned %q after %q", e.Key, got[n-1])
		}
		got = append(got, e.Key)
		if len(got) == 1 {
			proxy.kill()
			start = time.Now()
		}
	}
	took := time.Since(start)
	if err == nil {
		t.Fatalf("scan returned all %d keys though the member died after the first: the test exercised nothing", len(got))
	}
	if !errors.Is(err, kv.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("scan after the member died: %v after %v, want kv.ErrUnavailable", err, took)
	}
	if most := 10 * 3 * requestTimeout; took > most {
		t.Fatalf("scan failed %v after the member died, want within about 3 x %v", took, requestTimeout)
	}
	t.Logf("%d of %d keys returned, then %v after %v", len(got), keys, err, took)
}

// kill makes the proxy act as a member killed (kill -9): every open
// connection is closed, and every new one is closed at once.
func (p *stallProxy) kill() {
	p.crashed.Store(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// TestScanCallerGivesUpWhileOpening: a caller that cancels, or whose
// deadline comes, while a scan waits to open its stream gets its own
// context's error at once, not kv.ErrUnavailable (which would blame
// etcd) and not after the request timeout.
func TestScanCallerGivesUpWhileOpening(t *testing.T) {
	s := storeOn(t, refusedEndpoint(t), time.Minute)
	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(200*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(t.Context(), 200*time.Millisecond)
		}, context.DeadlineExceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := c.ctx()
			defer cancel()
			start := time.Now()
			err := firstErr(s.Scan(ctx, []byte("p"), kv.ScanOptions{}))
			took := time.Since(start)
			if !errors.Is(err, c.want) || errors.Is(err, kv.ErrUnavailable) {
				t.Fatalf("scan whose caller gave up: %v, want %v and not kv.ErrUnavailable", err, c.want)
			}
			if took > 10*time.Second {
				t.Fatalf("scan whose caller gave up after 200ms returned after %v", took)
			}
		})
	}
}
