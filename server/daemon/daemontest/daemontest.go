// Package daemontest starts a complete gravelerd (daemon.Run with an
// embedded etcd and a file blob store in a temporary directory) on a
// loopback port for end-to-end tests, and stops it when the test ends.
//
// Concurrency: Start may be called from parallel tests (each server has
// its own data directory and port; they share the process's metrics). A
// Server's Stop is not for concurrent calls: call it from the test's
// goroutine, or leave it to the cleanup.
//
// Errors: Start fails t when gravelerd does not start within 60 seconds,
// with Run's error if it returned one. Stop returns Run's error (nil for
// a clean shutdown, and when called again); the cleanup reports it
// through t.
package daemontest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"graveler/server/daemon"
)

// Server is a running gravelerd.
type Server struct {
	Addr   string
	Config daemon.Config
	stop   context.CancelFunc
	done   chan error
}

// Start runs gravelerd with a test configuration that configure may
// change, and waits until it listens. The server stops at test cleanup;
// Stop stops it earlier and returns Run's error.
func Start(t testing.TB, configure func(*daemon.Config)) *Server {
	t.Helper()
	ready := make(chan string, 1)
	cfg := daemon.Config{
		ListenAddr:                "127.0.0.1:0",
		DataDir:                   t.TempDir(),
		EmbeddedEtcdUnsafeNoFsync: true,
		EmbeddedEtcdFast:          true,
		HealthInterval:            50 * time.Millisecond,
		ShutdownTimeout:           5 * time.Second,
		Logger:                    zaptest.NewLogger(t).Named("gravelerd"),
	}
	if configure != nil {
		configure(&cfg)
	}
	cfg.Ready = func(addr string) { ready <- addr }
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{Config: cfg, stop: cancel, done: make(chan error, 1)}
	go func() { s.done <- daemon.Run(ctx, cfg) }()
	select {
	case s.Addr = <-ready:
	case err := <-s.done:
		cancel()
		t.Fatalf("gravelerd did not start: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("gravelerd did not start within 60s")
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("gravelerd stop: %v", err)
		}
	})
	return s
}

// Stop shuts the server down gracefully and returns Run's error. Calling
// it again returns nil.
func (s *Server) Stop() error {
	if s.stop == nil {
		return nil
	}
	s.stop()
	s.stop = nil
	return <-s.done
}
