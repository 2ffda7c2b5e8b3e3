package feed

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"graveler/etcdkv"
	"graveler/internal/ctxtime"
	"graveler/keys"
)

// Config tunes a Feed. Zero values take the defaults noted.
type Config struct {
	// RingSize bounds the revisions with ref changes the hub keeps in
	// memory (default 4096). A subscription starting within them is served
	// from memory; one that falls further behind is closed (ErrTooSlow).
	RingSize int
	// RingEvents bounds the events those revisions hold (default 65536).
	RingEvents int
	// CatchUpBuffer bounds the revisions a catch-up reads ahead of its
	// subscriber (default 256); beyond it the catch-up pauses its watch.
	CatchUpBuffer int
	// CommitCacheSize bounds the commit records kept for the commit
	// field of moves (default 4096).
	CommitCacheSize int
	// PageSize is the number of keys of one etcd read, and of events of
	// one initial-state message (default 500).
	PageSize int
	// ProgressRequestInterval is the least time between two progress
	// requests on one watch (default 100ms).
	ProgressRequestInterval time.Duration
	// Logger receives the feed's logs (default: none).
	Logger *zap.Logger
}

func (c *Config) defaults() {
	if c.RingSize <= 0 {
		c.RingSize = 4096
	}
	if c.RingEvents <= 0 {
		c.RingEvents = 65536
	}
	if c.CatchUpBuffer <= 0 {
		c.CatchUpBuffer = 256
	}
	if c.CommitCacheSize <= 0 {
		c.CommitCacheSize = 4096
	}
	if c.PageSize <= 0 {
		c.PageSize = 500
	}
	if c.ProgressRequestInterval <= 0 {
		c.ProgressRequestInterval = 100 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// entry is one revision with ref changes in the hub's ring.
type entry struct {
	seq    uint64
	rev    int64
	events []Event
}

// Feed is the change feed of one etcd-backed store: one hub watching
// etcd, shared by every Subscription. See the package doc.
type Feed struct {
	store *etcdkv.Store
	cli   *clientv3.Client
	cfg   Config
	log   *zap.Logger

	commits *commitCache
	// The watched range, [watchFrom, watchEnd): the repository records,
	// the cleaner's work list and every repository partition, and no
	// staging partition.
	watchFrom, watchEnd string
	reposPrefix         string

	ctx    context.Context // ends with Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the hub and the catch-ups
	once   sync.Once

	mu     sync.Mutex
	closed bool
	// ready: the hub has a state and a ring (not while it (re)loads).
	ready bool
	// epoch counts the hub's fresh starts; a subscription reading the ring
	// of an older epoch fails with epochErr (the hub lost changes).
	epoch    uint64
	epochErr error
	// The ring holds every revision with ref changes in (ringStart, rev];
	// entries[i].seq == tailSeq+i, and headSeq is the next seq.
	entries         []entry
	ringEvents      int
	tailSeq         uint64
	headSeq         uint64
	ringStart       int64
	rev             int64
	progressRev     int64  // the last progress known: every change up to it
	progressSeq     uint64 // is in the ring below this seq
	wake            chan struct{}
	wantProgress    bool
	lastProgressReq time.Time
	// watchCancel ends the hub's current etcd watch, and rewatchHook runs
	// before the hub re-establishes a broken one (for tests).
	watchCancel context.CancelFunc
	rewatchHook func()
}

// New returns the feed of store and starts its hub, which follows etcd
// until Close (retrying while etcd is unreachable).
func New(store *etcdkv.Store, cfg Config) *Feed {
	cfg.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	f := &Feed{
		store:       store,
		cli:         store.Client(),
		cfg:         cfg,
		log:         cfg.Logger,
		commits:     newCommitCache(cfg.CommitCacheSize),
		watchFrom:   store.RawPrefix(keys.Graveler()) + keys.ReposPrefix,
		reposPrefix: store.RawPrefix(keys.Graveler()) + keys.ReposPrefix,
		// Every repository partition is <root>/repo:<...>/, and ';' follows
		// ':' in byte order.
		watchEnd: store.Prefix() + "/repo;",
		ctx:      ctx,
		cancel:   cancel,
		wake:     make(chan struct{}),
	}
	f.wg.Go(f.run)
	return f
}

// Close stops the hub and every catch-up and ends every subscription with
// ErrClosed. It waits for the feed's goroutines and is safe to call more
// than once.
func (f *Feed) Close() error {
	f.once.Do(func() {
		f.mu.Lock()
		f.closed = true
		f.notifyLocked()
		f.mu.Unlock()
		f.cancel()
		f.wg.Wait()
	})
	return nil
}

// notifyLocked wakes every subscription waiting for the ring.
func (f *Feed) notifyLocked() {
	close(f.wake)
	f.wake = make(chan struct{})
}

// run is the hub: load the repository records, follow etcd from there,
// and start afresh when the watch falls behind etcd's compaction.
func (f *Feed) run() {
	wait := 100 * time.Millisecond
	for f.ctx.Err() == nil {
		dec, rev, err := f.newDecoder(f.ctx, 0)
		if err != nil {
			if f.ctx.Err() == nil {
				f.log.Warn("feed: cannot load the repository records; retrying", zap.Duration("wait", wait), zap.Error(err))
				ctxtime.Sleep(f.ctx, wait)
				wait = min(2*wait, 5*time.Second)
			}
			continue
		}
		wait = 100 * time.Millisecond
		f.start(rev)
		err = f.follow(dec)
		if ce, ok := errors.AsType[*CompactedError](err); ok {
			watchRestarts.WithLabelValues("compacted").Inc()
			f.log.Error("feed: the hub fell behind etcd's compaction: closing its subscribers and starting afresh",
				zap.Int64("revision", ce.Revision), zap.Int64("compact_revision", ce.CompactRevision))
			f.endEpoch(ce)
		}
	}
}

// start opens the ring at rev.
func (f *Feed) start(rev int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready = true
	f.ringStart, f.rev = rev, rev
	f.progressRev, f.progressSeq = rev, f.headSeq
	f.tailSeq = f.headSeq
	f.entries, f.ringEvents = nil, 0
	hubRevision.Set(float64(rev))
	f.notifyLocked()
}

// endEpoch fails every subscription reading the ring: the hub missed
// changes.
func (f *Feed) endEpoch(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready = false
	f.epoch++
	f.epochErr = err
	f.entries, f.ringEvents = nil, 0
	f.tailSeq = f.headSeq
	f.notifyLocked()
}

// errWatchEnded: the hub's watch channel closed.
var errWatchEnded = errors.New("feed: watch ended")

// follow watches the range from the hub's revision on, re-establishing the
// watch from the last revision seen when it breaks. It returns when the
// feed closes, or with a *CompactedError.
func (f *Feed) follow(dec *decoder) error {
	wait := 50 * time.Millisecond
	for {
		from := f.coveredRev()
		err := f.watchOnce(dec, from)
		if f.ctx.Err() != nil {
			return f.ctx.Err()
		}
		if _, ok := errors.AsType[*CompactedError](err); ok {
			return err
		}
		watchRestarts.WithLabelValues("error").Inc()
		f.mu.Lock()
		hook := f.rewatchHook
		f.mu.Unlock()
		if hook != nil {
			hook()
		}
		progressed := f.coveredRev() > from
		if progressed {
			wait = 50 * time.Millisecond
		}
		f.log.Warn("feed: etcd watch broke; resuming after the last revision seen",
			zap.Int64("revision", f.coveredRev()), zap.Duration("wait", wait), zap.Error(err))
		ctxtime.Sleep(f.ctx, wait)
		if !progressed {
			wait = min(2*wait, 5*time.Second)
		}
	}
}

// coveredRev is the revision up to which the hub has every change.
func (f *Feed) coveredRev() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rev
}

// watchOnce runs one etcd watch from rev+1 until it breaks.
func (f *Feed) watchOnce(dec *decoder, rev int64) error {
	// A watcher of its own gives the hub its own gRPC stream, so that a
	// progress request is answered as soon as this one watch is synced.
	w := clientv3.NewWatcher(f.cli)
	defer w.Close()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(f.ctx))
	defer cancel()
	f.mu.Lock()
	f.watchCancel = cancel
	f.mu.Unlock()
	defer func() {
		// Only a watch that runs can be broken (tests).
		f.mu.Lock()
		f.watchCancel = nil
		f.mu.Unlock()
	}()
	ch := w.Watch(wctx, f.watchFrom, clientv3.WithRange(f.watchEnd), clientv3.WithRev(rev+1), clientv3.WithPrevKV())
	tick := time.NewTicker(f.cfg.ProgressRequestInterval / 2)
	defer tick.Stop()
	for {
		select {
		case <-wctx.Done():
			return wctx.Err()
		case <-tick.C:
			if f.progressDue() {
				_ = w.RequestProgress(wctx)
			}
		case resp, ok := <-ch:
			if !ok {
				return errWatchEnded
			}
			if resp.CompactRevision != 0 {
				return &CompactedError{Revision: f.coveredRev(), CompactRevision: resp.CompactRevision}
			}
			if err := resp.Err(); err != nil {
				return err
			}
			if resp.IsProgressNotify() {
				f.progress(resp.Header.Revision)
				continue
			}
			for rev, evs := range byRevision(resp.Events) {
				out, err := dec.apply(wctx, rev, evs)
				if err != nil {
					return err
				}
				f.publish(rev, out)
			}
		}
	}
}

// byRevision yields the events of a watch response one revision at a
// time. etcd never splits a revision across responses (without
// fragmentation, which the feed does not ask for).
func byRevision(evs []*clientv3.Event) func(yield func(int64, []*clientv3.Event) bool) {
	return func(yield func(int64, []*clientv3.Event) bool) {
		for i := 0; i < len(evs); {
			j := i + 1
			for j < len(evs) && evs[j].Kv.ModRevision == evs[i].Kv.ModRevision {
				j++
			}
			if !yield(evs[i].Kv.ModRevision, evs[i:j]) {
				return
			}
			i = j
		}
	}
}

// progressDue reports whether a subscription waits for a progress
// notification and none was asked for lately, and notes the request.
func (f *Feed) progressDue() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.wantProgress || time.Since(f.lastProgressReq) < f.cfg.ProgressRequestInterval {
		return false
	}
	f.lastProgressReq = time.Now()
	return true
}

// askProgress asks the hub for a progress notification (coalesced).
func (f *Feed) askProgress() {
	f.mu.Lock()
	f.wantProgress = true
	f.mu.Unlock()
}

// progress: etcd says every change up to rev was delivered.
func (f *Feed) progress(rev int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wantProgress = false
	if rev <= f.rev {
		return
	}
	f.rev = rev
	f.progressRev, f.progressSeq = rev, f.headSeq
	hubRevision.Set(float64(rev))
	f.notifyLocked()
}

// publish adds the changes of revision rev to the ring; a revision with no
// ref change only moves the hub's revision on.
func (f *Feed) publish(rev int64, evs []Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev = rev
	hubRevision.Set(float64(rev))
	if len(evs) == 0 {
		f.progressRev, f.progressSeq = rev, f.headSeq
		f.notifyLocked()
		return
	}
	f.entries = append(f.entries, entry{seq: f.headSeq, rev: rev, events: evs})
	f.headSeq++
	f.ringEvents += len(evs)
	for len(f.entries) > 1 && (len(f.entries) > f.cfg.RingSize || f.ringEvents > f.cfg.RingEvents) {
		f.ringStart = f.entries[0].rev
		f.ringEvents -= len(f.entries[0].events)
		f.entries[0] = entry{}
		f.entries = f.entries[1:]
		f.tailSeq++
	}
	f.notifyLocked()
}

// seqAfterLocked is the seq of the first ring entry after rev.
func (f *Feed) seqAfterLocked(rev int64) uint64 {
	i := sort.Search(len(f.entries), func(i int) bool { return f.entries[i].rev > rev })
	return f.tailSeq + uint64(i)
}

// joinLocked places s in the ring after rev when the ring holds every
// change after rev.
func (f *Feed) joinLocked(rev int64) (epoch, cursor uint64, ok bool) {
	if f.closed || !f.ready || f.ringStart > rev {
		return 0, 0, false
	}
	return f.epoch, f.seqAfterLocked(rev), true
}

// currentRevision is etcd's current revision.
func (f *Feed) currentRevision(ctx context.Context) (int64, error) {
	resp, err := f.cli.Get(ctx, f.reposPrefix, clientv3.WithCountOnly())
	if err != nil {
		return 0, f.readErr(ctx, "read the current revision", 0, err)
	}
	return resp.Header.Revision, nil
}

// readErr turns the error of a read at rev into the feed's: a compaction
// is a *CompactedError naming etcd's compact revision, a read that ended
// with the feed is ErrClosed.
func (f *Feed) readErr(ctx context.Context, what string, rev int64, err error) error {
	if f.ctx.Err() != nil {
		return ErrClosed
	}
	if isCompacted(err) {
		return &CompactedError{Revision: rev, CompactRevision: f.compactRevision(ctx)}
	}
	return etcdErr(ctx, what, err)
}

// compactRevision asks etcd for its compaction revision: a watch from
// revision 1 is answered with it at once (0 when it cannot tell).
func (f *Feed) compactRevision(ctx context.Context) int64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	w := clientv3.NewWatcher(f.cli)
	defer w.Close()
	for resp := range w.Watch(ctx, f.reposPrefix, clientv3.WithRev(1)) {
		return resp.CompactRevision
	}
	return 0
}

// String names the feed in logs.
func (f *Feed) String() string { return fmt.Sprintf("feed(%s)", f.store.Prefix()) }
