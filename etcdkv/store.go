package etcdkv

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"graveler/kv"
)

// DefaultPrefix is the root under which every partition lives.
const DefaultPrefix = "/graveler"

// TLSConfig names PEM files for the client's TLS.
type TLSConfig struct {
	CAFile   string
	CertFile string
	KeyFile  string
}

func (t TLSConfig) enabled() bool { return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" }

// Config configures a Store.
type Config struct {
	Endpoints   []string
	DialTimeout time.Duration // default 5s
	Username    string
	Password    string
	TLS         TLSConfig
	// Prefix is the root of every key (default DefaultPrefix).
	Prefix string
	// Limits bound keys and values (default kv.DefaultLimits).
	Limits kv.Limits
	// ScanPageSize is the page size of the paged fallback scan (default 1000).
	ScanPageSize int
	// SettleAttempts bounds the re-sends that settle an ambiguous write (default 5).
	SettleAttempts int
	// SettleTimeout bounds each settling attempt (default 2s).
	SettleTimeout time.Duration
	Logger        *zap.Logger
}

func (c *Config) defaults() error {
	if c.DialTimeout == 0 {
		c.DialTimeout = 5 * time.Second
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	c.Prefix = strings.TrimRight(c.Prefix, "/")
	if c.Prefix == "" || !strings.HasPrefix(c.Prefix, "/") {
		return fmt.Errorf("etcdkv: prefix %q must start with '/' and not be just '/'", c.Prefix)
	}
	if c.Limits == (kv.Limits{}) {
		c.Limits = kv.DefaultLimits
	}
	if c.ScanPageSize <= 0 {
		c.ScanPageSize = 1000
	}
	if c.SettleAttempts <= 0 {
		c.SettleAttempts = 5
	}
	if c.SettleTimeout <= 0 {
		c.SettleTimeout = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return nil
}

// Store is kv.Store on etcd.
type Store struct {
	cli     *clientv3.Client
	ownsCli bool
	cfg     Config
	closed  atomic.Bool
	// noStream is set once a server answers RangeStream with Unimplemented.
	noStream atomic.Bool
}

var (
	_ kv.Store            = (*Store)(nil)
	_ kv.PartitionDropper = (*Store)(nil)
	_ kv.SetReader        = (*Store)(nil)
	_ kv.MultiGetter      = (*Store)(nil)
)

// New dials etcd and returns a Store that owns the client.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcdkv: no endpoints")
	}
	cc := clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		Username:    cfg.Username,
		Password:    cfg.Password,
		Context:     ctx,
		Logger:      cfg.Logger.Named("etcd-client"),
		// A request larger than the server accepts fails clearly on our side.
		MaxCallSendMsgSize: 2 << 20,
		MaxCallRecvMsgSize: 64 << 20,
	}
	if cfg.TLS.enabled() {
		info := transport.TLSInfo{TrustedCAFile: cfg.TLS.CAFile, CertFile: cfg.TLS.CertFile, KeyFile: cfg.TLS.KeyFile}
		tc, err := info.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcdkv: tls: %w", err)
		}
		tc.MinVersion = tls.VersionTLS12
		cc.TLS = tc
	}
	cli, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("etcdkv: dial %v: %w", cfg.Endpoints, err)
	}
	s := &Store{cli: cli, ownsCli: true, cfg: cfg}
	return s, nil
}

// NewFromClient returns a Store on an existing client; Close leaves the client open.
func NewFromClient(cli *clientv3.Client, cfg Config) (*Store, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Store{cli: cli, cfg: cfg}, nil
}

// Client returns the underlying etcd client (for health checks and
// leader election, which need more than kv.Store).
func (s *Store) Client() *clientv3.Client { return s.cli }

// Prefix returns the root prefix, without a trailing '/'.
func (s *Store) Prefix() string { return s.cfg.Prefix }

// Ping checks that the cluster answers a linearizable read.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.cli.Get(ctx, s.cfg.Prefix+"/", clientv3.WithCountOnly())
	if err != nil {
		return readErr(ctx, "ping", err)
	}
	return nil
}

func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.ownsCli {
		return s.cli.Close()
	}
	return nil
}

// partitionPrefix is <root>/<partition>/.
func (s *Store) partitionPrefix(partition []byte) string {
	return s.cfg.Prefix + "/" + string(partition) + "/"
}

func (s *Store) etcdKey(partition, key []byte) string {
	return s.partitionPrefix(partition) + string(key)
}

func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return kv.ErrClosed
	}
	return nil
}

func (s *Store) Get(ctx context.Context, partition, key []byte) ([]byte, kv.Predicate, error) {
	start := time.Now()
	v, p, err := s.get(ctx, partition, key)
	observe("get", start, err)
	return v, p, err
}

func (s *Store) get(ctx context.Context, partition, key []byte) ([]byte, kv.Predicate, error) {
	if err := s.checkOpen(); err != nil {
		return nil, kv.Absent, err
	}
	if err := s.cfg.Limits.CheckKey(partition, key); err != nil {
		return nil, kv.Absent, err
	}
	resp, err := s.cli.Get(ctx, s.etcdKey(partition, key))
	if err != nil {
		return nil, kv.Absent, readErr(ctx, fmt.Sprintf("get %q in partition %q", key, partition), err)
	}
	if len(resp.Kvs) == 0 {
		return nil, kv.Absent, fmt.Errorf("%w: %q in partition %q", kv.ErrNotFound, key, partition)
	}
	return resp.Kvs[0].Value, kv.NewPredicate(resp.Kvs[0].ModRevision), nil
}

func (s *Store) Set(ctx context.Context, partition, key, value []byte) error {
	start := time.Now()
	err := s.set(ctx, partition, key, value)
	observe("set", start, err)
	return err
}

func (s *Store) set(ctx context.Context, partition, key, value []byte) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := s.cfg.Limits.CheckWrite(partition, key, value); err != nil {
		return err
	}
	k := s.etcdKey(partition, key)
	_, err := s.cli.Put(ctx, k, string(value))
	if err == nil {
		return nil
	}
	what := fmt.Sprintf("set %q in partition %q", key, partition)
	if !maybeApplied(ctx, err) {
		return writeErr(ctx, what, err)
	}
	// A Put is idempotent: re-sending it settles the outcome.
	return s.settle(ctx, what, err, func(c context.Context) (bool, error) {
		_, err := s.cli.Put(c, k, string(value))
		return err == nil, err
	})
}

// SetAndRead is one transaction: the puts, then a range read of each key,
// all at the puts' revision. Puts are idempotent, so an ambiguous first
// attempt is settled by sending the same transaction again; its reads are
// then at the later revision, still after the puts of these values.
func (s *Store) SetAndRead(ctx context.Context, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, error) {
	start := time.Now()
	out, err := s.setAndRead(ctx, writes, reads)
	observe("set_and_read", start, err)
	return out, err
}

func (s *Store) setAndRead(ctx context.Context, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := kv.CheckSetAndRead(writes, reads); err != nil {
		return nil, err
	}
	ops := make([]clientv3.Op, 0, len(writes)+len(reads))
	for _, w := range writes {
		if err := s.cfg.Limits.CheckWrite(w.Partition, w.Key, w.Value); err != nil {
			return nil, err
		}
		ops = append(ops, clientv3.OpPut(s.etcdKey(w.Partition, w.Key), string(w.Value)))
	}
	ops, err := s.appendReadOps(ops, reads)
	if err != nil {
		return nil, err
	}
	var resp *clientv3.TxnResponse
	send := func(c context.Context) error {
		var err error
		resp, err = s.cli.Txn(c).Then(ops...).Commit()
		return err
	}
	if err := send(ctx); err != nil {
		what := fmt.Sprintf("set %d keys (first %q in partition %q) and read %d", len(writes), writes[0].Key, writes[0].Partition, len(reads))
		if !maybeApplied(ctx, err) {
			return nil, writeErr(ctx, what, err)
		}
		if err := s.settle(ctx, what, err, func(c context.Context) (bool, error) {
			err := send(c)
			return err == nil, err
		}); err != nil {
			return nil, err
		}
	}
	if len(resp.Responses) != len(ops) {
		return nil, fmt.Errorf("etcdkv: set and read: %d responses to %d operations", len(resp.Responses), len(ops))
	}
	return readEntries(reads, resp.Responses[len(writes):]), nil
}

// GetMany is one read-only transaction: linearizable, every key at one
// revision.
func (s *Store) GetMany(ctx context.Context, reads []kv.KeyRef) ([]kv.Entry, error) {
	start := time.Now()
	out, err := s.getMany(ctx, reads)
	observe("get_many", start, err)
	return out, err
}

func (s *Store) getMany(ctx context.Context, reads []kv.KeyRef) ([]kv.Entry, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := kv.CheckGetMany(reads); err != nil {
		return nil, err
	}
	ops, err := s.appendReadOps(make([]clientv3.Op, 0, len(reads)), reads)
	if err != nil {
		return nil, err
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, readErr(ctx, fmt.Sprintf("get %d keys (first %q in partition %q)", len(reads), reads[0].Key, reads[0].Partition), err)
	}
	if len(resp.Responses) != len(ops) {
		return nil, fmt.Errorf("etcdkv: get many: %d responses to %d reads", len(resp.Responses), len(ops))
	}
	return readEntries(reads, resp.Responses), nil
}

// appendReadOps checks reads and appends a range read of each to ops.
func (s *Store) appendReadOps(ops []clientv3.Op, reads []kv.KeyRef) ([]clientv3.Op, error) {
	for _, r := range reads {
		if err := s.cfg.Limits.CheckKey(r.Partition, r.Key); err != nil {
			return nil, err
		}
		ops = append(ops, clientv3.OpGet(s.etcdKey(r.Partition, r.Key)))
	}
	return ops, nil
}

// readEntries turns the responses of appendReadOps' reads into entries,
// Absent when a key is missing.
func readEntries(reads []kv.KeyRef, responses []*etcdserverpb.ResponseOp) []kv.Entry {
	out := make([]kv.Entry, len(reads))
	for i, r := range reads {
		out[i] = kv.Entry{Key: append([]byte(nil), r.Key...)}
		if rr := responses[i].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
			out[i].Value, out[i].Predicate = rr.Kvs[0].Value, kv.NewPredicate(rr.Kvs[0].ModRevision)
		}
	}
	return out
}

func (s *Store) SetIf(ctx context.Context, partition, key, value []byte, pred kv.Predicate) error {
	start := time.Now()
	err := s.setIf(ctx, partition, key, value, pred)
	observe("setif", start, err)
	return err
}

func (s *Store) guard(k string, pred kv.Predicate) clientv3.Cmp {
	if pred.IsAbsent() {
		return clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
	}
	return clientv3.Compare(clientv3.ModRevision(k), "=", pred.Version())
}

func (s *Store) setIf(ctx context.Context, partition, key, value []byte, pred kv.Predicate) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := s.cfg.Limits.CheckWrite(partition, key, value); err != nil {
		return err
	}
	k := s.etcdKey(partition, key)
	what := fmt.Sprintf("setif %q in partition %q", key, partition)
	failed := func() error {
		return fmt.Errorf("%w: %q in partition %q changed since %v", kv.ErrPredicateFailed, key, partition, pred)
	}
	resp, err := s.cli.Txn(ctx).If(s.guard(k, pred)).Then(clientv3.OpPut(k, string(value))).Commit()
	if err == nil {
		if !resp.Succeeded {
			return failed()
		}
		return nil
	}
	if !maybeApplied(ctx, err) {
		return writeErr(ctx, what, err)
	}
	return s.settleSetIf(ctx, k, value, pred, what, err, failed)
}

// settleSetIf decides the outcome of a SetIf whose first attempt failed with
// firstErr after it may have been applied: it re-sends the same guarded Txn,
// reading the key when the guard fails.
func (s *Store) settleSetIf(ctx context.Context, k string, value []byte, pred kv.Predicate, what string, firstErr error, failed func() error) error {
	var lost bool
	serr := s.settle(ctx, what, firstErr, func(c context.Context) (bool, error) {
		resp, err := s.cli.Txn(c).If(s.guard(k, pred)).
			Then(clientv3.OpPut(k, string(value))).
			Else(clientv3.OpGet(k)).Commit()
		if err != nil {
			return false, err
		}
		if resp.Succeeded {
			return true, nil
		}
		var cur *mvccpb.KeyValue
		if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
			cur = rr.Kvs[0]
		}
		if cur != nil && cur.ModRevision != pred.Version() && bytes.Equal(cur.Value, value) {
			return true, nil // the first attempt had applied
		}
		lost = true
		return true, nil
	})
	if serr != nil {
		return serr
	}
	if lost {
		return failed()
	}
	return nil
}

func (s *Store) Delete(ctx context.Context, partition, key []byte) error {
	start := time.Now()
	err := s.delete(ctx, partition, key)
	observe("delete", start, err)
	return err
}

func (s *Store) delete(ctx context.Context, partition, key []byte) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := s.cfg.Limits.CheckKey(partition, key); err != nil {
		return err
	}
	k := s.etcdKey(partition, key)
	_, err := s.cli.Delete(ctx, k)
	if err == nil {
		return nil
	}
	what := fmt.Sprintf("delete %q in partition %q", key, partition)
	if !maybeApplied(ctx, err) {
		return writeErr(ctx, what, err)
	}
	return s.settle(ctx, what, err, func(c context.Context) (bool, error) {
		_, err := s.cli.Delete(c, k)
		return err == nil, err
	})
}

func (s *Store) DeleteIf(ctx context.Context, partition, key []byte, pred kv.Predicate) error {
	start := time.Now()
	err := s.deleteIf(ctx, partition, key, pred)
	observe("deleteif", start, err)
	return err
}

func (s *Store) deleteIf(ctx context.Context, partition, key []byte, pred kv.Predicate) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := s.cfg.Limits.CheckKey(partition, key); err != nil {
		return err
	}
	k := s.etcdKey(partition, key)
	failed := func() error {
		return fmt.Errorf("%w: delete %q in partition %q: changed since %v", kv.ErrPredicateFailed, key, partition, pred)
	}
	if pred.IsAbsent() {
		// Nothing to delete: succeed only if it is still missing.
		resp, err := s.cli.Get(ctx, k, clientv3.WithCountOnly())
		if err != nil {
			return readErr(ctx, fmt.Sprintf("deleteif %q in partition %q", key, partition), err)
		}
		if resp.Count != 0 {
			return failed()
		}
		return nil
	}
	resp, err := s.cli.Txn(ctx).If(s.guard(k, pred)).Then(clientv3.OpDelete(k)).Commit()
	if err == nil {
		if !resp.Succeeded {
			return failed()
		}
		return nil
	}
	what := fmt.Sprintf("deleteif %q in partition %q", key, partition)
	if !maybeApplied(ctx, err) {
		return writeErr(ctx, what, err)
	}
	return s.settle(ctx, what, err, func(c context.Context) (bool, error) {
		resp, err := s.cli.Txn(c).If(s.guard(k, pred)).Then(clientv3.OpDelete(k)).Commit()
		if err != nil {
			return false, err
		}
		_ = resp // placeholder: settled from the key's history by the kv work below
		return true, nil
	})
}

// settle re-runs attempt, which reports whether the outcome is known, with
// jittered backoff, within the caller's context.
func (s *Store) settle(ctx context.Context, what string, first error, attempt func(context.Context) (bool, error)) error {
	settleAttempts.Inc()
	backoff := 20 * time.Millisecond
	last := first
	for i := 0; i < s.cfg.SettleAttempts; i++ {
		if ctx.Err() != nil {
			break
		}
		c, cancel := context.WithTimeout(ctx, s.cfg.SettleTimeout)
		known, err := attempt(c)
		cancel()
		if known {
			s.cfg.Logger.Debug("settled ambiguous write", zap.String("op", what), zap.Int("attempt", i+1), zap.NamedError("first_error", first))
			return nil
		}
		last = err
		if !maybeApplied(ctx, err) {
			// A definite failure now says nothing of the first attempt.
			break
		}
		d := backoff + time.Duration(rand.Int64N(int64(backoff)))
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		backoff *= 2
	}
	ambiguousWrites.Inc()
	if ctx.Err() != nil {
		return fmt.Errorf("etcdkv: %s: %w", what, errors.Join(kv.ErrAmbiguous, ctx.Err()))
	}
	return fmt.Errorf("%w: etcdkv: %s: %v", kv.ErrAmbiguous, what, last)
}

// maybeApplied reports whether err leaves a write's outcome unknown.
func maybeApplied(ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, rpctypes.ErrNoSpace) || errors.Is(err, rpctypes.ErrGRPCNoSpace) ||
		errors.Is(err, rpctypes.ErrRequestTooLarge) || errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) ||
		errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrGRPCTooManyOps) ||
		errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrAuthFailed) ||
		errors.Is(err, rpctypes.ErrInvalidAuthToken) {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Aborted, codes.Internal:
		return true
	}
	return errors.Is(err, rpctypes.ErrTimeout) || errors.Is(err, rpctypes.ErrLeaderChanged) ||
		errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) ||
		errors.Is(err, rpctypes.ErrTimeoutDueToConnectionLost)
}

// writeErr maps a write error whose outcome is known (not applied).
func writeErr(ctx context.Context, what string, err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrNoSpace), errors.Is(err, rpctypes.ErrGRPCNoSpace):
		return fmt.Errorf("%w: etcdkv: %s: %v", kv.ErrQuotaExceeded, what, err)
	case errors.Is(err, rpctypes.ErrRequestTooLarge), errors.Is(err, rpctypes.ErrGRPCRequestTooLarge):
		return fmt.Errorf("%w: etcdkv: %s: the server refused the request size: %v", kv.ErrValueTooLarge, what, err)
	case errors.Is(err, rpctypes.ErrTooManyOps), errors.Is(err, rpctypes.ErrGRPCTooManyOps):
		return fmt.Errorf("%w: etcdkv: %s: too many operations in one transaction: %v", kv.ErrValueTooLarge, what, err)
	}
	return readErr(ctx, what, err)
}

// readErr maps an error of an operation that changed nothing.
func readErr(ctx context.Context, what string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("etcdkv: %s: %w", what, cerr)
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return fmt.Errorf("%w: etcdkv: %s: %v", kv.ErrUnavailable, what, err)
	}
	if errors.Is(err, rpctypes.ErrTimeout) || errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrLeaderChanged) {
		return fmt.Errorf("%w: etcdkv: %s: %v", kv.ErrUnavailable, what, err)
	}
	return fmt.Errorf("etcdkv: %s: %w", what, err)
}
