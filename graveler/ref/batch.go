package ref

import (
	"context"
	"sync"
	"time"
)

// readBatcher amortizes reads of one key. Its one rule: a caller never
// shares a read that began before the caller arrived, so every result a
// caller sees was read after its arrival, and a read that starts after a
// write completed sees it.
//
// Two modes. With window > 0 the first caller opens a batch and waits
// window before reading; callers arriving while it is open join it. With
// window == 0 ("group" mode, the default) a caller that finds no read in
// flight reads at once; callers arriving while a read is in flight share
// the next read, which starts as soon as the current one ends. Group mode
// adds no latency to a lone caller and, under load, costs each caller at
// most two read latencies while the store sees one read per read latency
// per key, however many callers there are.
//
// A read runs in a goroutine under a context that is cancelled when every
// waiter has given up, so no caller's cancellation fails the others and an
// abandoned read does not linger.
type readBatcher[T any] struct {
	window time.Duration
	mu     sync.Mutex
	open   map[string]*batchCall[T] // window mode: batches still open
	keys   map[string]*groupState[T]
}

type batchCall[T any] struct {
	done    chan struct{}
	val     T
	err     error
	waiters int // guarded by readBatcher.mu
	cancel  context.CancelFunc
	ctx     context.Context
	read    func(context.Context) (T, error)
}

// groupState is a key's reads in group mode: the one running, and the one
// that callers arriving meanwhile wait to share.
type groupState[T any] struct {
	running, next *batchCall[T]
}

func newReadBatcher[T any](window time.Duration) *readBatcher[T] {
	return &readBatcher[T]{window: window, open: make(map[string]*batchCall[T]), keys: make(map[string]*groupState[T])}
}

func newCall[T any](ctx context.Context, read func(context.Context) (T, error)) *batchCall[T] {
	readCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &batchCall[T]{done: make(chan struct{}), waiters: 1, cancel: cancel, ctx: readCtx, read: read}
}

// do returns read's result for key, shared with the callers of the same
// batch. joined reports whether this caller shared another caller's read.
func (b *readBatcher[T]) do(ctx context.Context, key string, read func(context.Context) (T, error)) (val T, joined bool, err error) {
	b.mu.Lock()
	var c *batchCall[T]
	if b.window > 0 {
		c, joined = b.open[key]
		if joined {
			c.waiters++
		} else {
			c = newCall(ctx, read)
			b.open[key] = c
			go b.runWindow(key, c)
		}
	} else {
		st := b.keys[key]
		if st == nil {
			st = &groupState[T]{}
			b.keys[key] = st
		}
		switch {
		case st.running == nil:
			c = newCall(ctx, read)
			st.running = c
			go b.runGroup(key, c)
		case st.next != nil:
			c = st.next
			c.waiters++
			joined = true
		default:
			c = newCall(ctx, read)
			st.next = c
		}
	}
	b.mu.Unlock()

	select {
	case <-c.done:
		return c.val, joined, c.err
	case <-ctx.Done():
		b.mu.Lock()
		c.waiters--
		if c.waiters == 0 {
			// Nobody wants this result: stop the read, and make sure no
			// later caller joins a batch that is being cancelled.
			if b.open[key] == c {
				delete(b.open, key)
			}
			if st := b.keys[key]; st != nil && st.next == c {
				st.next = nil // never started: nothing else to undo
			}
			c.cancel()
		}
		b.mu.Unlock()
		var zero T
		return zero, joined, ctx.Err()
	}
}

func (b *readBatcher[T]) runWindow(key string, c *batchCall[T]) {
	defer c.cancel()
	t := time.NewTimer(b.window)
	select {
	case <-t.C:
	case <-c.ctx.Done():
		t.Stop()
	}
	// Close the batch before reading: later arrivals open a new one.
	b.mu.Lock()
	if b.open[key] == c {
		delete(b.open, key)
	}
	b.mu.Unlock()
	b.finish(c)
}

func (b *readBatcher[T]) runGroup(key string, c *batchCall[T]) {
	for c != nil {
		b.finishKeep(c)
		b.mu.Lock()
		st := b.keys[key]
		c = st.next
		st.running, st.next = c, nil
		if c == nil {
			delete(b.keys, key)
		}
		b.mu.Unlock()
	}
}

// finishKeep performs c's read and releases its waiters.
func (b *readBatcher[T]) finishKeep(c *batchCall[T]) {
	defer c.cancel()
	b.finish(c)
}

func (b *readBatcher[T]) finish(c *batchCall[T]) {
	if err := c.ctx.Err(); err != nil {
		c.err = err
	} else {
		c.val, c.err = c.read(c.ctx)
	}
	close(c.done)
}
