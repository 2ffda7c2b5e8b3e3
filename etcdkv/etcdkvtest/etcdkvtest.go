// Package etcdkvtest starts real embedded etcd servers for tests: NewServer
// (NewServerConfig, e.g. with a small quota) gives a server and a raw
// client, NewStore an etcdkv.Store on a fresh
// server. Everything is stopped by t.Cleanup. Safe to call from parallel
// tests (each call gets its own server, data dir and ports).
//
// Errors: none returned. A helper that cannot start, reach or free the
// server fails t with a message prefixed "etcdkvtest:"; the stores it
// makes return etcdkv's errors.
package etcdkvtest

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/etcdkv"
	"graveler/etcdkv/embedded"
)

// Server is an embedded etcd with a raw client on it.
type Server struct {
	*embedded.Server
	Client *clientv3.Client
}

// NewServer starts an embedded etcd (fast ticks, no fsync) in t.TempDir().
func NewServer(t testing.TB) *Server {
	t.Helper()
	return NewServerConfig(t, embedded.Config{})
}

// NewServerConfig is NewServer with cfg's other fields (a small
// QuotaBackendBytes, to drive etcd into NOSPACE); Dir, the fast ticks, no
// fsync and no auto-compaction are always set.
func NewServerConfig(t testing.TB, cfg embedded.Config) *Server {
	t.Helper()
	var srv *embedded.Server
	var err error
	// The free ports embedded.Start picks are released before etcd binds
	// them, so parallel tests (and other processes) occasionally take one
	// first: that start fails with EADDRINUSE and is tried again on fresh
	// ports and a fresh directory.
	for attempt := 0; ; attempt++ {
		cfg.Dir, cfg.UnsafeNoFsync, cfg.Fast, cfg.AutoCompactionRetention = t.TempDir(), true, true, -1
		srv, err = embedded.Start(cfg)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || attempt >= 4 {
			break
		}
	}
	if err != nil {
		t.Fatalf("etcdkvtest: %v", err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		srv.Close()
		t.Fatalf("etcdkvtest: client: %v", err)
	}
	t.Cleanup(func() {
		cli.Close()
		srv.Close()
	})
	return &Server{Server: srv, Client: cli}
}

// NewStore returns an etcdkv.Store (root prefix /graveler) on a fresh server.
func NewStore(t testing.TB) *etcdkv.Store {
	t.Helper()
	return NewStoreOn(t, NewServer(t), etcdkv.Config{})
}

// NewStoreOn returns a Store dialing srv with cfg (Endpoints filled in).
func NewStoreOn(t testing.TB, srv *Server, cfg etcdkv.Config) *etcdkv.Store {
	t.Helper()
	cfg.Endpoints = srv.Endpoints()
	s, err := etcdkv.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("etcdkvtest: store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// FreeSpace is the operator's way out of etcd's NOSPACE alarm, after the
// keys that filled the quota were deleted or dropped: compact at the
// current revision (which frees the old revisions inside the database),
// defragment (which shrinks the file that the quota measures), then
// disarm every alarm of the member. It returns the database size after
// the defragmentation.
func (s *Server) FreeSpace(t testing.TB) int64 {
	t.Helper()
	ctx := context.Background()
	ep := s.Endpoints()[0]
	st, err := s.Client.Status(ctx, ep)
	if err != nil {
		t.Fatalf("etcdkvtest: status: %v", err)
	}
	if _, err := s.Client.Compact(ctx, st.Header.Revision, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("etcdkvtest: compact: %v", err)
	}
	if _, err := s.Client.Defragment(ctx, ep); err != nil {
		t.Fatalf("etcdkvtest: defragment: %v", err)
	}
	alarms, err := s.Client.AlarmList(ctx)
	if err != nil {
		t.Fatalf("etcdkvtest: alarm list: %v", err)
	}
	for _, a := range alarms.Alarms {
		if _, err := s.Client.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: a.MemberID, Alarm: a.Alarm}); err != nil {
			t.Fatalf("etcdkvtest: alarm disarm: %v", err)
		}
	}
	if st, err = s.Client.Status(ctx, ep); err != nil {
		t.Fatalf("etcdkvtest: status: %v", err)
	}
	return st.DbSize
}

// NoSpaceAlarm reports whether etcd's NOSPACE alarm is raised.
func (s *Server) NoSpaceAlarm(t testing.TB) bool {
	t.Helper()
	alarms, err := s.Client.AlarmList(context.Background())
	if err != nil {
		t.Fatalf("etcdkvtest: alarm list: %v", err)
	}
	for _, a := range alarms.Alarms {
		if a.Alarm == etcdserverpb.AlarmType_NOSPACE {
			return true
		}
	}
	return false
}
