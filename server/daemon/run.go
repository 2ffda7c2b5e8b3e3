package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"graveler/buildinfo"
	"graveler/etcdkv/embedded"
	"graveler/keys"
	"graveler/kv"
	"graveler/server"
)

func tlsConfig(c *Config) (*tls.Config, error) {
	if c.TLSCertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("gravelerd: TLS certificate: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.TLSClientCAFile != "" {
		pem, err := os.ReadFile(c.TLSClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("gravelerd: TLS client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("gravelerd: TLS client CA %s holds no PEM certificate", c.TLSClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// probe reads a key that never exists: reaching etcd is all that matters.
func probe(store kv.Store) func(context.Context) error {
	return func(ctx context.Context) error {
		_, _, err := store.Get(ctx, keys.Graveler(), keys.Repository("_health"))
		if err == nil || errors.Is(err, kv.ErrNotFound) {
			return nil
		}
		return err
	}
}

// Run serves until ctx ends, then shuts down gracefully: health turns
// NOT_SERVING, in-flight calls drain (bounded by ShutdownTimeout), and the
// store and the embedded etcd close.
func Run(ctx context.Context, cfg Config) (err error) {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Logger
	if log == nil {
		zc := zap.NewProductionConfig()
		zc.Level = zap.NewAtomicLevelAt(cfg.LogLevel)
		if log, err = zc.Build(); err != nil {
			return fmt.Errorf("gravelerd: logger: %w", err)
		}
		defer func() { _ = log.Sync() }()
	}
	log.Info("gravelerd starting", zap.String("version", buildinfo.Version), zap.String("go_version", buildinfo.GoVersion()),
		zap.Stringer("log_level", cfg.LogLevel), zap.Stringer("access_log", cfg.AccessLog))
	tlsCfg, err := tlsConfig(&cfg)
	if err != nil {
		return err
	}
	var tokens *server.Tokens
	if cfg.TokensFile != "" {
		if tokens, err = server.LoadTokens(cfg.TokensFile); err != nil {
			return fmt.Errorf("gravelerd: %w", err)
		}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("gravelerd: data dir: %w", err)
	}

	etcdCfg := cfg.Etcd
	if len(etcdCfg.Endpoints) == 0 {
		// Before etcd, whose own lock would make a second process wait
		// for ever; held until the embedded etcd has closed.
		unlock, err := lockDataDir(cfg.DataDir)
		if err != nil {
			return err
		}
		defer unlock()
		srv, err := embedded.Start(embedded.Config{
			Dir:           filepath.Join(cfg.DataDir, "etcd"),
			ClientAddr:    cfg.EmbeddedEtcdListen,
			UnsafeNoFsync: cfg.EmbeddedEtcdUnsafeNoFsync,
			Fast:          cfg.EmbeddedEtcdFast,
		})
		if err != nil {
			return fmt.Errorf("gravelerd: embedded etcd: %w", err)
		}
		defer srv.Close()
		etcdCfg.Endpoints = srv.Endpoints()
		log.Info("embedded etcd started", zap.Strings("endpoints", etcdCfg.Endpoints), zap.String("dir", filepath.Join(cfg.DataDir, "etcd")))
	}

	b, err := openBackend(ctx, &cfg, etcdCfg, log)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := b.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("gravelerd: close store: %w", cerr))
		}
	}()

	srv := server.New(b.service, server.Config{StorageNamespaceRoot: cfg.StorageNamespaceRoot, Feed: b.feed})
	g := server.NewGRPCServer(srv, server.GRPCOptions{
		TLS:            tlsCfg,
		Tokens:         tokens,
		MaxRecvMsgSize: cfg.MaxRecvMsgSize,
		DefaultTimeout: cfg.DefaultCallTimeout,
		Logger:         log,

		AccessLog:         cfg.AccessLog,
		SlowCallThreshold: cfg.SlowCallThreshold,
	})

	lis, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("gravelerd: listen: %w", err)
	}
	var metrics *http.Server
	if cfg.MetricsAddr != "" {
		mlis, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			lis.Close()
			return fmt.Errorf("gravelerd: metrics listen: %w", err)
		}
		metrics = &http.Server{Handler: metricsHandler(cfg.EnablePprof), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = metrics.Serve(mlis) }()
		log.Info("metrics listening", zap.String("addr", mlis.Addr().String()), zap.Bool("pprof", cfg.EnablePprof))
	}

	hctx, stopHealth := context.WithCancel(ctx)
	healthDone := make(chan struct{})
	go func() {
		defer close(healthDone)
		g.RunHealth(hctx, probe(b.store), cfg.HealthInterval, cfg.HealthInterval, log)
	}()

	serveErr := make(chan error, 1)
	go func() { serveErr <- g.Server.Serve(lis) }()
	addr := lis.Addr().String()
	log.Info("gravelerd listening", zap.String("addr", addr), zap.Bool("tls", tlsCfg != nil), zap.Bool("auth", tokens != nil))
	if cfg.Ready != nil {
		cfg.Ready(addr)
	}

	select {
	case <-ctx.Done():
		log.Info("shutting down: draining in-flight calls", zap.Duration("bound", cfg.ShutdownTimeout))
	case err = <-serveErr:
		err = fmt.Errorf("gravelerd: serve: %w", err)
	}
	stopHealth()
	<-healthDone
	g.SetServing(false)
	g.Health.Shutdown()
	// WatchRefs streams never end by themselves: closing the feed ends
	// them with UNAVAILABLE, so clients resume on another replica, and
	// the drain waits only for the calls that do end.
	_ = b.feed.Close()
	drained := make(chan struct{})
	go func() { g.Server.GracefulStop(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(cfg.ShutdownTimeout):
		log.Warn("drain bound reached: cancelling remaining calls")
		g.Server.Stop()
		<-drained
	}
	if metrics != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = metrics.Shutdown(sctx)
		cancel()
	}
	log.Info("gravelerd stopped")
	return err
}
