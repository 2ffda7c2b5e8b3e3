package etcdkv_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/kv"
)

// killProxy forwards to an etcd member until armed; armed, it acts as a
// member that crashed: a request that arrives on an open connection gets
// the connection closed under it, and new connections are closed at once.
type killProxy struct {
	ln       net.Listener
	target   string
	armed    atomic.Bool
	kills    atomic.Int64
	returned atomic.Int64
	mu       sync.Mutex
	conns    []net.Conn
}

func newKillProxy(t *testing.T, endpoint string) *killProxy {
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &killProxy{ln: ln, target: u.Host}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.armed.Load() {
				c.Close()
				continue
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go p.pipe(up, c, true)
			go p.pipe(c, up, false)
		}
	}()
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

func (p *killProxy) pipe(dst, src net.Conn, towardsMember bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			src.Close()
			dst.Close()
			return
		}
		if towardsMember && p.armed.Load() && hasHeaders(buf[:n]) {
			// The member dies with this request in flight.
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

// hasHeaders reports whether b, read from a client's HTTP/2 connection,
// holds a HEADERS frame: the start of a request.
func hasHeaders(b []byte) bool {
	for len(b) >= 9 {
		l := int(b[0])<<16 | int(b[1])<<8 | int(b[2])
		if b[3] == 0x1 {
			return true
		}
		if 9+l > len(b) {
			return false
		}
		b = b[9+l:]
	}
	return false
}

// TestReadsOnMemberCrash: one of two endpoints dies with a request in
// flight. Every read is sent again and answered by the other member:
// Get (which the etcd client retries itself), and GetMany, Scan and
// CountPartition, which the store sends again.
func TestReadsOnMemberCrash(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	part := []byte("crash")
	ops := []struct {
		name string
		do   func(ctx context.Context, s *etcdkv.Store) error
	}{
		{"get", func(ctx context.Context, s *etcdkv.Store) error {
			_, _, err := s.Get(ctx, part, []byte("k0"))
			return err
		}},
		{"get_many", func(ctx context.Context, s *etcdkv.Store) error {
			_, err := s.GetMany(ctx, []kv.KeyRef{{Partition: part, Key: []byte("k0")}, {Partition: part, Key: []byte("k1")}})
			return err
		}},
		{"scan", func(ctx context.Context, s *etcdkv.Store) error {
			for _, err := range s.Scan(ctx, part, kv.ScanOptions{}) {
				if err != nil {
					return err
				}
			}
			return nil
		}},
		{"count", func(ctx context.Context, s *etcdkv.Store) error {
			_, err := s.CountPartition(ctx, part)
			return err
		}},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			proxy := newKillProxy(t, srv.Endpoints()[0])
			s, err := etcdkv.New(t.Context(), etcdkv.Config{
				Endpoints:      []string{"http://" + proxy.ln.Addr().String(), srv.Endpoints()[0]},
				RequestTimeout: 2 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for i := range 2 {
				if err := s.Set(t.Context(), part, fmt.Appendf(nil, "k%d", i), warmValue); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; proxy.returned.Load() < int64(len(warmValue)); i++ {
				if i == 100 {
					t.Fatal("proxy never used")
				}
				if _, _, err := s.Get(t.Context(), part, []byte("k0")); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(200 * time.Millisecond) // let control frames settle
			proxy.armed.Store(true)
			for i := 0; proxy.kills.Load() == 0; i++ {
				if i == 10 {
					t.Fatal("no request met the crashed member")
				}
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				start := time.Now()
				err := op.do(ctx, s)
				cancel()
				hit := proxy.kills.Load() > 0
				if err != nil {
					t.Errorf("%s (crashed member met: %v) failed after %v though one member still serves: %v", op.name, hit, time.Since(start), err)
				}
			}
		})
	}
}
