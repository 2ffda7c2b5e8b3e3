// Package embedded runs a single-node etcd server inside the process, on
// loopback ports, for tests and for gravelerd's zero-configuration default.
//
// Start returns once the server is ready to serve or fails after
// Config.StartTimeout. Server.Close stops it and waits; it is safe to call
// more than once.
//
// Concurrency: a Server's methods are safe to call from any goroutine;
// Close called from several waits until the server stopped in each.
// Servers on distinct data directories may run side by side.
//
// Errors: ErrStartTimeout, or the embed package's error wrapped with
// context.
package embedded

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// ErrStartTimeout: the server did not become ready in time.
var ErrStartTimeout = errors.New("embedded etcd: not ready before the start timeout")

// Config configures the embedded server.
type Config struct {
	// Dir is the data directory (required).
	Dir string
	// ClientAddr is the client listen address, host:port; default
	// 127.0.0.1:0. Port 0 is a free port on that host, picked before
	// etcd starts so that Endpoints names the port it listens on.
	ClientAddr string
	// PeerAddr is the peer listen address; default 127.0.0.1:0, as above.
	PeerAddr string
	// UnsafeNoFsync skips fsync: for tests only, a crash may lose data.
	UnsafeNoFsync bool
	// Fast selects short raft ticks (10ms tick, 100ms election), for tests.
	Fast bool
	// StartTimeout bounds the wait for readiness (default 30s).
	StartTimeout time.Duration
	// AutoCompactionRetention is the periodic compaction window
	// (default 5m, as the manifests: see docs/operations.md, "Compaction";
	// negative disables it).
	AutoCompactionRetention time.Duration
	// QuotaBackendBytes is the backend quota (default etcd's 2 GiB).
	QuotaBackendBytes int64
	// Logger receives etcd's logs; nil silences them.
	Logger *zap.Logger
}

// Server is a running embedded etcd.
type Server struct {
	etcd      *embed.Etcd
	endpoints []string
	closeOnce sync.Once
}

// freeAddr picks a free port on addr's host (addr has port 0); etcd binds
// it itself right after, so a rare race with another process is possible
// and surfaces as a start error.
func freeAddr(addr string) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func mustURL(addr string) url.URL {
	return url.URL{Scheme: "http", Host: addr}
}

// Start starts the server and waits until it is ready.
func Start(cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("embedded etcd: Dir is required")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded etcd: data dir: %w", err)
	}
	var err error
	for _, a := range []*string{&cfg.ClientAddr, &cfg.PeerAddr} {
		if *a == "" {
			*a = "127.0.0.1:0"
		}
		if _, port, perr := net.SplitHostPort(*a); perr == nil && port == "0" {
			if *a, err = freeAddr(*a); err != nil {
				return nil, fmt.Errorf("embedded etcd: free port: %w", err)
			}
		}
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	ec := embed.NewConfig()
	ec.Name = "graveler"
	ec.Dir = filepath.Join(cfg.Dir, "etcd")
	cu, pu := mustURL(cfg.ClientAddr), mustURL(cfg.PeerAddr)
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	ec.InitialCluster = ec.Name + "=" + pu.String()
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	if cfg.Fast {
		ec.TickMs, ec.ElectionMs = 10, 100
	}
	switch {
	case cfg.AutoCompactionRetention == 0:
		ec.AutoCompactionMode, ec.AutoCompactionRetention = "periodic", "5m"
	case cfg.AutoCompactionRetention > 0:
		ec.AutoCompactionMode, ec.AutoCompactionRetention = "periodic", cfg.AutoCompactionRetention.String()
	}
	if cfg.QuotaBackendBytes > 0 {
		ec.QuotaBackendBytes = cfg.QuotaBackendBytes
	}
	if cfg.Logger != nil {
		ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(cfg.Logger)
	} else {
		ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: start: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(cfg.StartTimeout):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("%w (%s)", ErrStartTimeout, cfg.StartTimeout)
	}
	return &Server{etcd: e, endpoints: []string{cu.String()}}, nil
}

// Endpoints are the client URLs to dial.
func (s *Server) Endpoints() []string { return s.endpoints }

// Err reports a fatal server error after start.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops the server and waits for it.
func (s *Server) Close() {
	s.closeOnce.Do(s.etcd.Close)
}
