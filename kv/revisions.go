package kv

import (
	"context"
	"sync"
)

// Revisions records, for one operation above the store (a request), the
// revisions at which its writes took effect, so that the operation can
// tell its caller "your change is visible from revision R on" and a
// change feed ordered by the same revisions can be matched against it.
//
// A store notes every write it applied (NoteWrite) into the Revisions of
// the write's context; the operation marks which of its writes is its
// decisive one, the write that made its change visible (Effect, or
// NoteEffect). A write's revision is the version a Get of the key reports
// right after it (Predicate.Version): etcd's revision of the write's
// transaction, or the memory store's write counter. A delete's revision
// is one no version of the key before it reaches, and every later write
// has a higher one.
//
// Scopes nest: WithRevisions under a context that already has a
// Revisions starts a new one whose writes and effects also count in every
// enclosing one. A Revisions is safe for concurrent use; with writes from
// several goroutines, Last and Effect are the highest revisions noted.
type Revisions struct {
	parent *Revisions

	mu     sync.Mutex
	last   int64
	effect int64
}

type revisionsKey struct{}

// WithRevisions returns a context whose writes are noted in a new
// Revisions, and that Revisions.
func WithRevisions(ctx context.Context) (context.Context, *Revisions) {
	r := &Revisions{parent: revisionsOf(ctx)}
	return context.WithValue(ctx, revisionsKey{}, r), r
}

func revisionsOf(ctx context.Context) *Revisions {
	r, _ := ctx.Value(revisionsKey{}).(*Revisions)
	return r
}

// NoteWrite is for Store implementations: a write made with ctx took
// effect at revision rev (or, settled as applied after an unknown
// outcome, was found in the key's history at rev). A context without
// Revisions ignores it.
func NoteWrite(ctx context.Context, rev int64) {
	for r := revisionsOf(ctx); r != nil; r = r.parent {
		r.mu.Lock()
		r.last = max(r.last, rev)
		r.mu.Unlock()
	}
}

// NoteEffect notes rev as a write of ctx and marks it the decisive one:
// for a caller that learnt the revision of its write by reading the key
// back (a write whose answer was lost, found applied on a re-read).
func NoteEffect(ctx context.Context, rev int64) {
	NoteWrite(ctx, rev)
	for r := revisionsOf(ctx); r != nil; r = r.parent {
		r.mu.Lock()
		r.effect = max(r.effect, rev)
		r.mu.Unlock()
	}
}

// Effect runs write, the operation's decisive write, and when it
// succeeds marks the highest revision noted during it as the effect of
// every enclosing Revisions. Writes made meanwhile by other goroutines
// under ctx do not count: write runs in a scope of its own. Without
// Revisions in ctx it only runs write.
func Effect(ctx context.Context, write func(context.Context) error) error {
	if revisionsOf(ctx) == nil {
		return write(ctx)
	}
	wctx, scope := WithRevisions(ctx)
	if err := write(wctx); err != nil {
		return err
	}
	if rev := scope.Last(); rev > 0 {
		NoteEffect(ctx, rev)
	}
	return nil
}

// Last returns the highest revision noted, 0 if none.
func (r *Revisions) Last() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// Effect returns the revision of the decisive write, and whether one was
// marked.
func (r *Revisions) Effect() (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.effect, r.effect > 0
}

// Revision is what an operation reports as the revision of its change:
// its decisive write's if one was marked, else its last write's, else 0
// (it wrote nothing).
func (r *Revisions) Revision() int64 {
	if rev, ok := r.Effect(); ok {
		return rev
	}
	return r.Last()
}
