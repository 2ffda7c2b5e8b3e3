package feed

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"graveler/graveler"
	"graveler/internal/ctxtime"
)

// Bounds of Request.ProgressInterval.
const (
	DefaultProgressInterval = 10 * time.Second
	MinProgressInterval     = 100 * time.Millisecond
	MaxProgressInterval     = 10 * time.Minute
)

// Request says what a subscription delivers.
type Request struct {
	// Repository limits the subscription to one repository (empty: every
	// repository). It need not exist: its changes come once it does.
	Repository graveler.RepositoryID
	// StartRevision: deliver the changes after this revision (0: after
	// etcd's current revision).
	StartRevision int64
	// InitialState first delivers the refs that exist at one revision R
	// (KindInitial pages, then KindInitialEnd at R), then the changes
	// after R. It cannot be combined with StartRevision.
	InitialState bool
	// ProgressInterval: with nothing to deliver, a KindBookmark comes at
	// least this often (0: DefaultProgressInterval; otherwise within
	// [MinProgressInterval, MaxProgressInterval]).
	ProgressInterval time.Duration
}

func (r *Request) validate() error {
	if r.StartRevision < 0 {
		return fmt.Errorf("%w: start revision %d is negative", ErrInvalidRequest, r.StartRevision)
	}
	if r.InitialState && r.StartRevision != 0 {
		return fmt.Errorf("%w: the initial state cannot be combined with a start revision (%d)", ErrInvalidRequest, r.StartRevision)
	}
	if r.Repository != "" {
		if err := graveler.ValidateRepositoryID(r.Repository); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
	}
	if r.ProgressInterval == 0 {
		r.ProgressInterval = DefaultProgressInterval
	}
	if r.ProgressInterval < MinProgressInterval || r.ProgressInterval > MaxProgressInterval {
		return fmt.Errorf("%w: progress interval %s is outside [%s, %s]", ErrInvalidRequest, r.ProgressInterval, MinProgressInterval, MaxProgressInterval)
	}
	return nil
}

type phase int

const (
	phaseInitial phase = iota
	phaseCatchUp
	phaseLive
)

// cqItem is what a catch-up hands its subscription, in order: the changes
// of one revision, a progress (every change up to rev was handed over), an
// offer (the hub's ring held every change after rev), or an error that
// ends it.
type cqItem struct {
	rev      int64
	events   []Event
	progress bool
	offer    bool
	err      error
}

// Subscription is one subscriber of the feed. Next and Close may be called
// from different goroutines; Next is not safe for concurrent use.
type Subscription struct {
	f   *Feed
	req Request
	// ctx ends with Close, with the context given to Subscribe, and with
	// the feed; it bounds the subscription's reads and its catch-up.
	ctx    context.Context
	cancel context.CancelFunc
	stop   func() bool
	once   sync.Once
	// mu is held by Next, and by Close to end the initial state's reader
	// (iter.Pull's stop must not run beside its next).
	mu sync.Mutex

	phase phase
	// initial state
	initNext func() (Event, error, bool)
	initStop func()
	initRev  int64
	// catch-up
	cq          chan cqItem
	stopCatchUp context.CancelFunc
	// live
	epoch, cursor uint64

	// lastRev: every change up to it was delivered (or is out of scope).
	lastRev  int64
	lastSend time.Time
	asked    bool
	err      error
}

// Subscribe starts a subscription. A StartRevision older than the hub's
// memory and than etcd's compaction is a *CompactedError; one after etcd's
// current revision a *FutureRevisionError; an invalid request wraps
// ErrInvalidRequest; a closed feed ErrClosed. ctx bounds the subscription:
// when it ends, Next fails.
func (f *Feed) Subscribe(ctx context.Context, req Request) (*Subscription, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(f.ctx)
	s := &Subscription{f: f, req: req, ctx: sctx, cancel: cancel, stop: context.AfterFunc(ctx, cancel), lastSend: time.Now()}
	if err := s.start(ctx); err != nil {
		s.stop()
		cancel()
		return nil, err
	}
	subscribersGauge.Inc()
	return s, nil
}

func (s *Subscription) start(ctx context.Context) error {
	f := s.f
	if f.isClosed() {
		return ErrClosed
	}
	if s.req.InitialState {
		s.phase = phaseInitial
		s.initNext, s.initStop = iter.Pull2(f.initialState(s.ctx, s.req.Repository, &s.initRev))
		return nil
	}
	start := s.req.StartRevision
	if start == 0 || start > f.coveredRev() {
		cur, err := f.currentRevision(ctx)
		if err != nil {
			return err
		}
		if start == 0 {
			start = cur
		} else if start > cur {
			return &FutureRevisionError{Revision: start, CurrentRevision: cur}
		}
	}
	return s.attach(start)
}

// attach continues after rev: in the hub's ring when it holds every change
// after rev, else through a catch-up.
func (s *Subscription) attach(rev int64) error {
	f := s.f
	s.lastRev = rev
	f.mu.Lock()
	epoch, cursor, ok := f.joinLocked(rev)
	closed := f.closed
	f.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if ok {
		s.phase, s.epoch, s.cursor = phaseLive, epoch, cursor
		return nil
	}
	dec, _, err := f.newDecoder(s.ctx, rev)
	if err != nil {
		return err
	}
	s.phase = phaseCatchUp
	s.cq = make(chan cqItem, f.cfg.CatchUpBuffer)
	cctx, stop := context.WithCancel(s.ctx)
	s.stopCatchUp = stop
	// Added under the lock that Close takes before waiting: no catch-up
	// starts once Close waits.
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		stop()
		return ErrClosed
	}
	f.wg.Add(1)
	f.mu.Unlock()
	catchUps.Inc()
	go func() {
		defer f.wg.Done()
		f.catchUp(cctx, s.cq, dec, rev)
	}()
	return nil
}

func (f *Feed) isClosed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

// Close ends the subscription and its catch-up. Safe to call more than
// once, and concurrently with Next.
func (s *Subscription) Close() {
	s.once.Do(func() {
		s.stop()
		s.cancel()
		s.mu.Lock()
		s.stopInitial()
		s.mu.Unlock()
		subscribersGauge.Dec()
	})
}

// stopInitial ends the initial state's reader, if any.
func (s *Subscription) stopInitial() {
	if s.initStop != nil {
		s.initStop()
		s.initNext, s.initStop = nil, nil
	}
}

// Next returns the next message: initial pages, changes in revision
// order, or a bookmark when nothing was returned for the progress
// interval. It blocks until one is due, ctx ends (ctx's error), or the
// subscription fails: ErrClosed, a *TooSlowError, a *CompactedError (the
// hub fell behind etcd's compaction), or an error of etcd. Every error but
// ctx's ends the subscription: Next keeps returning it.
func (s *Subscription) Next(ctx context.Context) (*Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	m, err := s.next(ctx)
	if err != nil {
		// The call's context ending ends the call only: anything else,
		// such as a catch-up's error read from its buffer meanwhile, ends
		// the subscription, or it would be lost.
		if ctx.Err() != nil && s.ctx.Err() == nil && errors.Is(err, ctx.Err()) {
			return nil, ctx.Err()
		}
		if s.ctx.Err() != nil && !errors.Is(err, ErrClosed) && s.f.ctx.Err() != nil {
			err = ErrClosed
		}
		if _, slow := errors.AsType[*TooSlowError](err); slow {
			slowCloses.Inc()
		}
		s.err = err
		return nil, err
	}
	s.lastSend, s.asked = time.Now(), false
	eventsDelivered.Add(float64(len(m.Events)))
	return m, nil
}

func (s *Subscription) next(ctx context.Context) (*Message, error) {
	if s.phase == phaseInitial {
		return s.nextInitial()
	}
	for {
		if s.f.ctx.Err() != nil {
			return nil, ErrClosed
		}
		if err := s.ctx.Err(); err != nil {
			return nil, fmt.Errorf("feed: subscription ended: %w", context.Cause(s.ctx))
		}
		var wake <-chan struct{}
		if s.phase == phaseLive {
			m, w, err := s.fromRing()
			if m != nil || err != nil {
				return m, err
			}
			wake = w
		} else {
			select {
			case it := <-s.cq:
				if m, err := s.fromCatchUp(it); m != nil || err != nil {
					return m, err
				}
				continue
			default:
			}
		}
		now := time.Now()
		due := s.lastSend.Add(s.req.ProgressInterval)
		if !now.Before(due) {
			return &Message{Kind: KindBookmark, Revision: s.lastRev, ResumeRevision: s.lastRev}, nil
		}
		// Ask etcd for progress half way, so that the bookmark carries a
		// revision as recent as etcd can vouch for.
		wakeAt := due
		if ask := s.lastSend.Add(s.req.ProgressInterval / 2); !s.asked {
			if !now.Before(ask) {
				if s.phase == phaseLive {
					s.f.askProgress()
				}
				s.asked = true
			} else {
				wakeAt = ask
			}
		}
		t := time.NewTimer(wakeAt.Sub(now))
		var cq chan cqItem
		if s.phase == phaseCatchUp {
			cq = s.cq
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-s.ctx.Done():
		case <-wake:
		case it := <-cq:
			t.Stop()
			if m, err := s.fromCatchUp(it); m != nil || err != nil {
				return m, err
			}
		case <-t.C:
		}
		t.Stop()
	}
}

// fromRing returns the next changes in scope from the hub's ring, or the
// channel that is closed when the ring changes.
func (s *Subscription) fromRing() (*Message, <-chan struct{}, error) {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, nil, ErrClosed
	}
	if s.epoch != f.epoch {
		ce, _ := errors.AsType[*CompactedError](f.epochErr)
		c := &CompactedError{Revision: s.lastRev}
		if ce != nil {
			c.CompactRevision = ce.CompactRevision
		}
		return nil, nil, c
	}
	for s.cursor < f.headSeq {
		if s.cursor < f.tailSeq {
			return nil, nil, &TooSlowError{ResumeRevision: s.lastRev}
		}
		e := &f.entries[s.cursor-f.tailSeq]
		s.cursor++
		if e.rev <= s.lastRev {
			continue
		}
		s.lastRev = e.rev
		if evs := s.inScope(e.events); len(evs) > 0 {
			return &Message{Kind: KindChanges, Revision: e.rev, Events: evs, ResumeRevision: e.rev}, nil, nil
		}
	}
	if s.cursor >= f.progressSeq && f.progressRev > s.lastRev {
		s.lastRev = f.progressRev
	}
	return nil, f.wake, nil
}

// fromCatchUp applies one item of the catch-up.
func (s *Subscription) fromCatchUp(it cqItem) (*Message, error) {
	switch {
	case it.err != nil:
		return nil, it.err
	case it.offer:
		s.f.mu.Lock()
		epoch, cursor, ok := s.f.joinLocked(it.rev)
		s.f.mu.Unlock()
		if ok {
			// Every change up to it.rev came through the catch-up: the
			// ring has the rest.
			s.stopCatchUp()
			s.phase, s.epoch, s.cursor = phaseLive, epoch, cursor
			s.lastRev = max(s.lastRev, it.rev)
		}
		return nil, nil
	case it.rev <= s.lastRev:
		return nil, nil
	}
	s.lastRev = it.rev
	if it.progress {
		return nil, nil
	}
	if evs := s.inScope(it.events); len(evs) > 0 {
		return &Message{Kind: KindChanges, Revision: it.rev, Events: evs, ResumeRevision: it.rev}, nil
	}
	return nil, nil
}

// inScope returns the events of the subscription's repository.
func (s *Subscription) inScope(evs []Event) []Event {
	if s.req.Repository == "" {
		return evs
	}
	var out []Event
	for _, e := range evs {
		if e.Repository == s.req.Repository {
			out = append(out, e)
		}
	}
	return out
}

// nextInitial returns the next page of the initial state, then its end.
func (s *Subscription) nextInitial() (*Message, error) {
	if s.initNext == nil { // stopped by Close
		return nil, fmt.Errorf("feed: subscription ended: %w", context.Cause(s.ctx))
	}
	var evs []Event
	for len(evs) < s.f.cfg.PageSize {
		e, err, ok := s.initNext()
		if err != nil {
			s.stopInitial()
			return nil, err
		}
		if !ok {
			break
		}
		evs = append(evs, e)
	}
	if len(evs) > 0 {
		return &Message{Kind: KindInitial, Revision: s.initRev, Events: evs}, nil
	}
	s.stopInitial()
	if err := s.attach(s.initRev); err != nil {
		return nil, err
	}
	return &Message{Kind: KindInitialEnd, Revision: s.initRev, ResumeRevision: s.initRev}, nil
}

// catchUp follows etcd's history from rev+1 for s with a watch of its own
// and hands s the changes in order. Whenever the hub's ring holds every
// change after the revision it reached, it offers s to join the ring
// there; s takes the offer when it reads it, if the ring still holds
// what s needs, and then ends the catch-up (ctx). When s's buffer is full
// it stops its watch and starts it again once s has read on, so that a
// slow subscriber costs no more memory than the buffer.
func (f *Feed) catchUp(ctx context.Context, cq chan<- cqItem, dec *decoder, rev int64) {
	wait := 50 * time.Millisecond
	for ctx.Err() == nil {
		f.offer(cq, rev)
		reached, err := f.catchUpOnce(ctx, cq, dec, rev)
		if _, ok := errors.AsType[*CompactedError](err); ok {
			select {
			case cq <- cqItem{err: err}:
			case <-ctx.Done():
			}
			return
		}
		if reached > rev {
			rev, wait = reached, 50*time.Millisecond
			if errors.Is(err, errPaused) {
				continue
			}
		}
		if ctx.Err() == nil {
			f.log.Info("feed: catch-up watch broke; resuming", zap.Int64("revision", rev), zap.Error(err))
			ctxtime.Sleep(ctx, wait)
			wait = min(2*wait, 5*time.Second)
		}
	}
}

// offer tells the subscription it may join the ring after rev, if the ring holds every
// change after rev. An offer that does not fit in its buffer is dropped: a
// later one comes.
func (f *Feed) offer(cq chan<- cqItem, rev int64) {
	f.mu.Lock()
	ok := !f.closed && f.ready && f.ringStart <= rev
	f.mu.Unlock()
	if ok {
		select {
		case cq <- cqItem{rev: rev, offer: true}:
		default:
		}
	}
}

// errPaused: the catch-up stopped its watch for a slow subscriber.
var errPaused = errors.New("feed: catch-up paused")

// catchUpOnce runs one watch from rev+1 and returns the revision up to
// which it handed every change over.
func (f *Feed) catchUpOnce(ctx context.Context, cq chan<- cqItem, dec *decoder, rev int64) (int64, error) {
	w := clientv3.NewWatcher(f.cli)
	defer w.Close()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	ch := w.Watch(wctx, f.watchFrom, clientv3.WithRange(f.watchEnd), clientv3.WithRev(rev+1), clientv3.WithPrevKV())
	// Progress is answered only once the watch has caught up with etcd:
	// that answer tells how far the catch-up has got when nothing changes.
	tick := time.NewTicker(f.cfg.ProgressRequestInterval)
	defer tick.Stop()
	for {
		select {
		case <-wctx.Done():
			return rev, wctx.Err()
		case <-tick.C:
			_ = w.RequestProgress(wctx)
			// Again: an offer dropped for a full buffer is otherwise
			// repeated only on a response, and etcd answers no progress
			// request for a watch started past its current revision, so
			// on an idle etcd none would come.
			f.offer(cq, rev)
		case resp, ok := <-ch:
			if !ok {
				return rev, errWatchEnded
			}
			if resp.CompactRevision != 0 {
				return rev, &CompactedError{Revision: rev, CompactRevision: resp.CompactRevision}
			}
			if err := resp.Err(); err != nil {
				return rev, err
			}
			if resp.IsProgressNotify() {
				if p := resp.Header.Revision; p > rev {
					rev = p
					select {
					case cq <- cqItem{rev: p, progress: true}:
					default:
					}
				}
				f.offer(cq, rev)
				continue
			}
			paused := false
			for r, evs := range byRevision(resp.Events) {
				// Not wctx: a pause cancels it, and the rest of the
				// response is still handed over.
				out, err := dec.apply(ctx, r, evs)
				if err != nil {
					return rev, err
				}
				if len(out) > 0 {
					it := cqItem{rev: r, events: out}
					select {
					case cq <- it:
					default:
						// Stop the watch before waiting: etcd's client
						// buffers whatever arrives meanwhile.
						cancel()
						paused = true
						select {
						case cq <- it:
						case <-ctx.Done():
							return rev, ctx.Err()
						}
					}
				}
				rev = r
			}
			if paused {
				return rev, errPaused
			}
			f.offer(cq, rev)
		}
	}
}
