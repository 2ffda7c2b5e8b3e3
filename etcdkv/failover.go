package etcdkv

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// memberGuard keeps requests off members that stop answering. gRPC's
// round-robin balancer keeps picking a member whose connection is open
// but silent (a stopped process, a hung host); keepalive notices it only
// after the ping interval, which gRPC raises to at least 10s, and until
// then every request sent there waits out its attempt timeout before it
// is sent again elsewhere. So when an attempt times out, the guard makes
// a linearizable read through every member, each over a connection of
// its own, and takes those that do not answer within the probe timeout
// out of the client's endpoints; it probes them again every probe
// interval and puts each back once it answers. It never takes out every
// member: when none answers, the cluster is down, not one member, and the
// endpoints stay as configured.
//
// The probe is a linearizable read, not a status request, because a
// member can answer status while it cannot serve reads: a leader resumed
// after a stop steps down at once but waits seconds for its read index,
// and every request sent to it meanwhile would time out. The probe
// timeout is a fraction of the request timeout, so a stopped member is
// out within about one request timeout plus one probe.
type memberGuard struct {
	cli      *clientv3.Client
	all      []string
	probeKey string
	timeout  time.Duration
	interval time.Duration
	log      *zap.Logger

	connsMu sync.Mutex
	conns   map[string]*grpc.ClientConn // one per member, for probes

	mu      sync.Mutex
	running bool
	decided chan struct{} // closed once the running round has decided
	closed  bool
	out     []string // members taken out, in configured order
	stop    chan struct{}
	wg      sync.WaitGroup
}

// memberProbeInterval is how often members taken out are asked again.
const memberProbeInterval = time.Second

// probeTimeout bounds one probe: a fraction of the request timeout (a
// healthy member answers a read in milliseconds), within bounds.
func probeTimeout(requestTimeout time.Duration) time.Duration {
	if requestTimeout <= 0 {
		requestTimeout = DefaultRequestTimeout
	}
	return min(max(requestTimeout/4, 100*time.Millisecond), time.Second)
}

func newMemberGuard(cli *clientv3.Client, cfg Config) *memberGuard {
	return &memberGuard{
		cli: cli, all: slices.Clone(cfg.Endpoints), timeout: probeTimeout(cfg.RequestTimeout), interval: memberProbeInterval,
		// Under the store's own prefix, which every role that uses the
		// store may read when etcd authorization is on.
		probeKey: cfg.Prefix + "/",
		log:      cfg.Logger, stop: make(chan struct{}), conns: map[string]*grpc.ClientConn{},
	}
}

// suspect starts a round of probes unless one is running, and waits
// (at most about one probe timeout) for the round's first decision, so
// that the caller's next attempt goes to the members that answered, not
// back to the one that just failed to.
func (g *memberGuard) suspect() {
	if g == nil {
		return
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	if !g.running {
		g.running = true
		g.decided = make(chan struct{})
		g.wg.Go(g.run)
	}
	decided := g.decided
	g.mu.Unlock()
	t := time.NewTimer(g.timeout + 100*time.Millisecond)
	defer t.Stop()
	select {
	case <-decided:
	case <-t.C:
	case <-g.stop:
	}
}

// run probes every member until all of them answer again.
func (g *memberGuard) run() {
	g.mu.Lock()
	decided := g.decided
	g.mu.Unlock()
	var once sync.Once
	announce := func() { once.Do(func() { close(decided) }) }
	defer func() {
		announce()
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
		announce()
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
	conn, err := g.conn(ep)
	if err != nil {
		return false
	}
	// Limit 1 and keys only: the read costs the member nothing but its
	// read index, which is what must work.
	_, err = etcdserverpb.NewKVClient(conn).Range(ctx, &etcdserverpb.RangeRequest{
		Key: []byte(g.probeKey), Limit: 1, KeysOnly: true,
	})
	return err == nil
}

// conn returns the probe connection to ep, dialling it once.
func (g *memberGuard) conn(ep string) (*grpc.ClientConn, error) {
	g.connsMu.Lock()
	defer g.connsMu.Unlock()
	if c, ok := g.conns[ep]; ok {
		return c, nil
	}
	c, err := g.cli.Dial(ep)
	if err != nil {
		return nil, err
	}
	g.conns[ep] = c
	return c, nil
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
	g.connsMu.Lock()
	for _, c := range g.conns {
		c.Close()
	}
	g.conns = nil
	g.connsMu.Unlock()
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
