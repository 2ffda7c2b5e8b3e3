package etcdkv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/kv"
)

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
			proxy := newStallProxy(t, srv.Endpoints()[0])
			s, err := etcdkv.New(t.Context(), etcdkv.Config{
				Endpoints:      []string{proxy.endpoint(), srv.Endpoints()[0]},
				RequestTimeout: 2 * time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for i := range 2 {
				if err := s.Set(t.Context(), part, fmt.Appendf(nil, "k%d", i), []byte("v")); err != nil {
					t.Fatal(err)
				}
			}
			proxy.warmUp(t, s, part)
			time.Sleep(200 * time.Millisecond) // let control frames settle
			proxy.crashed.Store(true)
			for i := 0; proxy.kills.Load() == 0; i++ {
				if i == 10 {
					t.Fatal("no request met the crashed member")
				}
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				start := time.Now()
				err := op.do(ctx, s)
				cancel()
				if err != nil {
					t.Errorf("%s (crashed member met: %v) failed after %v though one member still serves: %v", op.name, proxy.kills.Load() > 0, time.Since(start), err)
				}
			}
		})
	}
}
