// Package etcdkvtest starts real embedded etcd servers for tests: NewServer
// gives a server and a raw client, NewStore an etcdkv.Store on a fresh
// server. Everything is stopped by t.Cleanup. Safe to call from parallel
// tests (each call gets its own server, data dir and ports).
package etcdkvtest

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

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
	var srv *embedded.Server
	var err error
	// The free ports embedded.Start picks are released before etcd binds
	// them, so parallel tests (and other processes) occasionally take one
	// first: that start fails with EADDRINUSE and is tried again on fresh
	// ports and a fresh directory.
	for attempt := 0; ; attempt++ {
		srv, err = embedded.Start(embedded.Config{Dir: t.TempDir(), UnsafeNoFsync: true, Fast: true, AutoCompactionRetention: -1})
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
