package etcdkv

import (
	"context"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// memberGuard keeps requests off members that stop answering. gRPC's
// round-robin balancer keeps picking a member whose connection is open
// but silent (a stopped process, a hung host); keepalive notices it only
// after the ping interval, which gRPC raises to at least 10s, and until
// then every request sent there waits out its attempt timeout before it
// is sent again elsewhere. So when an attempt times out, the guard asks
// every member for its status, each over a connection of its own, and
// takes those that do not answer within the request timeout, or answer
// without knowing a leader, out of the client's endpoints; it asks them
// again every probe interval and puts each back once it answers. It never
// takes out every member: when none answers, the cluster is down, not one
// member, and the endpoints stay as configured.
type memberGuard struct {
	cli      *clientv3.Client
	all      []string
	timeout  time.Duration
	interval time.Duration
	log      *zap.Logger

	mu      sync.Mutex
	running bool
	closed  bool
	out     []string // members taken out, in configured order
	stop    chan struct{}
	wg      sync.WaitGroup
}

// memberProbeInterval is how often members taken out are asked again.
const memberProbeInterval = time.Second

func newMemberGuard(cli *clientv3.Client, cfg Config) *memberGuard {
	timeout := cfg.RequestTimeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	return &memberGuard{
		cli: cli, all: slices.Clone(cfg.Endpoints), timeout: timeout, interval: memberProbeInterval,
		log: cfg.Logger, stop: make(chan struct{}),
	}
}

// suspect starts a round of probes unless one is running.
func (g *memberGuard) suspect() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running || g.closed {
		return
	}
	g.running = true
	g.wg.Go(g.run)
}

// run probes every member until all of them answer again.
func (g *memberGuard) run() {
	defer func() {
		g.mu.Lock()
		g.running = false
		g.mu.Unlock()
	}()
	for {
		answering := g.probeAll()
		var in, out []string
		if len(answering) == 0 {
			in = g.all
		} else {
			for _, ep := range g.all {
				if answering[ep] {
					in = append(in, ep)
				} else {
					out = append(out, ep)
				}
			}
		}
		g.mu.Lock()
		changed := !slices.Equal(out, g.out)
		closed := g.closed
		g.mu.Unlock()
		if closed {
			return
		}
		if changed {
			// The balancer has dropped or added the members when
			// SetEndpoints returns; out is published only then.
			g.cli.SetEndpoints(in...)
			g.mu.Lock()
			g.out = out
			g.mu.Unlock()
			membersOut.Set(float64(len(out)))
			g.log.Warn("etcd members not answering are taken out of the client's endpoints until they answer",
				zap.Strings("out", out), zap.Strings("in", in))
		}
		if len(out) == 0 {
			return
		}
		select {
		case <-time.After(g.interval):
		case <-g.stop:
			return
		}
	}
}

// probeAll asks every member for its status at once.
func (g *memberGuard) probeAll() map[string]bool {
	answering := make(map[string]bool, len(g.all))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, ep := range g.all {
		wg.Go(func() {
			ok := g.probe(ep)
			mu.Lock()
			answering[ep] = ok
			mu.Unlock()
		})
	}
	wg.Wait()
	for ep, ok := range answering {
		if !ok {
			delete(answering, ep)
		}
	}
	return answering
}

func (g *memberGuard) probe(ep string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	go func() {
		select {
		case <-g.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	resp, err := g.cli.Status(ctx, ep)
	return err == nil && resp.Leader != 0
}

// close stops probing and waits for a running round to end.
func (g *memberGuard) close() {
	if g == nil {
		return
	}
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		close(g.stop)
	}
	g.mu.Unlock()
	g.wg.Wait()
}

// outForTest lists the members taken out.
func (g *memberGuard) outForTest() []string {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.out)
}
