package etcdkv_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/kv"
)

// stallProxy forwards TCP connections to an etcd member until frozen;
// then it keeps every connection open and swallows whatever either side
// sends, as a stopped member does (SIGSTOP, a hung host): the client's
// requests are neither answered nor refused. Crashed instead, it acts as
// a member that died (kill -9): a request that arrives on an open
// connection has the connection closed under it, and a new connection is
// closed at once.
type stallProxy struct {
	ln       net.Listener
	target   string
	frozen   atomic.Bool
	crashed  atomic.Bool
	kills    atomic.Int64 // requests met by the crash
	returned atomic.Int64 // bytes forwarded towards the client

	mu    sync.Mutex
	conns []net.Conn
}

func newStallProxy(t *testing.T, endpoint string) *stallProxy {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: u.Host}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

func (p *stallProxy) endpoint() string { return "http://" + p.ln.Addr().String() }

// warmValue is larger than anything but a read of it sends back.
var warmValue = make([]byte, 8<<10)

// warmUp reads a key holding warmValue until one read came back through
// the proxy: its connection is then ready, and the balancer picks it in
// turn.
func (p *stallProxy) warmUp(t *testing.T, s *etcdkv.Store, part []byte) {
	t.Helper()
	if err := s.Set(t.Context(), part, []byte("warm"), warmValue); err != nil {
		t.Fatal(err)
	}
	for i := 0; p.returned.Load() < int64(len(warmValue)); i++ {
		if i == 100 {
			t.Fatal("no read came back through the proxied endpoint")
		}
		if _, _, err := s.Get(t.Context(), part, []byte("warm")); err != nil {
			t.Fatal(err)
		}
	}
}

func (p *stallProxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

func (p *stallProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.crashed.Load() {
			c.Close()
			continue
		}
		p.track(c)
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.track(up)
		go p.pipe(up, c, true)
		go p.pipe(c, up, false)
	}
}

func (p *stallProxy) pipe(dst, src net.Conn, towardsMember bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			src.Close()
			dst.Close()
			return
		}
		if p.frozen.Load() {
			continue
		}
		if towardsMember && p.crashed.Load() && hasHeaders(buf[:n]) {
			p.kills.Add(1)
			src.Close()
			dst.Close()
			return
		}
		if !towardsMember {
			p.returned.Add(int64(n))
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			src.Close()
			return
		}
	}
}

// TestStalledMemberDoesNotStallRequests: with one of two endpoints
// stopped mid-connection, every kind of request still succeeds within a
// caller deadline far longer than the request timeout, each through at
// most one abandoned attempt: the one that met the stopped member is cut
// off by Config.RequestTimeout and a read is sent again, a write settled,
// on the healthy endpoint. Keepalive is off, so only the request timeout
// can rescue a request.
func TestStalledMemberDoesNotStallRequests(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	proxy := newStallProxy(t, srv.Endpoints()[0])
	s, err := etcdkv.New(t.Context(), etcdkv.Config{
		Endpoints:         []string{proxy.endpoint(), srv.Endpoints()[0]},
		DialKeepAliveTime: -1,
		RequestTimeout:    300 * time.Millisecond,
		SettleTimeout:     300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	part := []byte("stall")
	proxy.warmUp(t, s, part)
	proxy.frozen.Store(true)

	ops := []struct {
		name string
		do   func(ctx context.Context, i int) error
	}{
		{"get", func(ctx context.Context, i int) error {
			_, _, err := s.Get(ctx, part, []byte("warm"))
			return err
		}},
		{"setif", func(ctx context.Context, i int) error {
			return s.SetIf(ctx, part, fmt.Appendf(nil, "k%d", i), []byte("v"), kv.Absent)
		}},
		{"get_many", func(ctx context.Context, i int) error {
			out, err := s.GetMany(ctx, []kv.KeyRef{{Partition: part, Key: fmt.Appendf(nil, "k%d", i)}})
			if err == nil && string(out[0].Value) != "v" {
				err = fmt.Errorf("read %q", out[0].Value)
			}
			return err
		}},
		{"deleteif", func(ctx context.Context, i int) error {
			k := fmt.Appendf(nil, "k%d", i)
			_, pred, err := s.Get(ctx, part, k)
			if err != nil {
				return err
			}
			return s.DeleteIf(ctx, part, k, pred)
		}},
		{"scan", func(ctx context.Context, i int) error {
			n := 0
			for _, err := range s.Scan(ctx, part, kv.ScanOptions{}) {
				if err != nil {
					return err
				}
				n++
			}
			if n != 1 {
				return fmt.Errorf("scan returned %d keys, want 1", n)
			}
			return nil
		}},
	}
	const rounds = 4
	before := testutil.ToFloat64(etcdkv.AttemptTimeoutsForTest)
	for i := range rounds {
		for _, op := range ops {
			// Far longer than any path through the timeouts above: a
			// request that waits for its caller's deadline fails here.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			err := op.do(ctx, i)
			cancel()
			if err != nil {
				t.Fatalf("round %d, %s with one endpoint stalled: %v (deadline exceeded: %v)", i, op.name, err, errors.Is(err, context.DeadlineExceeded))
			}
		}
	}
	stalled := testutil.ToFloat64(etcdkv.AttemptTimeoutsForTest) - before
	if stalled < 1 {
		t.Fatalf("no attempt met the stalled endpoint: the test exercised nothing")
	}
	// Round robin alternates the endpoints, so an abandoned attempt's
	// retry goes to the healthy one: at most one abandoned attempt per
	// request, and no operation here sends more than two requests.
	if most := float64(2 * rounds * len(ops)); stalled > most {
		t.Fatalf("%v attempts abandoned, more than one per request (%v)", stalled, most)
	}
	t.Logf("%v of the requests' attempts were abandoned", stalled)
}

// TestStalledMemberTakenOut: once an attempt meets a stopped member, the
// member is taken out of the rotation, so later requests no longer meet
// it at all; when it answers again it is put back.
func TestStalledMemberTakenOut(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	proxy := newStallProxy(t, srv.Endpoints()[0])
	s, err := etcdkv.New(t.Context(), etcdkv.Config{
		Endpoints:         []string{proxy.endpoint(), srv.Endpoints()[0]},
		DialKeepAliveTime: -1,
		RequestTimeout:    300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	part, key := []byte("out"), []byte("k")
	get := func() {
		t.Helper()
		if _, _, err := s.Get(ctx, part, key); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Set(ctx, part, key, []byte("v")); err != nil {
		t.Fatal(err)
	}
	proxy.warmUp(t, s, part)
	proxy.frozen.Store(true)
	before := testutil.ToFloat64(etcdkv.AttemptTimeoutsForTest)
	for i := 0; testutil.ToFloat64(etcdkv.AttemptTimeoutsForTest) == before; i++ {
		if i == 10 {
			t.Fatal("no attempt met the stalled endpoint")
		}
		get()
	}
	waitFor(t, "the stalled endpoint taken out", func() bool {
		return slices.Equal(s.MembersOutForTest(), []string{proxy.endpoint()})
	})
	before = testutil.ToFloat64(etcdkv.AttemptTimeoutsForTest)
	for i := range 20 {
		get()
		if err := s.Set(ctx, part, fmt.Appendf(nil, "k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if n := testutil.ToFloat64(etcdkv.AttemptTimeoutsForTest) - before; n != 0 {
		t.Fatalf("%v attempts met the endpoint taken out", n)
	}

	proxy.frozen.Store(false)
	waitFor(t, "the endpoint put back", func() bool { return len(s.MembersOutForTest()) == 0 })
	proxy.returned.Store(0)
	proxy.warmUp(t, s, part)
}

// waitFor polls cond until it holds, failing after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
