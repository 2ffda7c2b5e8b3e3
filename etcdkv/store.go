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

	"graveler/internal/ctxtime"
	"graveler/kv"
)

// DefaultPrefix is the root under which every partition lives.
const DefaultPrefix = "/graveler"

// Defaults of Config's request bounds.
const (
	DefaultRequestTimeout       = 2 * time.Second
	DefaultDialKeepAliveTime    = 10 * time.Second
	DefaultDialKeepAliveTimeout = time.Second
)

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
	// DialKeepAliveTime is how long a connection with requests in flight
	// may stay silent before the client pings the member (default 10s,
	// the least gRPC allows: it raises smaller values to 10s; negative:
	// no pings). With DialKeepAliveTimeout it bounds how long a
	// connection to a stopped member (SIGSTOP, a hung host: the
	// connection stays open, nothing answers) is kept before it is
	// closed. RequestTimeout, much shorter, bounds each request meanwhile,
	// and members that stop answering are taken out of the rotation
	// until they answer again (see the package doc).
	DialKeepAliveTime time.Duration
	// DialKeepAliveTimeout is how long a ping may go unanswered before the
	// connection is closed (default 1s).
	DialKeepAliveTimeout time.Duration
	// RequestTimeout bounds each attempt of one etcd request, below the
	// caller's deadline (default 2s; negative: only the caller's
	// deadline). A read whose attempt runs out is sent again, up to
	// three attempts, so that it can reach a healthy member; a write
	// whose attempt runs out is settled like any other write whose
	// outcome is unknown, never sent again blindly. Each page or chunk of
	// a scan or a partition drop is one attempt.
	RequestTimeout time.Duration
	Logger         *zap.Logger
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
	if c.DialKeepAliveTime == 0 {
		c.DialKeepAliveTime = DefaultDialKeepAliveTime
	}
	if c.DialKeepAliveTimeout <= 0 {
		c.DialKeepAliveTimeout = DefaultDialKeepAliveTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
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
	// maxRev is the highest revision named by a response header this
	// store has seen: a write sent after reading it is applied, if at
	// all, at a later revision, which bounds the history that settling
	// an ambiguous create must search.
	maxRev atomic.Int64
	// members takes members that stop answering out of the endpoints (nil
	// with a single endpoint or a client the store did not dial).
	members *memberGuard
	// fence keeps write attempts whose answers were lost from applying
	// later (fence.go).
	fence *fence
}

var (
	_ kv.Store            = (*Store)(nil)
	_ kv.PartitionDropper = (*Store)(nil)
	_ kv.SetReader        = (*Store)(nil)
	_ kv.MultiGetter      = (*Store)(nil)
	_ kv.CondWriter       = (*Store)(nil)
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
		Logger:      clientLogger(cfg.Logger),
		// A request larger than the server accepts fails clearly on our side.
		MaxCallSendMsgSize: 2 << 20,
		MaxCallRecvMsgSize: 64 << 20,
	}
	if cfg.DialKeepAliveTime > 0 {
		// Pings only while requests are in flight, the time a silent
		// member costs something: etcd refuses pings on idle
		// connections (its enforcement policy does not permit them
		// without streams) by closing the connection after three.
		cc.DialKeepAliveTime, cc.DialKeepAliveTimeout = cfg.DialKeepAliveTime, cfg.DialKeepAliveTimeout
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
	s := &Store{cli: cli, ownsCli: true, cfg: cfg, fence: newFence(cfg.Prefix)}
	if len(cfg.Endpoints) > 1 {
		s.members = newMemberGuard(cli, cfg)
	}
	return s, nil
}

// NewFromClient returns a Store on an existing client; Close leaves the client open.
func NewFromClient(cli *clientv3.Client, cfg Config) (*Store, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Store{cli: cli, cfg: cfg, fence: newFence(cfg.Prefix)}, nil
}

// Client returns the underlying etcd client (for health checks and
// leader election, which need more than kv.Store).
func (s *Store) Client() *clientv3.Client { return s.cli }

// Prefix returns the root prefix, without a trailing '/'.
func (s *Store) Prefix() string { return s.cfg.Prefix }

// Ping checks that the cluster answers a linearizable read.
func (s *Store) Ping(ctx context.Context) error {
	err := s.read(ctx, func(c context.Context) error {
		resp, err := s.cli.Get(c, s.cfg.Prefix+"/", clientv3.WithCountOnly())
		if err == nil {
			s.saw(resp.Header)
		}
		return err
	})
	if err != nil {
		return readErr(ctx, "ping", err)
	}
	return nil
}

func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.members.close()
	s.closeFence()
	if s.ownsCli {
		return s.cli.Close()
	}
	return nil
}

func (s *Store) partitionPrefix(partition []byte) string { return s.RawPrefix(partition) }

func (s *Store) etcdKey(partition, key []byte) string { return s.RawKey(partition, key) }

func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return kv.ErrClosed
	}
	return nil
}

// checkWrite is what every write checks before sending: a write whose
// caller has already gone is not sent at all, so it is not ambiguous.
func (s *Store) checkWrite(ctx context.Context, what string) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("etcdkv: %s: not sent: %w", what, err)
	}
	return nil
}

// saw raises maxRev to the revision of h.
func (s *Store) saw(h *etcdserverpb.ResponseHeader) {
	if h == nil {
		return
	}
	for {
		cur := s.maxRev.Load()
		if h.Revision <= cur || s.maxRev.CompareAndSwap(cur, h.Revision) {
			return
		}
	}
}

// readAttempts bounds the attempts of one read whose attempts run out of
// Config.RequestTimeout.
const readAttempts = 3

// attemptCtx bounds one attempt of a request by Config.RequestTimeout.
func (s *Store) attemptCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.cfg.RequestTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.cfg.RequestTimeout)
}

// attemptTimedOut reports whether an attempt ended by its own bound while
// the caller's context is still live.
func attemptTimedOut(ctx, attempt context.Context) bool {
	return ctx.Err() == nil && errors.Is(attempt.Err(), context.DeadlineExceeded)
}

// read runs do, a request that changes nothing, in attempts bounded by
// Config.RequestTimeout. An attempt that runs out is abandoned and sent
// again: the balancer picks the next member for it, so a read that met a
// stopped member lands on a healthy one instead of waiting for the
// caller's deadline.
//
// A read that failed as a member failing does (its connection broke with
// the request in flight, or it has no leader for the moment) is sent
// again as well, after a short pause, within the same attempts: it
// changed nothing, and the client's own retry covers only plain Range,
// not the read-only transactions and streams the other reads use.
func (s *Store) read(ctx context.Context, do func(context.Context) error) error {
	var err error
	for attempt := range readAttempts {
		c, cancel := s.attemptCtx(ctx)
		err = do(c)
		timedOut := err != nil && attemptTimedOut(ctx, c)
		cancel()
		switch {
		case timedOut:
			s.attemptAbandoned()
		case memberFailed(ctx, err) && attempt+1 < readAttempts:
			if !resendPause(ctx, attempt+1) {
				return err
			}
		default:
			return err
		}
	}
	return s.attemptsRanOut()
}

// attemptsRanOut is the error of a read none of whose readAttempts
// attempts was answered within Config.RequestTimeout.
func (s *Store) attemptsRanOut() error {
	return fmt.Errorf("%w: %d attempts of %v each", errAttemptTimeout, readAttempts, s.cfg.RequestTimeout)
}

// resendPause counts the n-th re-send of a read after a member failed
// under it and waits a little longer each time, for another member or the
// next leader; false when ctx ended meanwhile.
func resendPause(ctx context.Context, n int) bool {
	readResends.Inc()
	return ctxtime.Sleep(ctx, time.Duration(n)*20*time.Millisecond)
}

// memberFailed reports an error a read meets when the member serving it
// fails or is between leaders, while the caller's context is live: the
// read can go to another member, or wait for the next leader.
func memberFailed(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && memberFailure(err)
}

// memberFailure reports an error of a member that failed under a request
// or is between leaders (see memberFailed).
func memberFailure(err error) bool {
	return status.Code(err) == codes.Unavailable ||
		errors.Is(err, rpctypes.ErrTimeout) || errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrLeaderChanged) ||
		errors.Is(err, rpctypes.ErrGRPCNoLeader) || errors.Is(err, rpctypes.ErrGRPCLeaderChanged) || errors.Is(err, rpctypes.ErrGRPCTimeout)
}

// write sends do once, bounded by Config.RequestTimeout. An attempt that
// runs out fails with the context's DeadlineExceeded, which maybeApplied
// counts as ambiguous: the caller settles it, never re-applies it blindly.
func (s *Store) write(ctx context.Context, do func(context.Context) error) error {
	c, cancel := s.attemptCtx(ctx)
	defer cancel()
	err := do(c)
	if err != nil && attemptTimedOut(ctx, c) {
		s.attemptAbandoned()
	}
	return err
}

// attemptAbandoned counts an attempt that ran out of its time and has
// the members checked: the one that did not answer may be stopped.
func (s *Store) attemptAbandoned() {
	attemptTimeouts.Inc()
	s.members.suspect()
}

// errAttemptTimeout: no attempt of a request was answered within
// Config.RequestTimeout.
var errAttemptTimeout = errors.New("etcdkv: no answer within the request timeout")

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
	var resp *clientv3.GetResponse
	err := s.read(ctx, func(c context.Context) error {
		var err error
		resp, err = s.cli.Get(c, s.etcdKey(partition, key))
		return err
	})
	if err != nil {
		return nil, kv.Absent, readErr(ctx, fmt.Sprintf("get %q in partition %q", key, partition), err)
	}
	s.saw(resp.Header)
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
	what := fmt.Sprintf("set %q in partition %q", key, partition)
	if err := s.checkWrite(ctx, what); err != nil {
		return err
	}
	if err := s.cfg.Limits.CheckWrite(partition, key, value); err != nil {
		return err
	}
	k := s.etcdKey(partition, key)
	_, err := s.blind(ctx, what, s.setWrite(k, value))
	return err
}

func (s *Store) setWrite(k string, value []byte) blindWrite {
	return blindWrite{keys: []string{k}, ops: []clientv3.Op{clientv3.OpPut(k, string(value))}}
}

// SetAndRead is one transaction: the puts, then a range read of each key,
// all at the puts' revision. Like Set, it is sent as guarded attempts
// (see blindWrite); the reads come from the attempt that applied.
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
	what := fmt.Sprintf("set %d keys (first %q in partition %q) and read %d", len(writes), writes[0].Key, writes[0].Partition, len(reads))
	if err := s.checkWrite(ctx, what); err != nil {
		return nil, err
	}
	w, err := s.setAndReadWrite(writes, reads)
	if err != nil {
		return nil, err
	}
	resp, err := s.blind(ctx, what, w)
	if err != nil {
		return nil, err
	}
	if len(resp.Responses) != len(w.ops) {
		return nil, fmt.Errorf("etcdkv: set and read: %d responses to %d operations", len(resp.Responses), len(w.ops))
	}
	return readEntries(reads, resp.Responses[len(writes):]), nil
}

// setAndReadWrite checks writes and reads and builds their guarded
// transaction: one compare per written key (etcd counts compares apart
// from operations, and kv.MaxSetAndReadOps keeps both within its
// per-transaction limit), the puts, then the reads.
func (s *Store) setAndReadWrite(writes []kv.Write, reads []kv.KeyRef) (blindWrite, error) {
	w := blindWrite{keys: make([]string, 0, len(writes)), ops: make([]clientv3.Op, 0, len(writes)+len(reads))}
	for _, wr := range writes {
		if err := s.cfg.Limits.CheckWrite(wr.Partition, wr.Key, wr.Value); err != nil {
			return blindWrite{}, err
		}
		k := s.etcdKey(wr.Partition, wr.Key)
		w.keys = append(w.keys, k)
		w.ops = append(w.ops, clientv3.OpPut(k, string(wr.Value)))
	}
	ops, err := s.appendReadOps(w.ops, reads)
	if err != nil {
		return blindWrite{}, err
	}
	w.ops = ops
	return w, nil
}

// blindWrite is an unconditional write (Set, Delete, SetAndRead): ops,
// which change exactly keys (then maybe read others).
//
// An attempt that runs out of its time (a stopped member holds it) or
// fails ambiguously is abandoned and the write sent again, but the
// abandoned attempt may still apply later: the stopped member forwards
// it when it resumes, seconds after the caller was answered and after
// others wrote the same keys. A plain put would then overwrite a newer
// acknowledged write. So every attempt is a transaction guarded by a
// bound L, the highest response revision the store had seen when it sent
// the attempt: it applies only if no key it writes was written after L
// (ModRevision <= L). Why that is enough:
//
//   - A write of one of the keys that applies at a revision R > L ends
//     the attempt for good: the key's ModRevision stays above L until the
//     key is deleted. Every write applied after the attempt was sent has
//     such an R, because L was already a revision then. So an attempt
//     applies, if at all, before any write of its keys that applies after
//     it was sent, others' or our own re-sends: once the call has
//     succeeded, one of its attempts has applied at some R, above the
//     bound of every earlier attempt (bounds only grow), and no abandoned
//     attempt can land after that.
//   - An earlier attempt that applies before a later one is evaluated
//     only makes the later one fail its guard; it is sent again with a
//     fresh bound and applies the same values once more, which is
//     harmless for an unconditional write, and the call's reads come from
//     the attempt that succeeded.
//
// A guard that fails is not a failure of the write: someone wrote a key
// after L, or L was older than the key's last write (another process
// wrote it). The attempt is sent again at once with the highest revision
// seen since, at least the failed response's, which is at or above every
// key's ModRevision then; blindAttempts bounds these rounds.
//
// What the guard cannot see: a missing key has no revision (etcd compares
// it as 0), so the guard alone would let a put attempt abandoned before a
// later Delete of its key apply after that Delete. The store's write
// fence (fence.go), which every attempt also carries and which moves as
// soon as an attempt's answer is lost, is what stops that.
//
// A write with absent keys (SetAndReadUnless) also requires each of them
// to be missing. When one exists its attempt runs orElse instead, whose
// last len(absent) operations count the absent keys, and the write ends
// unapplied rather than being sent again: every attempt, abandoned ones
// included, needs that key missing, so none applies while it exists.
type blindWrite struct {
	keys   []string
	ops    []clientv3.Op
	absent []string
	orElse []clientv3.Op
}

// cmps are the guards of one attempt of w sent with bound.
func (w blindWrite) cmps(bound int64) []clientv3.Cmp {
	cmps := make([]clientv3.Cmp, 0, len(w.keys)+len(w.absent)+1)
	for _, k := range w.keys {
		// etcd compares have no "<=".
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "<", bound+1))
	}
	for _, k := range w.absent {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
	}
	return cmps
}

// absentFound reports whether the failed attempt resp found a key of
// w.absent present.
func (w blindWrite) absentFound(resp *clientv3.TxnResponse) bool {
	if len(w.absent) == 0 || len(resp.Responses) != len(w.orElse) {
		return false
	}
	for _, r := range resp.Responses[len(w.orElse)-len(w.absent):] {
		if rr := r.GetResponseRange(); rr != nil && rr.Count > 0 {
			return true
		}
	}
	return false
}

// blindAttempts bounds the attempts of one round of a blind write whose
// guards fail: each failure means a written key changed between one
// response and the next request, so ten in a row take a key written
// without pause by others.
const blindAttempts = 10

// ErrContended is returned when every guarded attempt of an
// unconditional write found a key it writes changed after its bound:
// nothing was applied (unless an earlier attempt was ambiguous, and then
// the result is kv.ErrAmbiguous instead). It is a kind of
// kv.ErrUnavailable, which callers already treat as "not applied, try
// again".
var ErrContended = fmt.Errorf("%w: etcdkv: the keys written kept changing under every guarded attempt", kv.ErrUnavailable)

// beforeBlindAttempt, when set (by tests only), runs after an attempt's
// bound is read and before the attempt is sent.
var beforeBlindAttempt func()

// blindRound sends w in guarded attempts until one applies (see
// blindWrite), each bounded by the highest revision seen when it is sent,
// or one finds a key of w.absent present (a response that did not
// succeed). The bound of the last attempt sent is left in *sent.
func (s *Store) blindRound(ctx context.Context, w blindWrite, sent *int64) (*clientv3.TxnResponse, error) {
	for range blindAttempts {
		bound := s.maxRev.Load()
		*sent = bound
		if beforeBlindAttempt != nil {
			beforeBlindAttempt()
		}
		resp, err := s.send(ctx, w.cmps(bound), w.ops, w.orElse)
		if err != nil {
			return nil, err
		}
		s.saw(resp.Header)
		if resp.Succeeded || w.absentFound(resp) {
			return resp, nil
		}
	}
	return nil, fmt.Errorf("%w (%d attempts)", ErrContended, blindAttempts)
}

// blind runs w: a first round within Config.RequestTimeout, then, when
// its outcome is unknown, rounds with fresh bounds until one applies.
// Re-sending is safe only because of the guard (see blindWrite). The
// response did not succeed only when a round found a key of w.absent
// present; the write then did not apply, unless an abandoned attempt had
// (before that key appeared).
func (s *Store) blind(ctx context.Context, what string, w blindWrite) (*clientv3.TxnResponse, error) {
	var resp *clientv3.TxnResponse
	var bound int64
	err := s.write(ctx, func(c context.Context) error {
		var err error
		resp, err = s.blindRound(c, w, &bound)
		return err
	})
	if err == nil {
		if resp.Succeeded {
			kv.NoteWrite(ctx, resp.Header.Revision)
		}
		return resp, nil
	}
	if isNoSpace(err) {
		return nil, s.noSpaceBlind(ctx, what, w, bound, writeErr(ctx, what, err))
	}
	if errors.Is(err, ErrContended) || !maybeApplied(ctx, err) {
		return nil, writeErr(ctx, what, err)
	}
	return s.settleBlind(ctx, what, w, err)
}

// settleBlind settles w, whose first round failed with firstErr after it
// may have applied, by rounds with fresh bounds.
//
// A round that finds a key of w.absent present settles nothing: the first
// attempt may have applied before that key appeared, or never, and the
// key's presence now looks the same either way. Reporting "not applied"
// would send the caller to write elsewhere what may already stand here
// (a staged write goes again into the next token, after writes
// acknowledged meanwhile), so the answer is kv.ErrAmbiguous. Nothing of w
// applies after that key appeared, which is all the caller may rely on.
func (s *Store) settleBlind(ctx context.Context, what string, w blindWrite, firstErr error) (*clientv3.TxnResponse, error) {
	var resp *clientv3.TxnResponse
	var bound int64
	// While settling, a contended round leaves the first attempt as
	// unknown as before: settle goes on with the next round, after its
	// backoff, which also gives the other writers time to pass.
	if err := s.settle(ctx, what, firstErr, func(c context.Context) (bool, error) {
		r, err := s.blindRound(c, w, &bound)
		if err == nil {
			resp = r
		}
		return err == nil, err
	}); err != nil {
		return nil, err
	}
	if !resp.Succeeded {
		ambiguousWrites.Inc()
		return nil, fmt.Errorf("%w: etcdkv: %s: a key that must be missing appeared while the first attempt's outcome was unknown; it applied before that or never (first attempt: %v)", kv.ErrAmbiguous, what, firstErr)
	}
	kv.NoteWrite(ctx, resp.Header.Revision)
	return resp, nil
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
	var resp *clientv3.TxnResponse
	err = s.read(ctx, func(c context.Context) error {
		var err error
		resp, err = s.cli.Txn(c).Then(ops...).Commit()
		return err
	})
	if err != nil {
		return nil, readErr(ctx, fmt.Sprintf("get %d keys (first %q in partition %q)", len(reads), reads[0].Key, reads[0].Partition), err)
	}
	s.saw(resp.Header)
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
	what := fmt.Sprintf("setif %q in partition %q", key, partition)
	if err := s.checkWrite(ctx, what); err != nil {
		return err
	}
	if err := s.cfg.Limits.CheckWrite(partition, key, value); err != nil {
		return err
	}
	k := s.etcdKey(partition, key)
	failed := func() error {
		return fmt.Errorf("%w: %q in partition %q changed since %v", kv.ErrPredicateFailed, key, partition, pred)
	}
	// Read before sending: whatever this attempt does happens at a later
	// revision.
	sentAfter := s.maxRev.Load()
	err := s.casWrite(ctx, what, []clientv3.Cmp{s.guard(k, pred)}, []clientv3.Op{clientv3.OpPut(k, string(value))}, failed, func(firstErr error) error {
		return s.settleSetIf(ctx, k, value, pred, sentAfter, what, firstErr, failed)
	})
	if errors.Is(err, kv.ErrQuotaExceeded) {
		return s.noSpaceSetIf(ctx, what, k, value, pred, sentAfter, err)
	}
	return err
}

// casWrite sends ops guarded by cmps (a key's guard, then maybe more).
// When its outcome is unknown, settle decides it before the caller is
// answered.
func (s *Store) casWrite(ctx context.Context, what string, cmps []clientv3.Cmp, ops []clientv3.Op, failed func() error, settle func(firstErr error) error) error {
	var resp *clientv3.TxnResponse
	err := s.write(ctx, func(c context.Context) error {
		var err error
		resp, err = s.send(c, cmps, ops, nil)
		return err
	})
	if err == nil {
		s.saw(resp.Header)
		if !resp.Succeeded {
			return failed()
		}
		kv.NoteWrite(ctx, resp.Header.Revision)
		return nil
	}
	if !maybeApplied(ctx, err) {
		return writeErr(ctx, what, err)
	}
	return settle(err)
}

// settleCAS settles a guarded op whose first attempt failed with firstErr
// after it may have been applied: it re-sends the same guarded op, reading
// the key when the guard fails. Success means the first attempt had not
// applied and this one did; a failed guard means the key moved on, and
// decide tells from the key's history (cur is the key as read, nil when
// missing) whether it was our first attempt that moved it, and if so at
// which revision.
func (s *Store) settleCAS(ctx context.Context, what, k string, pred kv.Predicate, op clientv3.Op, firstErr error, failed func() error, created func(context.Context) (int64, error), decide func(c context.Context, cur *mvccpb.KeyValue) (verdict, int64, error)) error {
	return s.settleTxn(ctx, what, k, []clientv3.Cmp{s.guard(k, pred)}, []clientv3.Op{op}, firstErr, failed, created,
		func(c context.Context, cur *mvccpb.KeyValue, _ int64) (verdict, int64, error) { return decide(c, cur) })
}

// settleTxn is settleCAS for a transaction of several compares and ops
// that reads k when its compares fail; decide also gets the revision the
// failed re-send read at. created, when not nil, runs before each re-send
// and returns the revision at which the first attempt applied if it can
// tell so already (a create whose key was deleted since, which the
// re-send would create again: createdMeanwhile), or 0.
func (s *Store) settleTxn(ctx context.Context, what, k string, cmps []clientv3.Cmp, ops []clientv3.Op, firstErr error, failed func() error, created func(context.Context) (int64, error), decide func(c context.Context, cur *mvccpb.KeyValue, at int64) (verdict, int64, error)) error {
	return s.settleGuarded(ctx, what, firstErr, failed, func(c context.Context) (verdict, int64, error) {
		if created != nil {
			rev, err := created(c)
			if err != nil {
				return undecided, 0, err
			}
			if rev > 0 {
				return applied, rev, nil
			}
		}
		resp, err := s.send(c, cmps, ops, []clientv3.Op{clientv3.OpGet(k)})
		if err != nil {
			return undecided, 0, err
		}
		s.saw(resp.Header)
		if resp.Succeeded {
			return applied, resp.Header.Revision, nil
		}
		return decide(c, elseKV(resp), resp.Header.Revision)
	})
}

// settleSetIf decides the outcome of a SetIf whose first attempt failed
// with firstErr after it may have been applied. It re-sends the same
// guarded Txn, reading the key when the guard fails: success means the
// first attempt had not applied and this one did. A create (pred Absent)
// looks first for a creation of the key with our value since deleted
// (createdMeanwhile): re-sent, it would apply a second time. A failed guard means
// the key moved on, through our first attempt or another writer's; the
// current value cannot tell which (another writer may have overwritten
// ours), so the key's history decides:
//
//   - pred is a version: our put could apply only while the key was at
//     pred, so it applied iff the first change after pred is a put of our
//     value;
//   - pred is Absent: our put could apply only while the key was missing
//     and after sentAfter (a revision seen before the first attempt was
//     sent), so it applied iff some creation of the key after sentAfter put
//     our value.
//
// Values identify the attempt (see kv.Store.SetIf). When the history
// needed is compacted the outcome is unknowable: kv.ErrAmbiguous, never a
// guess.
func (s *Store) settleSetIf(ctx context.Context, k string, value []byte, pred kv.Predicate, sentAfter int64, what string, firstErr error, failed func() error) error {
	return s.settleCAS(ctx, what, k, pred, clientv3.OpPut(k, string(value)), firstErr, failed, s.createdMeanwhileIf(k, value, pred, sentAfter), func(c context.Context, cur *mvccpb.KeyValue) (verdict, int64, error) {
		return s.setIfVerdict(c, k, value, pred, sentAfter, cur)
	})
}

// setIfVerdict tells from k's history whether a put of value guarded by
// pred, sent after sentAfter, applied; cur is k as read after the key
// moved on from pred (see settleSetIf).
func (s *Store) setIfVerdict(ctx context.Context, k string, value []byte, pred kv.Predicate, sentAfter int64, cur *mvccpb.KeyValue) (verdict, int64, error) {
	if pred.IsAbsent() {
		return s.createdSince(ctx, k, value, sentAfter, cur)
	}
	ev, err := s.firstChangeAfter(ctx, k, pred.Version(), cur)
	if err != nil || ev == nil {
		return notApplied, 0, err
	}
	if ev.Type == mvccpb.PUT && bytes.Equal(ev.Kv.Value, value) {
		return applied, ev.Kv.ModRevision, nil
	}
	return notApplied, 0, nil
}

// createdMeanwhile tells whether a create of k with value (guarded by
// "k is missing"), sent after sentAfter and whose answer was lost,
// applied and k was deleted since: k is missing again, so a re-send would
// pass the guard and create k a second time, bringing back what someone
// deleted. It returns the creation's revision, or 0 when k is present
// (the re-send's guard fails and the history decides) or was not created
// with value since sentAfter. A first attempt etcd applies only after
// this read, and that is deleted again before the re-send, is not seen.
func (s *Store) createdMeanwhile(ctx context.Context, k string, value []byte, sentAfter int64) (int64, error) {
	cur, at, err := s.currentKey(ctx, k)
	if err != nil || cur != nil {
		return 0, err
	}
	return s.createdBetween(ctx, k, value, sentAfter, at)
}

// createdMeanwhileIf is createdMeanwhile for a put guarded by pred: nil
// unless pred is Absent (a put guarded by a version cannot apply twice).
func (s *Store) createdMeanwhileIf(k string, value []byte, pred kv.Predicate, sentAfter int64) func(context.Context) (int64, error) {
	if !pred.IsAbsent() {
		return nil
	}
	return func(c context.Context) (int64, error) { return s.createdMeanwhile(c, k, value, sentAfter) }
}

// elseKV is the key read by the Else branch of a failed guarded Txn, or
// nil when the key is missing.
func elseKV(resp *clientv3.TxnResponse) *mvccpb.KeyValue {
	if len(resp.Responses) == 0 {
		return nil
	}
	if rr := resp.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
		return rr.Kvs[0]
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
	what := fmt.Sprintf("delete %q in partition %q", key, partition)
	if err := s.checkWrite(ctx, what); err != nil {
		return err
	}
	if err := s.cfg.Limits.CheckKey(partition, key); err != nil {
		return err
	}
	// kv.Store.Delete itself: unconditional by contract; callers use it
	// only on keys nobody re-creates concurrently. The guard only keeps
	// an abandoned attempt from deleting a later write (see blindWrite).
	_, err := s.blind(ctx, what, s.deleteWrite(s.etcdKey(partition, key)))
	return err
}

func (s *Store) deleteWrite(k string) blindWrite {
	return blindWrite{keys: []string{k}, ops: []clientv3.Op{clientv3.OpDelete(k)}}
}

func (s *Store) DeleteIf(ctx context.Context, partition, key []byte, pred kv.Predicate) error {
	start := time.Now()
	err := s.deleteIf(ctx, partition, key, pred)
	observe("deleteif", start, err)
	return err
}

func (s *Store) deleteIf(ctx context.Context, partition, key []byte, pred kv.Predicate) error {
	what := fmt.Sprintf("deleteif %q in partition %q", key, partition)
	if err := s.checkWrite(ctx, what); err != nil {
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
		var resp *clientv3.GetResponse
		err := s.read(ctx, func(c context.Context) error {
			var err error
			resp, err = s.cli.Get(c, k, clientv3.WithCountOnly())
			return err
		})
		if err != nil {
			return readErr(ctx, what, err)
		}
		s.saw(resp.Header)
		if resp.Count != 0 {
			return failed()
		}
		// Nothing written: the key was missing as of this revision.
		kv.NoteWrite(ctx, resp.Header.Revision)
		return nil
	}
	return s.casWrite(ctx, what, []clientv3.Cmp{s.guard(k, pred)}, []clientv3.Op{clientv3.OpDelete(k)}, failed, func(firstErr error) error {
		return s.settleDeleteIf(ctx, k, pred, what, firstErr, failed)
	})
}

// settleDeleteIf decides the outcome of a DeleteIf whose first attempt
// failed with firstErr after it may have been applied: the guarded delete
// is sent again, and when its guard fails the first change of the key
// after pred decides. A deletion ended version pred, by us or by another
// deleter, and the caller's intent holds: applied. A put ended it, so our
// delete, which needed the key at pred, never applied: ErrPredicateFailed.
func (s *Store) settleDeleteIf(ctx context.Context, k string, pred kv.Predicate, what string, firstErr error, failed func() error) error {
	return s.settleCAS(ctx, what, k, pred, clientv3.OpDelete(k), firstErr, failed, nil, func(c context.Context, cur *mvccpb.KeyValue) (verdict, int64, error) {
		ev, err := s.firstChangeAfter(c, k, pred.Version(), cur)
		if err != nil || ev == nil {
			return notApplied, 0, err
		}
		if ev.Type == mvccpb.DELETE {
			// A deletion event's ModRevision is the deletion's revision.
			return applied, ev.Kv.ModRevision, nil
		}
		return notApplied, 0, nil
	})
}

// verdict is what settling learnt of a guarded write's first attempt.
type verdict int

const (
	undecided  verdict = iota
	applied            // it applied, or the re-send did
	notApplied         // neither did: the guard failed
	unknowable         // the history that would tell was compacted
)

// settleGuarded runs attempt through settle and turns its verdict into the
// write's result; an applied write is noted at the revision attempt found
// (kv.NoteWrite).
func (s *Store) settleGuarded(ctx context.Context, what string, firstErr error, failed func() error, attempt func(context.Context) (verdict, int64, error)) error {
	var v verdict
	var rev int64
	err := s.settle(ctx, what, firstErr, func(c context.Context) (bool, error) {
		got, r, err := attempt(c)
		if isCompacted(err) {
			got, err = unknowable, nil
		}
		if err != nil {
			return false, err
		}
		v, rev = got, r
		return true, nil
	})
	if err != nil {
		return err
	}
	switch v {
	case notApplied:
		return failed()
	case unknowable:
		ambiguousWrites.Inc()
		return fmt.Errorf("%w: etcdkv: %s: the key's history since the first attempt is compacted (first attempt: %v)", kv.ErrAmbiguous, what, firstErr)
	}
	kv.NoteWrite(ctx, rev)
	return nil
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
	if errors.Is(err, errNotSent) {
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

// NoSpaceHint is what a write refused under etcd's NOSPACE alarm says of
// its cause and of the way out: nothing but an operator ends the alarm,
// so a caller that retries only adds load (docs/capacity.md, "NOSPACE").
const NoSpaceHint = "etcd is out of space (NOSPACE alarm: its database reached --quota-backend-bytes) " +
	"and refuses every write but deletes until an operator frees space, compacts, defragments every member and disarms the alarm"

// writeErr maps a write error whose outcome is known (not applied).
func writeErr(ctx context.Context, what string, err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrNoSpace), errors.Is(err, rpctypes.ErrGRPCNoSpace):
		return fmt.Errorf("%w: etcdkv: %s: %s: %v", kv.ErrQuotaExceeded, what, NoSpaceHint, err)
	case errors.Is(err, rpctypes.ErrRequestTooLarge), errors.Is(err, rpctypes.ErrGRPCRequestTooLarge):
		return fmt.Errorf("%w: etcdkv: %s: the server refused the request size: %v", kv.ErrValueTooLarge, what, err)
	case errors.Is(err, rpctypes.ErrTooManyOps), errors.Is(err, rpctypes.ErrGRPCTooManyOps):
		return fmt.Errorf("%w: etcdkv: %s: too many operations in one transaction: %v", kv.ErrValueTooLarge, what, err)
	}
	return readErr(ctx, what, err)
}

// deadlineSlack is how far ahead of the caller's deadline a
// DeadlineExceeded from etcd still counts as that deadline's: etcd gets
// the deadline with the request, and its answer can arrive before the
// caller's context, whose timer has yet to fire, reports it.
const deadlineSlack = 5 * time.Millisecond

// callerDeadline reports whether err, a DeadlineExceeded, is the caller's
// deadline coming (passed, or within deadlineSlack) rather than a timeout
// of etcd's or of an attempt on a caller with time left.
func callerDeadline(ctx context.Context, err error) bool {
	if !errors.Is(err, context.DeadlineExceeded) && status.Code(err) != codes.DeadlineExceeded {
		return false
	}
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) <= deadlineSlack
}

// readErr maps an error of an operation that changed nothing.
func readErr(ctx context.Context, what string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("etcdkv: %s: %w", what, cerr)
	}
	if callerDeadline(ctx, err) {
		return fmt.Errorf("etcdkv: %s: %w", what, context.DeadlineExceeded)
	}
	if errors.Is(err, errAttemptTimeout) || errors.Is(err, context.DeadlineExceeded) {
		// The caller's context is live: our own attempts ran out.
		return fmt.Errorf("%w: etcdkv: %s: %v", kv.ErrUnavailable, what, err)
	}
	if status.Code(err) == codes.DeadlineExceeded || memberFailure(err) {
		return fmt.Errorf("%w: etcdkv: %s: %v", kv.ErrUnavailable, what, err)
	}
	return fmt.Errorf("etcdkv: %s: %w", what, err)
}
