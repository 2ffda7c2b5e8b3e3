package etcdkv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"graveler/internal/ctxtime"
	"graveler/kv"
)

// The fence keeps a write attempt whose answer the store lost from
// applying after the store moved on.
//
// An attempt can outlive its answer by seconds or minutes: a member that
// stops while holding the request (SIGSTOP, a hung host, a long pause)
// forwards it to the leader when it resumes, long after the store gave up
// on it, re-sent or settled the write, answered its caller, and others
// changed the key again. The guards on the written keys' revisions stop
// some of these, not all: a missing key has no revision, so an attempt
// that puts a key deleted since applies again (a deleted branch comes
// back), and an attempt whose caller gave up applies whenever its guard
// still holds (the caller was told "ambiguous", and the write takes effect
// after it has acted on that).
//
// So every write attempt also requires the store's fence key,
// <prefix>/!fence/<random id> (one per Store, outside every partition,
// attached to a lease), to be at the revision the store last knew. When
// an attempt's outcome is unknown (it timed out, its connection broke,
// its caller gave up), the store moves the fence, a put guarded by the
// revision that attempt carried, before it re-sends, settles or answers
// anything: from then on that attempt has applied already or never will,
// which is what settling from the key's history assumes and what the
// caller is told. When the process dies, its lease expires and etcd
// deletes the fence key, which fences every attempt it left, within
// fenceTTL.
//
// A fence that cannot be moved (etcd unreachable) stays pending: the
// store moves it before sending any later write, which fails unsent (as
// unavailable) while that is impossible. Under etcd's NOSPACE alarm the
// fence moves by deleting its key (deletes cost no quota), and, while the
// key cannot be created again, attempts require it missing; such an
// attempt, when lost, cannot be fenced until space returns. Only deletes
// are sent then (etcd refuses every put), and a late delete still needs
// its own guard to hold.

// fenceTTL is the lease of a fence key, in seconds: how long after its
// process dies an attempt it left can still apply.
const fenceTTL = 30

// fenceResends bounds the attempts of one send refused because the fence
// moved under them (another of the store's writes lost its answer).
const fenceResends = 5

// fenceMissing is the fence revision of attempts sent while the fence key
// is missing and cannot be created (NOSPACE). Such an attempt is fenced
// once the key is created, but applicable again whenever the key is
// missing later (deleted with its lease, or moved by a delete under
// NOSPACE): a gap limited to deletes, the only writes etcd accepts while
// out of space, each still bound by its own guard.
const fenceMissing = -1

// errNotSent marks a write error returned before any attempt was sent:
// the write did not apply.
var errNotSent = errors.New("etcdkv: write not sent")

// fence is one Store's fence key and what the store knows of it.
type fence struct {
	key string
	// lock serializes changes of the key; taken with a context, since
	// moving the key may wait for etcd.
	lock chan struct{}
	// Guarded by lock:
	rev   int64 // the key's ModRevision as last known; 0: not created (or gone); fenceMissing
	stale bool  // an attempt carrying rev has an unknown outcome: move before the next send
	// missingAt is when the fence last could not be created (NOSPACE):
	// creating it is tried again at most once a second meanwhile.
	missingAt time.Time
	lease     clientv3.LeaseID
	// leaseLost is closed when the lease's keep-alive ends (expired, or
	// the store closed).
	leaseLost chan struct{}
	stopKeep  context.CancelFunc

	// pending is a revision an attempt with an unknown outcome carried,
	// left by a fenceOff that could not take the lock in time: the next
	// fenceFor moves the fence past it first (0: none).
	pending atomic.Int64
	// closed is set by Close: no lease is granted afterwards.
	closed atomic.Bool
	// life ends every keep-alive when the store closes.
	life    context.Context
	endLife context.CancelFunc
}

// FenceRoot is where the fence keys of stores with root prefix live:
// outside every partition ('!' is no partition name's character).
func FenceRoot(prefix string) string { return strings.TrimRight(prefix, "/") + "/!fence/" }

// FenceKey is the store's fence key (it exists once the store has written).
func (s *Store) FenceKey() string { return s.fence.key }

func newFence(prefix string) *fence {
	var id [8]byte
	_, _ = rand.Read(id[:])
	life, end := context.WithCancel(context.Background())
	return &fence{key: FenceRoot(prefix) + hex.EncodeToString(id[:]), lock: make(chan struct{}, 1), life: life, endLife: end}
}

func (f *fence) acquire(ctx context.Context) error {
	select {
	case f.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fence) release() { <-f.lock }

// cmp is the compare an attempt sent with fence revision rev carries.
func (f *fence) cmp(rev int64) clientv3.Cmp {
	if rev == fenceMissing {
		return clientv3.Compare(clientv3.CreateRevision(f.key), "=", 0)
	}
	return clientv3.Compare(clientv3.ModRevision(f.key), "=", rev)
}

// read is the Else operation that tells a refused attempt whether the
// fence moved.
func (f *fence) read() clientv3.Op { return clientv3.OpGet(f.key, clientv3.WithKeysOnly()) }

// seen is the fence revision a read of the key found.
func seen(r *etcdserverpb.ResponseOp) int64 {
	if rr := r.GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
		return rr.Kvs[0].ModRevision
	}
	return 0
}

// fenceFor returns the fence revision the next attempt carries, creating
// the key or moving a pending fence first.
func (s *Store) fenceFor(ctx context.Context) (int64, error) {
	f := s.fence
	if err := f.acquire(ctx); err != nil {
		return 0, fmt.Errorf("%w: %w", errNotSent, err)
	}
	defer f.release()
	if p := f.pending.Swap(0); p != 0 && p >= f.rev {
		f.stale = true
	}
	if f.rev > 0 && !f.stale || f.rev == fenceMissing && !f.stale && time.Since(f.missingAt) < time.Second {
		return f.rev, nil
	}
	c, cancel := s.attemptCtx(ctx)
	defer cancel()
	var err error
	if f.rev <= 0 {
		err = s.createFenceLocked(c)
	} else {
		err = s.moveFenceLocked(c)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %w: the store's write fence: %w", kv.ErrUnavailable, errNotSent, err)
	}
	return f.rev, nil
}

// createFenceLocked creates the fence key (missing or never created),
// with a lease kept alive until Close. Under NOSPACE the fence is
// fenceMissing until a later attempt can create it.
func (s *Store) createFenceLocked(ctx context.Context) error {
	err := s.createFenceOnce(ctx)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		// The lease ended on the server before its keep-alive told us
		// (it learns at its next renewal): grant another.
		err = s.createFenceOnce(ctx)
	}
	return err
}

func (s *Store) createFenceOnce(ctx context.Context) error {
	f := s.fence
	if f.closed.Load() {
		return kv.ErrClosed
	}
	if f.lease != 0 {
		select {
		case <-f.leaseLost:
			f.stopKeep()
			f.lease = 0
		default:
		}
	}
	if f.lease == 0 {
		lr, err := s.cli.Grant(ctx, fenceTTL)
		if isNoSpace(err) {
			// A grant costs quota too.
			f.rev, f.stale, f.missingAt = fenceMissing, false, time.Now()
			return nil
		}
		if err != nil {
			return fmt.Errorf("grant a lease: %w", err)
		}
		kctx, stop := context.WithCancel(f.life)
		ch, err := s.cli.KeepAlive(kctx, lr.ID)
		if err != nil {
			stop()
			return fmt.Errorf("keep the lease alive: %w", err)
		}
		lost := make(chan struct{})
		go func() {
			for range ch {
			}
			close(lost)
		}()
		f.lease, f.leaseLost, f.stopKeep = lr.ID, lost, stop
	}
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(f.key), "=", 0)).
		Then(clientv3.OpPut(f.key, "", clientv3.WithLease(f.lease))).Else(f.read()).Commit()
	switch {
	case isNoSpace(err):
		f.rev, f.stale, f.missingAt = fenceMissing, false, time.Now()
		return nil
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		f.stopKeep()
		f.lease = 0
		return err
	case err != nil:
		return err
	}
	s.saw(resp.Header)
	if resp.Succeeded {
		f.rev = resp.Header.Revision
	} else {
		// Only this store writes the key: it is our own earlier create,
		// whose answer was lost.
		f.rev = seen(resp.Responses[0])
	}
	f.stale = false
	return nil
}

// moveFenceLocked moves the fence past f.rev: afterwards no attempt that
// carried it can apply.
func (s *Store) moveFenceLocked(ctx context.Context) error {
	f := s.fence
	if f.rev == fenceMissing {
		// Creating the key moves a missing fence. Still out of space: it
		// cannot move (see the comment at the top).
		err := s.createFenceLocked(ctx)
		if err == nil && f.rev == fenceMissing {
			s.cfg.Logger.Warn("etcd is out of space: a write attempt whose answer was lost cannot be fenced and may still apply later")
		}
		return err
	}
	guard := clientv3.Compare(clientv3.ModRevision(f.key), "=", f.rev)
	resp, err := s.cli.Txn(ctx).If(guard).Then(clientv3.OpPut(f.key, "", clientv3.WithLease(f.lease))).Else(f.read()).Commit()
	if isNoSpace(err) {
		resp, err = s.cli.Txn(ctx).If(guard).Then(clientv3.OpDelete(f.key)).Else(f.read()).Commit()
	}
	if err != nil {
		return err
	}
	s.saw(resp.Header)
	switch {
	case !resp.Succeeded:
		// It moved already: an earlier move whose answer was lost, or the
		// lease expired.
		f.rev = seen(resp.Responses[0])
	case resp.Responses[0].GetResponsePut() != nil:
		f.rev = resp.Header.Revision
	default:
		f.rev = 0
	}
	f.stale = false
	fenceMoves.Inc()
	return nil
}

// fenceOff moves the fence past rev, which an attempt whose outcome is
// unknown carried, unless it moved since. It waits for that even when
// ctx has ended (the caller gave up: its attempt must not apply later),
// for at most twice the request timeout, in attempts of half of it: the
// member that lost the answer may be stopped and get the move too, so
// the members are checked first (a stopped one is taken out of the
// rotation) and a move that runs out is sent again. When every move
// fails the fence stays pending and the next send moves it first.
func (s *Store) fenceOff(ctx context.Context, rev int64) {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*s.fenceTimeout())
	defer cancel()
	s.members.suspect()
	f := s.fence
	if err := f.acquire(c); err != nil {
		// Revisions only grow, and a move past the newest fences every
		// older one: keep the largest.
		for p := f.pending.Load(); rev > p && !f.pending.CompareAndSwap(p, rev); p = f.pending.Load() {
		}
		s.fenceNotMoved(rev, err)
		return
	}
	defer f.release()
	if f.rev != rev {
		return
	}
	f.stale = true
	for {
		a, acancel := context.WithTimeout(c, max(s.fenceTimeout()/2, 100*time.Millisecond))
		err := s.moveFenceLocked(a)
		acancel()
		if err == nil || errors.Is(err, kv.ErrClosed) {
			return
		}
		if !ctxtime.Sleep(c, 20*time.Millisecond) {
			s.fenceNotMoved(rev, err)
			return
		}
	}
}

func (s *Store) fenceNotMoved(rev int64, err error) {
	s.cfg.Logger.Warn("could not fence a write attempt whose answer was lost; the store's next write fences it first", zap.Int64("fence_revision", rev), zap.Error(err))
}

func (s *Store) fenceTimeout() time.Duration {
	if s.cfg.RequestTimeout > 0 {
		return s.cfg.RequestTimeout
	}
	return s.cfg.SettleTimeout
}

// closeFence ends the fence: keep-alives stop at once, and the lease is
// revoked (which deletes the key) unless a move holds the fence past the
// request timeout; the lease then expires by itself within fenceTTL.
func (s *Store) closeFence() {
	f := s.fence
	f.closed.Store(true)
	f.endLife()
	ctx, cancel := context.WithTimeout(context.Background(), s.fenceTimeout()+time.Second)
	defer cancel()
	if f.acquire(ctx) != nil {
		return
	}
	defer f.release()
	if f.lease == 0 {
		return
	}
	_, _ = s.cli.Revoke(ctx, f.lease)
	f.lease = 0
}

// beforeFencedSend, when set (by tests only), runs after an attempt has
// read its fence revision and before it is sent.
var beforeFencedSend func(rev int64)

// send is one write attempt: cmps and the fence's compare, then ops, else
// els and a read of the fence key. The caller sees the responses of its
// own operations only. An attempt refused because the fence moved under
// it (another write of this store lost its answer) did not apply and is
// sent again with the new fence. An attempt whose outcome is unknown has
// the fence moved past it before send returns.
func (s *Store) send(ctx context.Context, cmps []clientv3.Cmp, ops, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	for range fenceResends {
		rev, err := s.fenceFor(ctx)
		if err != nil {
			return nil, err
		}
		if beforeFencedSend != nil {
			beforeFencedSend(rev)
		}
		c := append(cmps[:len(cmps):len(cmps)], s.fence.cmp(rev))
		e := append(els[:len(els):len(els)], s.fence.read())
		resp, err := s.cli.Txn(ctx).If(c...).Then(ops...).Else(e...).Commit()
		if err != nil {
			if maybeApplied(ctx, err) {
				s.fenceOff(ctx, rev)
			}
			return nil, err
		}
		if resp.Succeeded {
			return resp, nil
		}
		last := resp.Responses[len(resp.Responses)-1]
		resp.Responses = resp.Responses[:len(resp.Responses)-1]
		now := seen(last)
		if now == rev || rev == fenceMissing && now == 0 {
			return resp, nil
		}
		s.saw(resp.Header)
		s.fenceMovedFrom(ctx, rev, now)
	}
	return nil, fmt.Errorf("%w: %w: the store's write fence kept moving under %d attempts", kv.ErrUnavailable, errNotSent, fenceResends)
}

// fenceMovedFrom records that the fence key, known at rev, was found at
// now (0: missing; it is created again before the next send).
func (s *Store) fenceMovedFrom(ctx context.Context, rev, now int64) {
	f := s.fence
	if f.acquire(ctx) != nil {
		return // the next fenceFor fails on ctx as well
	}
	defer f.release()
	if f.rev == rev {
		f.rev, f.stale = now, false
	}
}
