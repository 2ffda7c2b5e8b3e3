//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"graveler/server/daemon"
)

// reserveAddr picks a free loopback port. The port is released before
// etcd binds it, which is racy against other processes but keeps the
// member's address fixed across restarts.
func reserveAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

type member struct {
	name      string
	dir       string
	clientURL url.URL
	peerURL   url.URL
	etcd      *embed.Etcd
	restarted bool
}

// cluster is a three-member etcd cluster whose members can be stopped and
// restarted in place.
type cluster struct {
	t       *testing.T
	mu      sync.Mutex
	members []*member
	initial string
}

func startCluster(t *testing.T, n int) *cluster {
	t.Helper()
	c := &cluster{t: t}
	var peers []string
	for i := range n {
		m := &member{
			name:      fmt.Sprintf("m%d", i),
			dir:       filepath.Join(t.TempDir(), fmt.Sprintf("m%d", i)),
			clientURL: url.URL{Scheme: "http", Host: reserveAddr(t)},
			peerURL:   url.URL{Scheme: "http", Host: reserveAddr(t)},
		}
		c.members = append(c.members, m)
		peers = append(peers, m.name+"="+m.peerURL.String())
	}
	c.initial = strings.Join(peers, ",")
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, m := range c.members {
		wg.Go(func() { errs[i] = c.start(m) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			c.stop(m)
		}
	})
	return c
}

func (c *cluster) start(m *member) error {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{m.clientURL}, []url.URL{m.clientURL}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{m.peerURL}, []url.URL{m.peerURL}
	cfg.InitialCluster = c.initial
	cfg.InitialClusterToken = "graveler-chaos"
	if m.restarted {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	cfg.TickMs, cfg.ElectionMs = 20, 200
	cfg.UnsafeNoFsync = true
	cfg.AutoCompactionMode, cfg.AutoCompactionRetention = "periodic", "1m"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", m.name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd %s: %w", m.name, err)
	case <-time.After(60 * time.Second):
		e.Close()
		return fmt.Errorf("etcd %s: not ready in 60s", m.name)
	}
	c.mu.Lock()
	m.etcd = e
	c.mu.Unlock()
	return nil
}

func (c *cluster) stop(m *member) {
	c.mu.Lock()
	e := m.etcd
	m.etcd = nil
	c.mu.Unlock()
	if e != nil {
		e.Close()
	}
}

// kill stops m abruptly, as a crash would: raft halts at once, with no
// leadership transfer (a leader's in-flight proposals may or may not be
// committed by its successor), and then the client and peer listeners
// close. A graceful stop (embed.Etcd.Close alone) would first hand the
// leadership over and let pending requests finish, so clients would never
// meet a cluster without a leader.
func (c *cluster) kill(m *member) {
	c.mu.Lock()
	e := m.etcd
	m.etcd = nil
	c.mu.Unlock()
	if e != nil {
		e.Server.HardStop()
		e.Close()
	}
}

// restart kills m, waits down, and starts it again on its directory and ports.
func (c *cluster) restart(m *member, down time.Duration) error {
	c.kill(m)
	time.Sleep(down)
	m.restarted = true
	return c.start(m)
}

// leader returns the member the running members agree is leader, or nil.
func (c *cluster) leader() *member {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.members {
		if m.etcd != nil && m.etcd.Server.Leader() == m.etcd.Server.MemberID() {
			return m
		}
	}
	return nil
}

func (c *cluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientURL.String())
	}
	return eps
}

// gravelerd is an in-process gravelerd on a fixed address, restartable.
type gravelerd struct {
	t      *testing.T
	cfg    daemon.Config
	addr   string
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
}

func newGravelerd(t *testing.T, endpoints []string, log *zap.Logger, name string) *gravelerd {
	addr := reserveAddr(t)
	g := &gravelerd{t: t, addr: addr, cfg: daemon.Config{
		ListenAddr:      addr,
		DataDir:         filepath.Join(t.TempDir(), name),
		Etcd:            daemon.EtcdConfig{Endpoints: endpoints, DialTimeout: 5 * time.Second},
		HealthInterval:  200 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second,
		Logger:          log.Named(name),
	}}
	return g
}

func (g *gravelerd) start() error {
	ready := make(chan string, 1)
	cfg := g.cfg
	cfg.Ready = func(a string) { ready <- a }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx, cfg) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		return fmt.Errorf("gravelerd %s: %w", g.addr, err)
	case <-time.After(60 * time.Second):
		cancel()
		return fmt.Errorf("gravelerd %s: not serving in 60s", g.addr)
	}
	g.mu.Lock()
	g.cancel, g.done = cancel, done
	g.mu.Unlock()
	return nil
}

func (g *gravelerd) stop() error {
	g.mu.Lock()
	cancel, done := g.cancel, g.done
	g.cancel, g.done = nil, nil
	g.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	return <-done
}
