//go:build chaos

package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"graveler/server/daemon"
)

// reserveAddr picks a free loopback port. The port is released before
// its user binds it, which keeps a member's address fixed across
// restarts. It is drawn below the kernel's ephemeral range (32768 and up
// on Linux), from which outgoing connections take their local ports: a
// port from there could be taken by any connection before its user binds
// it. Another test process may still take one meanwhile; startCluster
// starts again on new ports when that happens.
func reserveAddr(t testing.TB) string {
	t.Helper()
	const lo, hi = 20000, 32768
	for range 1000 {
		addr := fmt.Sprintf("127.0.0.1:%d", lo+rand.IntN(hi-lo))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		return addr
	}
	t.Fatalf("no free loopback port in [%d, %d)", lo, hi)
	return ""
}

// etcdBinary builds ./etcdproc (etcd's own main) once per test binary, so
// that members are separate OS processes: only then can a test kill one
// with SIGKILL (no leadership transfer, no flush) or freeze it with
// SIGSTOP (its sockets stay open and silent, as a stalled host's would).
var etcdBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "graveler-chaos-etcd-")
	if err != nil {
		return "", err
	}
	builtDir = dir
	bin := filepath.Join(dir, "etcd")
	gocmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("building etcd for the chaos tests needs the go command on PATH: %w", err)
	}
	// The test runs in its package directory, inside the module, so the
	// package path resolves against this module's go.mod and go.sum.
	cmd := exec.Command(gocmd, "build", "-o", bin, "graveler/chaos/etcdproc")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build etcdproc: %w\n%s", err, out)
	}
	return bin, nil
})

// builtDir holds the etcd binary; TestMain removes it.
var builtDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		_ = os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// member is one etcd process. Its ports and data directory are fixed, so a
// killed member restarts as itself.
type member struct {
	name      string
	dir       string
	log       string
	clientURL string
	peerURL   string

	// Under cluster.mu.
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has exited
	paused  bool
	started bool // has run once: later starts join the existing cluster
}

// cluster is an etcd cluster of separate processes on loopback whose
// members can be killed (SIGKILL) and restarted on their data, or paused
// (SIGSTOP) and resumed (SIGCONT). Every process is killed when the test
// ends, pass or fail; a failed test keeps each member's log and prints
// where.
type cluster struct {
	t       testing.TB
	bin     string
	mu      sync.Mutex
	members []*member
	initial string
	admin   *clientv3.Client
}

// startCluster starts n members, each a separate etcd process, and waits
// until all serve. A member that could not bind its reserved port (taken
// by another process since it was reserved) makes it start the whole
// cluster again on new ports, up to three times.
func startCluster(t testing.TB, n int) *cluster {
	t.Helper()
	for attempt := 1; ; attempt++ {
		c, err := tryStartCluster(t, n)
		if err == nil {
			return c
		}
		if attempt == 3 || !errors.Is(err, errPortTaken) {
			t.Fatal(err)
		}
		t.Logf("starting the cluster again on new ports: %v", err)
	}
}

// errPortTaken: a member exited while starting because its address was
// in use.
var errPortTaken = errors.New("a member's reserved port was taken")

func tryStartCluster(t testing.TB, n int) (*cluster, error) {
	t.Helper()
	bin, err := etcdBinary()
	if err != nil {
		return nil, err
	}
	c := &cluster{t: t, bin: bin}
	root := t.TempDir()
	var peers []string
	for i := range n {
		name := fmt.Sprintf("m%d", i)
		m := &member{
			name:      name,
			dir:       filepath.Join(root, name),
			log:       filepath.Join(root, name+".log"),
			clientURL: "http://" + reserveAddr(t),
			peerURL:   "http://" + reserveAddr(t),
		}
		c.members = append(c.members, m)
		peers = append(peers, m.name+"="+m.peerURL)
	}
	c.initial = strings.Join(peers, ",")
	// Registered first, so it runs last: after every process is gone.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// The data directory goes with the test; the logs are kept.
		keep, err := os.MkdirTemp("", "graveler-chaos-logs-")
		for _, m := range c.members {
			saved := m.log
			if err == nil {
				if data, rerr := os.ReadFile(m.log); rerr == nil {
					saved = filepath.Join(keep, m.name+".log")
					_ = os.WriteFile(saved, data, 0o644)
				}
			}
			// Only where: a tail of every member's log would push the
			// failure itself out of sight in a CI excerpt.
			t.Logf("etcd %s's log: %s", m.name, saved)
		}
	})
	t.Cleanup(c.killAll)
	for _, m := range c.members {
		if err := c.spawn(m); err != nil {
			return nil, err
		}
	}
	// A new member is ready only once a quorum has formed, so wait for
	// all after starting all.
	for _, m := range c.members {
		if err := c.waitReady(m, time.Minute); err != nil {
			c.killAll()
			if strings.Contains(tail(m.log, 30), "address already in use") {
				return nil, fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return nil, err
		}
	}
	c.admin, err = clientv3.New(clientv3.Config{Endpoints: c.endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = c.admin.Close() })
	return c, nil
}

// spawn starts m's process without waiting for it to serve.
func (c *cluster) spawn(m *member) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.cmd != nil {
		return fmt.Errorf("etcd %s: already running", m.name)
	}
	state := "new"
	if m.started {
		state = "existing"
	}
	logf, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("etcd %s: log: %w", m.name, err)
	}
	defer logf.Close() // the child has its own descriptor
	fmt.Fprintf(logf, "==== %s: start (%s)\n", time.Now().Format(time.RFC3339Nano), state)
	cmd := exec.Command(c.bin,
		"--name", m.name,
		"--data-dir", m.dir,
		"--listen-client-urls", m.clientURL,
		"--advertise-client-urls", m.clientURL,
		"--listen-peer-urls", m.peerURL,
		"--initial-advertise-peer-urls", m.peerURL,
		"--initial-cluster", c.initial,
		"--initial-cluster-token", "graveler-chaos",
		"--initial-cluster-state", state,
		// Fast failure detection: a stopped leader is replaced within
		// about a second.
		"--heartbeat-interval", "50",
		"--election-timeout", "500",
		// SIGKILL loses no written data (the page cache survives the
		// process); only a machine crash would, which is not modelled.
		"--unsafe-no-fsync",
		"--auto-compaction-mode", "periodic",
		"--auto-compaction-retention", "1m",
		"--log-outputs", "stderr",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = childAttrs()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcd %s: start: %w", m.name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	m.cmd, m.exited, m.paused, m.started = cmd, exited, false, true
	return nil
}

// waitReady waits until m answers /health (it has a leader and serves a
// read), or fails early with its log's tail if the process exits.
func (c *cluster) waitReady(m *member, timeout time.Duration) error {
	c.mu.Lock()
	exited := m.exited
	c.mu.Unlock()
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for {
		if exited == nil {
			return fmt.Errorf("etcd %s: not running", m.name)
		}
		select {
		case <-exited:
			return fmt.Errorf("etcd %s: exited while starting; log tail:\n%s", m.name, tail(m.log, 30))
		default:
		}
		resp, err := hc.Get(m.clientURL + "/health")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"health":"true"`) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd %s: not healthy after %s; log tail:\n%s", m.name, timeout, tail(m.log, 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill sends SIGKILL to m (paused or not) and waits for it to exit.
func (c *cluster) kill(m *member) {
	c.mu.Lock()
	cmd, exited := m.cmd, m.exited
	m.cmd, m.exited, m.paused = nil, nil, false
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	// The whole group: etcd starts no children, but nothing may outlive the test.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Process.Kill()
	<-exited
}

// restart starts a killed m again on its data directory and ports and
// waits until it serves.
func (c *cluster) restart(m *member) error {
	if err := c.spawn(m); err != nil {
		return err
	}
	return c.waitReady(m, time.Minute)
}

// pause freezes m with SIGSTOP: its sockets stay open and answer nothing.
func (c *cluster) pause(m *member) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.cmd == nil {
		return fmt.Errorf("etcd %s: not running", m.name)
	}
	if err := m.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("etcd %s: SIGSTOP: %w", m.name, err)
	}
	m.paused = true
	return nil
}

// resume continues a paused m and waits until it serves again.
func (c *cluster) resume(m *member) error {
	c.mu.Lock()
	if m.cmd == nil {
		c.mu.Unlock()
		return fmt.Errorf("etcd %s: not running", m.name)
	}
	err := m.cmd.Process.Signal(syscall.SIGCONT)
	m.paused = false
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("etcd %s: SIGCONT: %w", m.name, err)
	}
	return c.waitReady(m, time.Minute)
}

func (c *cluster) killAll() {
	for _, m := range c.members {
		c.kill(m)
	}
}

// running returns the members that are up and not paused.
func (c *cluster) running() []*member {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*member
	for _, m := range c.members {
		if m.cmd != nil && !m.paused {
			out = append(out, m)
		}
	}
	return out
}

// leader asks each running member for its status and returns the one that
// reports itself leader, or nil.
func (c *cluster) leader() *member {
	for _, m := range c.running() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := c.admin.Status(ctx, m.clientURL)
		cancel()
		if err == nil && st.Leader != 0 && st.Leader == st.Header.GetMemberId() {
			return m
		}
	}
	return nil
}

// waitLeader polls for a leader for up to timeout.
func (c *cluster) waitLeader(timeout time.Duration) (*member, error) {
	deadline := time.Now().Add(timeout)
	for {
		if m := c.leader(); m != nil {
			return m, nil
		}
		if time.Now().After(deadline) {
			return nil, errors.New("etcd: no leader")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// follower returns a running member other than the leader (pick chooses
// among them), or nil.
func (c *cluster) follower(pick func(n int) int) *member {
	l := c.leader()
	if l == nil {
		return nil
	}
	var fs []*member
	for _, m := range c.running() {
		if m != l {
			fs = append(fs, m)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	return fs[pick(len(fs))]
}

func (c *cluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientURL)
	}
	return eps
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > 2*n {
			lines = lines[len(lines)-n:]
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
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
