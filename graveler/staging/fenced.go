package staging

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"graveler/graveler"
	"graveler/keys"
	"graveler/kv"
)

// Fenced writes are group-committed: one kv.SetAndRead per staging token
// and set of reads is in flight at a time. A writer that finds none in
// flight sends its own at once, so a lone writer waits for nothing; writers
// that arrive meanwhile queue and go together in the next one, up to
// Config.FencedBatchSize writes and FencedBatchBytes bytes. Every writer of
// a batch gets the same reads, made after all its writes, which is all
// the fence asks. A queued batch runs on a context of its own (bounded by
// fencedBatchTimeout), so one writer giving up does not fail the others.

// fencedBatchTimeout bounds one batch's kv request, settling included.
const fencedBatchTimeout = 30 * time.Second

type fencedBatch struct {
	writes []kv.Write
	index  map[string]int // write key -> position, to fold a key written twice
	bytes  int
	reads  []kv.KeyRef
	done   chan struct{}
	got    []kv.Entry
	err    error
}

// fencedGroup is the state of one (token, reads) pair.
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

// do writes w and returns reads made after it, sharing the request with
// concurrent calls of the same group.
func (fb *fencedBatcher) do(ctx context.Context, w kv.Write, reads []kv.KeyRef) ([]kv.Entry, error) {
	size := len(w.Partition) + len(w.Key) + len(w.Value)
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
		got, err := kv.SetAndRead(ctx, fb.store, []kv.Write{w}, reads)
		fencedWrites.Inc()
		fencedBatches.Inc()
		fencedBatchWrites.Observe(1)
		fb.handOff(gk, g)
		return got, err
	}
	b := fb.enqueue(g, w, size, reads)
	fb.mu.Unlock()
	select {
	case <-b.done:
		fencedWrites.Inc()
		if b.err != nil && len(b.writes) > 1 && (errors.Is(b.err, kv.ErrValueTooLarge) || errors.Is(b.err, kv.ErrKeyTooLarge) || errors.Is(b.err, kv.ErrTooManyOps)) {
			// The store refused the shared request for its size, or for
			// one write of it: on its own, this write gets its own answer.
			return kv.SetAndRead(ctx, fb.store, []kv.Write{w}, reads)
		}
		return b.got, b.err
	case <-ctx.Done():
		// The batch may still apply the write: the caller never hears it
		// was acknowledged, which is all an error promises.
		return nil, ctx.Err()
	}
}

func newFencedBatch(reads []kv.KeyRef) *fencedBatch {
	return &fencedBatch{reads: reads, index: map[string]int{}, done: make(chan struct{})}
}

// add puts w in b. A key already in b takes the later value: the two
// writes are concurrent, so either order is a valid outcome.
func (b *fencedBatch) add(w kv.Write, size int) {
	k := string(w.Key)
	if i, ok := b.index[k]; ok {
		b.bytes += len(w.Value) - len(b.writes[i].Value)
		b.writes[i] = w
		return
	}
	b.index[k] = len(b.writes)
	b.writes = append(b.writes, w)
	b.bytes += size
}

// enqueue adds w to the group's last queued batch, or to a new one when
// that is full. fb.mu is held.
func (fb *fencedBatcher) enqueue(g *fencedGroup, w kv.Write, size int, reads []kv.KeyRef) *fencedBatch {
	if n := len(g.queue); n > 0 {
		last := g.queue[n-1]
		_, dup := last.index[string(w.Key)]
		if dup || (len(last.writes) < fb.maxWrites && last.bytes+size <= fb.maxBytes) {
			last.add(w, size)
			return last
		}
	}
	b := newFencedBatch(reads)
	b.add(w, size)
	g.queue = append(g.queue, b)
	return b
}

// run sends a queued batch on a context of its own (the writers in it
// each wait on theirs), then hands off to the next.
func (fb *fencedBatcher) run(gk string, g *fencedGroup, b *fencedBatch) {
	ctx, cancel := context.WithTimeout(context.Background(), fencedBatchTimeout)
	b.got, b.err = kv.SetAndRead(ctx, fb.store, b.writes, b.reads)
	cancel()
	fencedBatches.Inc()
	fencedBatchWrites.Observe(float64(len(b.writes)))
	close(b.done)
	fb.handOff(gk, g)
}

// handOff starts the group's next queued batch, if any, on a goroutine of
// its own, so that the writer whose request just finished returns at once;
// otherwise the group is idle and forgotten.
func (fb *fencedBatcher) handOff(gk string, g *fencedGroup) {
	fb.mu.Lock()
	var next *fencedBatch
	if len(g.queue) == 0 {
		g.inFlight = false
		delete(fb.groups, gk)
	} else {
		next, g.queue = g.queue[0], g.queue[1:]
	}
	fb.mu.Unlock()
	if next != nil {
		go fb.run(gk, g, next)
	}
}

// FencedWrites reports whether the store does kv.SetAndRead in one round
// trip (kv.SetReader).
func (m *Manager) FencedWrites() bool {
	_, ok := m.store.(kv.SetReader)
	return ok
}

// SetAndRead is Set, reading reads no earlier than the write took effect
// (kv.SetAndRead): the writer's fence in the same round trip, shared with
// concurrent writers of the same token (see fencedBatcher).
func (m *Manager) SetAndRead(ctx context.Context, st graveler.StagingToken, key graveler.Key, value *graveler.Value, reads []kv.KeyRef) ([]kv.Entry, error) {
	w, err := stagedWrite(ctx, st, key, value)
	if err != nil {
		return nil, err
	}
	if len(reads) > kv.MaxSetAndReadOps-1 {
		return nil, fmt.Errorf("staging: set %s in token %q: %w: %d fence reads", qkey(key), st, graveler.ErrInvalidArgument, len(reads))
	}
	var got []kv.Entry
	if m.cfg.FencedBatchSize > 1 {
		got, err = m.fenced.do(ctx, w, reads)
	} else {
		got, err = kv.SetAndRead(ctx, m.store, []kv.Write{w}, reads)
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
		return nil, fmt.Errorf("staging: get %s in token %q: %w", qkey(key), st, graveler.ErrEntryNotFound)
	}
	v, err := decode(got.Value)
	if err != nil {
		return nil, fmt.Errorf("staging: get %s in token %q: %w", qkey(key), st, err)
	}
	return v, nil
}

// ReadAt reads records at one instant (kv.GetMany).
func (m *Manager) ReadAt(ctx context.Context, reads []kv.KeyRef) ([]kv.Entry, error) {
	got, err := kv.GetMany(ctx, m.store, reads)
	if err != nil {
		return nil, storeErr(err, "read %d records", len(reads))
	}
	return got, nil
}
