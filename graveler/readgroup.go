package graveler

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"graveler/graveler/internal/groupctx"
	"graveler/kv"
)

// Grouped reads (seed 004's amortized reads). A Get of a branch reads the
// repository and branch records and its key in each of the branch's
// staging tokens in one read-only transaction, at one revision
// (FencedReader). Gets of the same branch that arrive while such a
// transaction is in flight do not send their own: they queue and go
// together in the next one, which reads every key they ask for in the
// tokens of the branch as last read. The branch record, read at the same
// revision as the entries, is every reader's fence: if it names other
// tokens than the ones read, the group reads again with the branch as it
// now is, as a lone Get would. A reader that finds no group in flight sends
// its own transaction at once, on its own context, so grouping adds no
// wait: a group only forms behind a transaction already in flight.
//
// Linearizability: every reader of a transaction arrived before it was
// sent and is answered after it returned, so the revision it read lies
// within each reader's call.
//
// Limits: a transaction reads at most kv.MaxSetAndReadOps records, so a
// group whose distinct keys times the branch's tokens (plus the fence
// records and one record per token) would exceed that is split into
// transactions sent at once, each with its own fence.
//
// Callers that give up: a reader whose context ends is answered with its
// context's error at once, whether its transaction was sent or not, and
// never with a result after that; a queued reader is taken out of its
// group. A shared transaction runs on a context that ends only once every
// one of its readers' contexts has ended, so one giving up fails no other.

var (
	readGroupTxns = promauto.NewCounter(prometheus.CounterOpts{
		Name: "graveler_read_group_transactions_total",
		Help: "Read-only etcd transactions sent for Gets of a branch, each serving one or more Gets (grouped reads).",
	})
	readGroupReaders = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "graveler_read_group_readers",
		Help:    "Gets of a branch served by one read-only etcd transaction.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 8),
	})
)

// readGroups holds, per branch (of one repository incarnation), whether a
// grouped read is in flight and the readers queued behind it.
type readGroups struct {
	mu     sync.Mutex
	groups map[string]*readGroup
}

func newReadGroups() *readGroups { return &readGroups{groups: map[string]*readGroup{}} }

type readGroup struct {
	inFlight bool
	queue    []*readWaiter
}

// readAnswer is what a grouped read found for one reader. final: v and err
// are the answer (a staged value, a staged tombstone, or a failure);
// otherwise the key is not staged and the answer is in the head commit of
// cur, the branch read with repo in the reader's fence.
type readAnswer struct {
	final bool
	v     *Value
	err   error
	repo  *RepositoryRecord
	cur   *Branch
}

// readWaiter is one Get in a group.
type readWaiter struct {
	ctx     context.Context
	key     Key
	claimed atomic.Bool // answered (by its read, or by giving up)
	queued  bool        // waiting for the next transaction; guarded by readGroups.mu
	done    chan struct{}
	ans     readAnswer
}

// answer answers w unless it was answered already, and reports whether
// it did: the first answer, the read's or the context's, is the only one.
func (w *readWaiter) answer(a readAnswer) bool {
	if !w.claimed.CompareAndSwap(false, true) {
		return false
	}
	w.ans = a
	close(w.done)
	return true
}

func liveWaiters(ws []*readWaiter) []*readWaiter {
	return slices.DeleteFunc(slices.Clone(ws), func(w *readWaiter) bool { return w.claimed.Load() })
}

// queuedReads reports how many Gets of branch id wait for the next
// grouped read (for tests).
func (g *Graveler) queuedReads(repo *RepositoryRecord, id BranchID) int {
	if g.reads == nil {
		return 0
	}
	g.reads.mu.Lock()
	defer g.reads.mu.Unlock()
	if grp := g.reads.groups[branchCacheKey(repo, id)]; grp != nil {
		return len(grp.queue)
	}
	return 0
}

// groupedGet reads key on branch id, resolved as b, sharing the
// transaction with the Gets of the branch that wait beside it.
func (g *Graveler) groupedGet(ctx context.Context, repo *RepositoryRecord, id BranchID, b *Branch, key Key) readAnswer {
	rg := g.reads
	gk := branchCacheKey(repo, id)
	wt := &readWaiter{ctx: ctx, key: key, done: make(chan struct{})}
	rg.mu.Lock()
	grp := rg.groups[gk]
	if grp == nil {
		grp = &readGroup{}
		rg.groups[gk] = grp
	}
	if !grp.inFlight {
		grp.inFlight = true
		rg.mu.Unlock()
		var last *Branch
		func() {
			// Deferred: a panic in the read must not leave the group in
			// flight, with every later Get of the branch queued for good.
			defer func() { g.nextReads(gk, grp, repo, id, last, b) }()
			last = g.readTogether(ctx, repo, id, b, []*readWaiter{wt})
		}()
		<-wt.done
		return wt.ans
	}
	wt.queued = true
	grp.queue = append(grp.queue, wt)
	rg.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { rg.abandon(grp, wt) })
	<-wt.done
	stop()
	return wt.ans
}

// abandon answers a reader whose context ended, and takes it out of the
// queue if it is still there.
func (rg *readGroups) abandon(grp *readGroup, wt *readWaiter) {
	if !wt.answer(readAnswer{final: true, err: wt.ctx.Err()}) {
		return
	}
	rg.mu.Lock()
	defer rg.mu.Unlock()
	if wt.queued {
		grp.queue = slices.DeleteFunc(grp.queue, func(q *readWaiter) bool { return q == wt })
		wt.queued = false
	}
}

// nextReads sends the group's queued readers, if any, in one transaction
// (or several, when they would not fit in one), on a goroutine of its own
// so that the reader whose transaction just returned is answered at once;
// otherwise the group is idle and forgotten. last is the branch as the
// finished transaction read it, or nil if it failed; guess is what it
// assumed.
func (g *Graveler) nextReads(gk string, grp *readGroup, repo *RepositoryRecord, id BranchID, last, guess *Branch) {
	rg := g.reads
	rg.mu.Lock()
	ws := grp.queue
	grp.queue = nil
	for _, wt := range ws {
		wt.queued = false
	}
	ws = liveWaiters(ws)
	if len(ws) == 0 {
		grp.inFlight = false
		delete(rg.groups, gk)
		rg.mu.Unlock()
		return
	}
	rg.mu.Unlock()
	b := last
	if b == nil {
		b = guess
	}
	go func() {
		ctx, cancel := readContext(ws)
		last := g.readTogether(ctx, repo, id, b, ws)
		cancel()
		g.nextReads(gk, grp, repo, id, last, b)
	}()
}

// readTogether reads the keys of ws in the tokens of b, with the
// repository and branch records, and answers every reader of ws that has
// not given up. It returns the branch as read, or nil if the read failed.
func (g *Graveler) readTogether(ctx context.Context, repo *RepositoryRecord, id BranchID, b *Branch, ws []*readWaiter) *Branch {
	fail := func(err error) *Branch {
		for _, wt := range ws {
			wt.answer(readAnswer{final: true, err: err})
		}
		return nil
	}
	for attempt := 0; ; attempt++ {
		toks := tokens(b)
		var keys []string
		slot := map[string]int{}
		for _, wt := range ws {
			if _, ok := slot[string(wt.key)]; !ok {
				slot[string(wt.key)] = len(keys)
				keys = append(keys, string(wt.key))
			}
		}
		// The fence records, each key in each token, and one record per
		// token the staging manager reads beside its entries (its range
		// tombstones), all in one transaction.
		if len(keys) > 1 && 2+(len(keys)+1)*len(toks) > kv.MaxSetAndReadOps {
			return g.readSplit(ctx, repo, id, b, ws, func(wt *readWaiter) bool { return slot[string(wt.key)] < len(keys)/2 })
		}
		reads, err := g.fencer.BranchFenceReads(repo, id)
		if err != nil {
			return fail(err)
		}
		for _, k := range keys {
			for _, st := range toks {
				r, err := g.freader.EntryRef(st, Key(k))
				if err != nil {
					return fail(err)
				}
				reads = append(reads, r)
			}
		}
		got, err := g.freader.ReadAt(ctx, reads)
		readGroupTxns.Inc()
		readGroupReaders.Observe(float64(len(ws)))
		if err != nil {
			return fail(err)
		}
		r, cur, err := g.fencer.ParseBranchFence(repo, id, got[:2])
		if err != nil {
			g.repos.forget(repo.RepositoryID)
			g.cache.forget(repo, id)
			return fail(err)
		}
		g.repos.put(r)
		g.cache.put(repo, id, cur)
		if !sameTokens(b, cur) {
			// The branch names other tokens than those read: read again
			// with the branch as it now is, as a lone Get does.
			readRetries.Inc()
			if attempt >= g.cfg.FenceRetries {
				fail(g.fenceExhausted(repo, id))
				return cur
			}
			b = cur
			if ws = liveWaiters(ws); len(ws) == 0 {
				return cur
			}
			continue
		}
		for _, wt := range ws {
			base := 2 + slot[string(wt.key)]*len(toks)
			v, found, err := firstStaged(repo, wt.key, toks, func(i int, st StagingToken) (*Value, error) {
				return g.freader.ParseEntry(st, wt.key, got[base+i])
			})
			if found || err != nil {
				wt.answer(readAnswer{final: true, v: v, err: err})
			} else {
				wt.answer(readAnswer{repo: r, cur: cur})
			}
		}
		return cur
	}
}

// readSplit runs readTogether on the readers first picks and on the
// others at once, each its own transaction and fence; first picks the
// readers of half the distinct keys, so each half holds some.
func (g *Graveler) readSplit(ctx context.Context, repo *RepositoryRecord, id BranchID, b *Branch, ws []*readWaiter, first func(*readWaiter) bool) *Branch {
	var lo, hi []*readWaiter
	for _, wt := range ws {
		if first(wt) {
			lo = append(lo, wt)
		} else {
			hi = append(hi, wt)
		}
	}
	var other *Branch
	done := make(chan struct{})
	go func() {
		defer close(done)
		other = g.readTogether(ctx, repo, id, b, hi)
	}()
	last := g.readTogether(ctx, repo, id, b, lo)
	<-done
	if last == nil {
		return other
	}
	return last
}

// sameTokens reports whether two reads of a branch name the same staging
// tokens (tokens are never reused).
func sameTokens(a, b *Branch) bool {
	return a.StagingToken == b.StagingToken && slices.Equal(a.SealedTokens, b.SealedTokens)
}

// readContext returns the context a request on behalf of ws runs on
// (groupctx.Join of theirs). Its cancel function must be called.
func readContext(ws []*readWaiter) (context.Context, context.CancelFunc) {
	ctxs := make([]context.Context, len(ws))
	for i, wt := range ws {
		ctxs[i] = wt.ctx
	}
	return groupctx.Join(ctxs)
}

// repoCheck is the repository read of a Get of an immutable ref, started
// while the ref resolves.
type repoCheck struct {
	done   chan struct{}
	repo   *RepositoryRecord
	err    error
	cancel context.CancelFunc
}

// repoCheck starts reading the repository unless ref is a branch whose
// record the cache holds (then the Get is most likely a fenced read of
// the branch, whose transaction reads the repository itself).
func (g *Graveler) repoCheck(ctx context.Context, repo *RepositoryRecord, ref Ref) *repoCheck {
	c := &repoCheck{cancel: func() {}}
	if id := BranchID(ref); ValidateBranchID(id) == nil {
		if _, ok := g.cache.get(repo, id); ok {
			return c
		}
	}
	rctx, cancel := context.WithCancel(ctx)
	c.done, c.cancel = make(chan struct{}), cancel
	go func() {
		defer close(c.done)
		c.repo, c.err = g.refs.GetRepository(rctx, repo.RepositoryID)
	}()
	return c
}

// wait returns the repository as read after the Get began: the same
// incarnation as repo, the one the ref was resolved in, or
// ErrRepositoryNotFound.
func (c *repoCheck) wait(ctx context.Context, g *Graveler, repo *RepositoryRecord) (*RepositoryRecord, error) {
	if c.done == nil {
		r, err := g.refs.GetRepository(ctx, repo.RepositoryID)
		c.repo, c.err = r, err
	} else {
		<-c.done
	}
	if c.err != nil {
		g.repos.forget(repo.RepositoryID)
		return nil, c.err
	}
	if c.repo.UniqueID != repo.UniqueID {
		g.repos.forget(repo.RepositoryID)
		return nil, fmt.Errorf("%w: %s was deleted and created again", ErrRepositoryNotFound, repo.RepositoryID)
	}
	g.repos.put(c.repo)
	return c.repo, nil
}
