package staging

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"graveler/graveler"
	"graveler/graveler/internal/groupctx"
	"graveler/keys"
	"graveler/kv"
)

// Fenced writes are group-committed: one kv.SetAndRead per staging token
// and set of reads is in flight at a time. A writer that finds none in
// flight sends its own at once, on its own context, so a lone writer waits
// for nothing; writers that arrive meanwhile queue and go together in the
// next one. Every writer of a batch gets the same reads, made after all its
// writes, which is all the fence asks.
//
// Limits: a batch holds more than one write only while it stays within
// Config.FencedBatchSize distinct keys and Config.FencedBatchBytes bytes,
// also when a later write of a key already queued replaces the earlier
// one's value; a write larger than the byte limit goes in a batch alone.
// If the store refuses a shared request for its size or its number of
// operations (kv.ErrValueTooLarge, kv.ErrKeyTooLarge, kv.ErrTooManyOps),
// nothing of it was applied, and each write of the batch is sent again on
// its own, so only a write too large by itself fails.
//
// Callers that give up: a writer whose context ends while its batch is
// still queued is taken out of the batch and answered with its context's
// error; its write is never sent. Once a batch is sent, its writers wait
// for the request's outcome, even past their own deadlines, so nobody is
// answered while a write of theirs may still land. A batch's request runs
// on a context of its own that ends when the contexts of all its writers
// have ended (with the latest of their deadlines, when all have one), so
// one writer giving up does not fail the others, and a request nobody
// waits for any more is abandoned as a lone writer's would be.

// setAndReadUnsealed is kv.SetAndRead of writes into one staging token
// (they share writes[0]'s partition), applied only while the token has no
// seal marker (keys.StagingSealed). When it has one, nothing is written
// and the reads are returned with an error wrapping
// graveler.ErrStagingTokenSealed: they were made at the instant the
// marker was found, so they already show what retired the token.
func setAndReadUnsealed(ctx context.Context, store kv.Store, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, error) {
	got, applied, err := kv.SetAndReadUnless(ctx, store, []kv.KeyRef{sealedRef(writes[0].Partition)}, writes, reads)
	if err == nil && !applied {
		return got, sealedErr(writes[0].Partition)
	}
	return got, err
}

// sealedRef names the seal marker of the token whose partition is p.
func sealedRef(p []byte) kv.KeyRef {
	return kv.KeyRef{Partition: p, Key: keys.StagingSealed()}
}

// sealedErr is what a write refused by the seal marker of partition p
// returns.
func sealedErr(p []byte) error {
	tok, _ := keys.ParseStagingPartition(p)
	return fmt.Errorf("staging: token %q: %w", tok, graveler.ErrStagingTokenSealed)
}

// fencedWaiter is one caller's write waiting in a queued batch.
type fencedWaiter struct {
	ctx  context.Context
	w    kv.Write
	size int
	// queued is the batch holding it while that batch waits to be sent;
	// nil once it was sent or taken out. Guarded by fencedBatcher.mu.
	queued *fencedBatch
	stop   func() bool // stops watching ctx
	done   chan struct{}
	got    []kv.Entry
	err    error
}

// finish answers the waiter.
func (wt *fencedWaiter) finish(got []kv.Entry, err error) {
	wt.got, wt.err = got, err
	close(wt.done)
}

// finishShared answers a waiter whose write went in a request run on a
// context of the batch's (requestContext), first noting the request's
// revision, rev's, in the waiter's own context (kv.Revisions).
func (wt *fencedWaiter) finishShared(got []kv.Entry, err error, rev *kv.Revisions) {
	if err == nil {
		kv.NoteWrite(wt.ctx, rev.Last())
	}
	wt.finish(got, err)
}

// fencedBatch is a queued request: for each distinct key, the writers of
// it in arrival order, the last one's value being the one sent.
type fencedBatch struct {
	reads   []kv.KeyRef
	keys    []string
	waiters map[string][]*fencedWaiter
	n       int // waiters
	bytes   int // of the writes to send
}

func newFencedBatch(reads []kv.KeyRef) *fencedBatch {
	return &fencedBatch{reads: reads, waiters: map[string][]*fencedWaiter{}}
}

// fits reports whether wt can join b without b going over the limits.
func (b *fencedBatch) fits(wt *fencedWaiter, maxWrites, maxBytes int) bool {
	if ws, ok := b.waiters[string(wt.w.Key)]; ok {
		return b.bytes-ws[len(ws)-1].size+wt.size <= maxBytes
	}
	return len(b.keys) < maxWrites && b.bytes+wt.size <= maxBytes
}

// add puts wt in b. A key already in b takes the later value: the two
// writes are concurrent, so either order is a valid outcome, and the
// earlier writer shares the later one's answer.
func (b *fencedBatch) add(wt *fencedWaiter) {
	k := string(wt.w.Key)
	ws, ok := b.waiters[k]
	if ok {
		b.bytes -= ws[len(ws)-1].size
	} else {
		b.keys = append(b.keys, k)
	}
	b.waiters[k] = append(ws, wt)
	b.bytes += wt.size
	b.n++
	wt.queued = b
}

// remove takes wt out of b; if it was the key's last writer, the one
// before it (if any) has its value sent again.
func (b *fencedBatch) remove(wt *fencedWaiter) {
	k := string(wt.w.Key)
	ws := b.waiters[k]
	i := slices.Index(ws, wt)
	if i < 0 {
		return
	}
	b.bytes -= ws[len(ws)-1].size
	ws = slices.Delete(ws, i, i+1)
	if len(ws) == 0 {
		delete(b.waiters, k)
		b.keys = slices.DeleteFunc(b.keys, func(s string) bool { return s == k })
	} else {
		b.waiters[k] = ws
		b.bytes += ws[len(ws)-1].size
	}
	b.n--
	wt.queued = nil
}

// writes returns the writes to send, one per key.
func (b *fencedBatch) writes() []kv.Write {
	out := make([]kv.Write, 0, len(b.keys))
	for _, k := range b.keys {
		ws := b.waiters[k]
		out = append(out, ws[len(ws)-1].w)
	}
	return out
}

// all returns every waiter of b.
func (b *fencedBatch) all() []*fencedWaiter {
	out := make([]*fencedWaiter, 0, b.n)
	for _, k := range b.keys {
		out = append(out, b.waiters[k]...)
	}
	return out
}

// fencedGroup is the state of one (token, reads) pair: whether a request
// is in flight, and the batches queued behind it.
type fencedGroup struct {
	inFlight bool
	queue    []*fencedBatch
}

type fencedBatcher struct {
	store     kv.Store
	maxWrites int
	maxBytes  int
	mu        sync.Mutex
	groups    map[string]*fencedGroup
}

func newFencedBatcher(store kv.Store, cfg Config) *fencedBatcher {
	return &fencedBatcher{store: store, maxWrites: cfg.FencedBatchSize, maxBytes: cfg.FencedBatchBytes, groups: map[string]*fencedGroup{}}
}

func groupKey(part []byte, reads []kv.KeyRef) string {
	k := string(part)
	for _, r := range reads {
		k += "\x00" + string(r.Partition) + "\x00" + string(r.Key)
	}
	return k
}

// tooLarge reports whether the store refused a request for its size or
// its number of operations, which it does before applying any of it.
func tooLarge(err error) bool {
	return errors.Is(err, kv.ErrValueTooLarge) || errors.Is(err, kv.ErrKeyTooLarge) || errors.Is(err, kv.ErrTooManyOps)
}

// do writes w and returns reads made after it, sharing the request with
// concurrent calls of the same group.
func (fb *fencedBatcher) do(ctx context.Context, w kv.Write, reads []kv.KeyRef) ([]kv.Entry, error) {
	gk := groupKey(w.Partition, reads)
	fb.mu.Lock()
	g := fb.groups[gk]
	if g == nil {
		g = &fencedGroup{}
		fb.groups[gk] = g
	}
	if !g.inFlight {
		// A lone writer sends its write at once, on its own context: its
		// request carries no one else's write (others only ever join a
		// queued batch), so its giving up harms nobody.
		g.inFlight = true
		fb.mu.Unlock()
		// Deferred: a panic in the store must not leave the group in
		// flight, with every later write of the token queued for good.
		defer fb.handOff(gk, g)
		got, err := setAndReadUnsealed(ctx, fb.store, []kv.Write{w}, reads)
		fencedWrites.Inc()
		fencedBatches.Inc()
		fencedBatchWrites.Observe(1)
		return got, err
	}
	wt := &fencedWaiter{ctx: ctx, w: w, size: len(w.Partition) + len(w.Key) + len(w.Value), done: make(chan struct{})}
	fb.enqueue(g, wt, reads)
	wt.stop = context.AfterFunc(ctx, func() { fb.abandon(g, wt) })
	fb.mu.Unlock()
	// No select on ctx here: a waiter taken out of its batch is answered
	// by abandon, and one whose batch was sent waits for the outcome.
	<-wt.done
	wt.stop()
	fencedWrites.Inc()
	return wt.got, wt.err
}

// enqueue adds wt to the group's last queued batch, or to a new one when
// that one cannot take it. fb.mu is held.
func (fb *fencedBatcher) enqueue(g *fencedGroup, wt *fencedWaiter, reads []kv.KeyRef) {
	if n := len(g.queue); n > 0 && g.queue[n-1].fits(wt, fb.maxWrites, fb.maxBytes) {
		g.queue[n-1].add(wt)
		return
	}
	b := newFencedBatch(reads)
	b.add(wt)
	g.queue = append(g.queue, b)
}

// abandon takes a waiter whose context ended out of its batch, if that
// batch has not been sent, and answers it; a batch left empty is dropped.
func (fb *fencedBatcher) abandon(g *fencedGroup, wt *fencedWaiter) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	b := wt.queued
	if b == nil {
		return // sent: the waiter waits for the outcome
	}
	b.remove(wt)
	if b.n == 0 {
		g.queue = slices.DeleteFunc(g.queue, func(q *fencedBatch) bool { return q == b })
	}
	wt.finish(nil, wt.ctx.Err())
}

// handOff starts the group's next queued batch, if any, on a goroutine of
// its own, so that the writer whose request just finished returns at once;
// otherwise the group is idle and forgotten. Writers whose context has
// ended are taken out first: a batch is sent with live writers only.
func (fb *fencedBatcher) handOff(gk string, g *fencedGroup) {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	for len(g.queue) > 0 {
		b := g.queue[0]
		g.queue = g.queue[1:]
		for _, wt := range b.all() {
			if err := wt.ctx.Err(); err != nil {
				b.remove(wt)
				wt.finish(nil, err)
				continue
			}
			wt.queued = nil
		}
		if b.n > 0 {
			go fb.run(gk, g, b)
			return
		}
	}
	g.inFlight = false
	delete(fb.groups, gk)
}

// run sends a batch, answers its writers and hands off to the next.
func (fb *fencedBatcher) run(gk string, g *fencedGroup, b *fencedBatch) {
	waiters := b.all()
	ctx, cancel := requestContext(waiters)
	ctx, rev := kv.WithRevisions(ctx)
	writes := b.writes()
	got, err := setAndReadUnsealed(ctx, fb.store, writes, b.reads)
	fencedBatches.Inc()
	fencedBatchWrites.Observe(float64(len(writes)))
	cancel()
	if err != nil && len(writes) > 1 && tooLarge(err) {
		fb.runAlone(b)
	} else {
		for _, wt := range waiters {
			wt.finishShared(got, err, rev)
		}
	}
	fb.handOff(gk, g)
}

// runAlone sends each key of a batch the store refused as too large on
// its own, so that each writer hears about its own write. The refused
// request applied nothing, so a writer that has given up since is not
// sent again: it is answered with its context's error, and its key
// carries the value of the last writer still waiting, if any.
func (fb *fencedBatcher) runAlone(b *fencedBatch) {
	for _, k := range b.keys {
		var ws []*fencedWaiter
		for _, wt := range b.waiters[k] {
			if err := wt.ctx.Err(); err != nil {
				wt.finish(nil, err)
				continue
			}
			ws = append(ws, wt)
		}
		if len(ws) == 0 {
			continue
		}
		ctx, cancel := requestContext(ws)
		ctx, rev := kv.WithRevisions(ctx)
		got, err := setAndReadUnsealed(ctx, fb.store, []kv.Write{ws[len(ws)-1].w}, b.reads)
		cancel()
		fencedBatches.Inc()
		fencedBatchWrites.Observe(1)
		for _, wt := range ws {
			wt.finishShared(got, err, rev)
		}
	}
}

// requestContext returns the context a request on behalf of waiters runs on
// (groupctx.Join of theirs). Its cancel function must be called.
func requestContext(waiters []*fencedWaiter) (context.Context, context.CancelFunc) {
	ctxs := make([]context.Context, len(waiters))
	for i, wt := range waiters {
		ctxs[i] = wt.ctx
	}
	return groupctx.Join(ctxs)
}

// FencedWrites reports whether the store does kv.SetAndRead in one round
// trip (kv.SetReader).
func (m *Manager) FencedWrites() bool {
	_, ok := m.store.(kv.SetReader)
	return ok
}

// SetAndRead is Set, reading reads no earlier than the write took effect
// (kv.SetAndRead): the writer's fence in the same round trip, shared with
// concurrent writers of the same token (see fencedBatcher). A token
// already retired (keys.StagingSealed) takes no write: the error wraps
// graveler.ErrStagingTokenSealed and the reads, made at the instant the
// seal was found, are returned with it.
func (m *Manager) SetAndRead(ctx context.Context, st graveler.StagingToken, key graveler.Key, value *graveler.Value, reads []kv.KeyRef) ([]kv.Entry, error) {
	w, err := stagedWrite(ctx, st, key, value)
	if err != nil {
		return nil, err
	}
	// The write and the seal marker's absence take two of the
	// transaction's places.
	if len(reads) > kv.MaxSetAndReadOps-2 {
		return nil, fmt.Errorf("staging: set %s in token %q: %w: %d fence reads", qkey(key), st, graveler.ErrInvalidArgument, len(reads))
	}
	var got []kv.Entry
	if m.cfg.FencedBatchSize > 1 {
		got, err = m.fenced.do(ctx, w, reads)
	} else {
		got, err = setAndReadUnsealed(ctx, m.store, []kv.Write{w}, reads)
	}
	if errors.Is(err, graveler.ErrStagingTokenSealed) {
		return got, err
	}
	if err != nil {
		return nil, storeErr(err, "set %s in token %q", qkey(key), st)
	}
	return got, nil
}

var _ graveler.FencedReader = (*Manager)(nil)

// FencedReads reports whether the store reads many keys at one instant in
// one round trip (kv.MultiGetter).
func (m *Manager) FencedReads() bool {
	_, ok := m.store.(kv.MultiGetter)
	return ok
}

// EntryRef names the kv record of key in token st.
func (m *Manager) EntryRef(st graveler.StagingToken, key graveler.Key) (kv.KeyRef, error) {
	p, err := partition(st)
	if err == nil {
		err = graveler.ValidateKey(key)
	}
	if err != nil {
		return kv.KeyRef{}, fmt.Errorf("staging: get %s in token %q: %w", qkey(key), st, err)
	}
	return kv.KeyRef{Partition: p, Key: keys.Entry(key)}, nil
}

// ParseEntry decodes what was read at EntryRef, as Get returns it.
func (m *Manager) ParseEntry(st graveler.StagingToken, key graveler.Key, got kv.Entry) (*graveler.Value, error) {
	if got.Predicate.IsAbsent() {
		return nil, errNotStaged
	}
	v, reset, err := decode(got.Value)
	switch {
	case err != nil:
		return nil, fmt.Errorf("staging: get %s in token %q: %w", qkey(key), st, err)
	case reset:
		return nil, errNotStaged
	}
	return v, nil
}

// errNotStaged is ParseEntry's answer for a key not staged: the common
// case of a grouped Get, which goes on to the next token or the commit,
// so it is not formatted per key (Get names the key).
var errNotStaged = fmt.Errorf("staging: %w", graveler.ErrEntryNotFound)

// ReadAt reads records at one instant (kv.GetMany). The range tombstones
// and reset ranges of every token whose entries are read are read with
// them, in the same request when that stays within kv.MaxSetAndReadOps,
// otherwise just before; an entry a tombstone deletes is returned as a
// stored tombstone, and one a reset range hides as a missing record, so
// ParseEntry answers for it as Get does.
func (m *Manager) ReadAt(ctx context.Context, reads []kv.KeyRef) ([]kv.Entry, error) {
	var parts [][]byte
	for _, r := range reads {
		if bytes.HasPrefix(r.Partition, keys.StagingPartitionPrefix()) && bytes.HasPrefix(r.Key, []byte(keys.EntryPrefix)) &&
			!slices.ContainsFunc(parts, func(p []byte) bool { return bytes.Equal(p, r.Partition) }) {
			parts = append(parts, r.Partition)
		}
	}
	extra := make([]kv.KeyRef, len(parts))
	for i, p := range parts {
		extra[i] = rangesRef(p)
	}
	var got, ranges []kv.Entry
	var err error
	switch {
	case len(parts) == 0:
		got, err = kv.GetMany(ctx, m.store, reads)
	case len(reads)+len(extra) <= kv.MaxSetAndReadOps:
		got, err = kv.GetMany(ctx, m.store, append(slices.Clip(reads), extra...))
		if err == nil {
			got, ranges = got[:len(reads)], got[len(reads):]
		}
	default:
		// Tombstones read before the entries: an entry staged after one
		// of them is still told from those staged before it.
		if ranges, err = kv.GetMany(ctx, m.store, extra); err == nil {
			got, err = kv.GetMany(ctx, m.store, reads)
		}
	}
	if err != nil {
		return nil, storeErr(err, "read %d records", len(reads))
	}
	for i, p := range parts {
		token, perr := keys.ParseStagingPartition(p)
		if perr != nil {
			continue
		}
		rs, err := decodeRanges(graveler.StagingToken(token), ranges[i])
		if err != nil {
			return nil, err
		}
		if len(rs) == 0 {
			continue
		}
		for j, r := range reads {
			if !bytes.Equal(r.Partition, p) {
				continue
			}
			key, kerr := keys.ParseEntry(r.Key)
			if kerr != nil {
				continue
			}
			at := got[j].Predicate.Version()
			if _, reset, derr := decode(got[j].Value); at > 0 && derr == nil && reset {
				// A reset record stages nothing: a delete range
				// covering the key deletes it, whenever it was written,
				// as it would a key the token never staged.
				at = 0
			}
			switch verdict, rev := rs.judge(key, at); verdict {
			case entryDeleted:
				got[j] = kv.Entry{Key: got[j].Key, Value: encode(nil), Predicate: kv.NewPredicate(rev)}
			case entryReset:
				got[j] = kv.Entry{Key: got[j].Key}
			}
		}
	}
	return got, nil
}
