package daemon_test

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	pb "graveler/api/graveler/v1"
	"graveler/buildinfo"
	"graveler/server/daemon"
	"graveler/server/daemon/daemontest"
)

// TestDataDirInUse: a second gravelerd on the data directory of a running
// one (embedded etcd) fails at once, naming the directory, instead of
// waiting on etcd's lock; once the first stops, the directory is free.
func TestDataDirInUse(t *testing.T) {
	first := daemontest.Start(t, nil)
	cfg := daemon.Config{
		ListenAddr:                "127.0.0.1:0",
		DataDir:                   first.Config.DataDir,
		EmbeddedEtcdUnsafeNoFsync: true,
		EmbeddedEtcdFast:          true,
		Logger:                    zaptest.NewLogger(t).Named("second"),
		Ready:                     func(string) { t.Error("the second gravelerd started serving") },
	}
	// The bound only keeps a regression from hanging the test; the check
	// is the error.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := daemon.Run(ctx, cfg)
	if !errors.Is(err, daemon.ErrDataDirInUse) || !strings.Contains(err.Error(), "data directory "+first.Config.DataDir+" is in use by another process") {
		t.Fatalf("second gravelerd on one data directory: %v", err)
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	daemontest.Start(t, func(c *daemon.Config) { c.DataDir = first.Config.DataDir })
}

// TestVersionAtStart: gravelerd logs its version when it starts and
// answers GetServerVersion with it.
func TestVersionAtStart(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	srv := daemontest.Start(t, func(c *daemon.Config) { c.Logger = zap.New(core) })
	start := logs.FilterMessage("gravelerd starting").FilterField(zap.String("version", buildinfo.Version))
	if start.Len() != 1 {
		t.Fatalf("start lines naming version %q: %d of %v", buildinfo.Version, start.Len(), logs.All())
	}
	resp, err := dial(t, srv.Addr).GetServerVersion(t.Context(), &pb.GetServerVersionRequest{})
	if err != nil || resp.GetVersion() != buildinfo.Version || resp.GetGoVersion() != runtime.Version() {
		t.Fatalf("GetServerVersion: %v, %v", resp, err)
	}
}

// TestEmbeddedEtcdOnPinnedAddress: with EmbeddedEtcdListen the embedded
// etcd serves on that address, which the start log line names, so that
// the cleaner and gravelerfsck can be given it as their endpoint; the
// data gravelerd writes is there under its prefix.
func TestEmbeddedEtcdOnPinnedAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	core, logs := observer.New(zapcore.InfoLevel)
	srv := daemontest.Start(t, func(c *daemon.Config) {
		c.EmbeddedEtcdListen = addr
		c.Logger = zap.New(core)
	})
	endpoint := "http://" + addr
	if started := logs.FilterMessage("embedded etcd started").FilterField(zap.Strings("endpoints", []string{endpoint})); started.Len() != 1 {
		t.Fatalf("no start line naming %s: %v", endpoint, logs.FilterMessage("embedded etcd started").All())
	}
	if _, err := dial(t, srv.Addr).CreateRepository(t.Context(), &pb.CreateRepositoryRequest{RepositoryId: "pinned"}); err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, daemon.DefaultEtcdPrefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count == 0 {
		t.Fatalf("keys under %s/ at %s: %v, %v", daemon.DefaultEtcdPrefix, endpoint, resp, err)
	}
}
