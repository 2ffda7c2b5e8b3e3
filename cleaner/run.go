package cleaner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"graveler/internal/ctxtime"
	"graveler/kv"
)

// Elector chooses one leader among cleaner replicas.
type Elector interface {
	// Campaign blocks until this process leads, or ctx ends. The returned
	// context ends when leadership is lost (or ctx ends); resign gives
	// leadership up and releases everything Campaign took.
	Campaign(ctx context.Context) (lead context.Context, resign func(), err error)
}

// EtcdElector elects through an etcd lease and election key
// (go.etcd.io/etcd/client/v3/concurrency). A leader that stops renewing
// its lease (crash, partition) loses leadership after the lease TTL.
type EtcdElector struct {
	cli *clientv3.Client
	key string
	id  string
	ttl int
}

var _ Elector = (*EtcdElector)(nil)

// MaxElectionTTL is the longest lease etcd grants, in seconds (its
// server's lease.MaxLeaseTTL): an EtcdElector asking for a longer one is
// refused with ErrElectionRefused.
const MaxElectionTTL = 9_000_000_000

// ErrElectionRefused: etcd refuses the election for a reason no retry
// changes (the lease's TTL is over MaxElectionTTL), so Run stops.
var ErrElectionRefused = errors.New("cleaner: election refused")

// NewEtcdElector campaigns under key (ElectionKey(root) by convention) as
// id, with a lease of ttlSeconds (default 15; at most MaxElectionTTL).
func NewEtcdElector(cli *clientv3.Client, key, id string, ttlSeconds int) *EtcdElector {
	if ttlSeconds <= 0 {
		ttlSeconds = 15
	}
	return &EtcdElector{cli: cli, key: key, id: id, ttl: ttlSeconds}
}

// ElectionKey is the election prefix under an etcd root prefix. It lies
// outside every kv partition the sweep lists (repo/, staging/).
func ElectionKey(root string) string { return trimSlash(root) + "/cleaner_election/" }

func trimSlash(s string) string {
	for len(s) > 0 && s[len(s)-1] == '/' {
		s = s[:len(s)-1]
	}
	return s
}

func (e *EtcdElector) Campaign(ctx context.Context) (context.Context, func(), error) {
	// The session outlives ctx so that resign can still revoke its lease
	// (handing over at once instead of after the TTL); resign closes it.
	s, err := concurrency.NewSession(e.cli, concurrency.WithTTL(e.ttl), concurrency.WithContext(context.WithoutCancel(ctx)))
	if errors.Is(err, rpctypes.ErrLeaseTTLTooLarge) {
		return nil, nil, fmt.Errorf("%w: etcd grants no lease of %d seconds (at most %d): %w", ErrElectionRefused, e.ttl, int64(MaxElectionTTL), err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("cleaner: election session: %w", noSpace(err))
	}
	el := concurrency.NewElection(s, e.key)
	if err := el.Campaign(ctx, e.id); err != nil {
		_ = s.Close()
		return nil, nil, fmt.Errorf("cleaner: campaign: %w", noSpace(err))
	}
	lead, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.Done(): // lease lost
		case <-lead.Done():
		}
		cancel()
	}()
	resign := func() {
		cancel()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer rcancel()
		_ = el.Resign(rctx)
		_ = s.Close()
	}
	return lead, resign, nil
}

// Run makes a pass every Config.Interval while this process leads, until
// ctx ends; it returns nil then. When the election fails because etcd is
// out of space (kv.ErrQuotaExceeded), it makes passes without leading. Failed passes are logged and counted, and
// the next one comes at the next interval. A failed election is retried,
// unless it wraps ErrElectionRefused: Run returns that error, since
// retrying would wait for ever on what only a new configuration changes.
func (c *Cleaner) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		lead, resign := ctx, func() {}
		if c.cfg.Elector != nil {
			l, r, err := c.cfg.Elector.Campaign(ctx)
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				if errors.Is(err, ErrElectionRefused) {
					return err
				}
				if errors.Is(err, kv.ErrQuotaExceeded) {
					// Under NOSPACE etcd grants no lease, so nobody can be
					// elected, yet it still serves the reads and deletes a
					// pass needs to free space. Overlapping passes are safe
					// while etcd refuses writes (no create can claim a
					// released namespace; package doc), so every replica
					// makes them until the alarm ends.
					c.log.Warn("cleaner: etcd is out of space (NOSPACE): no election possible; making a pass without leadership to free space", zap.Error(err))
					_, _ = c.RunOnce(ctx)
					if !ctxtime.Sleep(ctx, c.cfg.Interval) {
						break
					}
					continue
				}
				c.log.Warn("cleaner: election failed; retrying", zap.Error(err))
				if !ctxtime.Sleep(ctx, min(c.cfg.Interval, 5*time.Second)) {
					break
				}
				continue
			}
			lead, resign = l, r
			c.log.Info("cleaner: leading")
		}
		leader.Set(1)
		c.lead(lead)
		leader.Set(0)
		resign()
		if c.cfg.Elector != nil && ctx.Err() == nil {
			c.log.Warn("cleaner: lost leadership")
		}
	}
	return nil
}

// lead runs passes until lead ends.
func (c *Cleaner) lead(lead context.Context) {
	for {
		_, _ = c.RunOnce(lead) // logged and counted by RunOnce
		if !ctxtime.Sleep(lead, c.cfg.Interval) {
			return
		}
	}
}

// noSpace marks etcd's NOSPACE (a lease or an election key refused for
// space) as kv.ErrQuotaExceeded.
func noSpace(err error) error {
	if errors.Is(err, rpctypes.ErrNoSpace) || errors.Is(err, rpctypes.ErrGRPCNoSpace) {
		return fmt.Errorf("%w: %w", kv.ErrQuotaExceeded, err)
	}
	return err
}
