package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "graveler/api/graveler/v1"
)

// ErrRevisionCompacted: the revision a watch had to start from is older
// than etcd's compaction, so the changes after it are lost. The consumer
// must relist: watch again with WatchOptions.InitialState. The error is a
// *RevisionCompactedError; it also matches ErrInvalidArgument, the class
// of its status code (OUT_OF_RANGE).
var ErrRevisionCompacted = errors.New("client: revision compacted")

// RevisionCompactedError is the error of a watch whose start revision was
// compacted (reason REVISION_COMPACTED).
type RevisionCompactedError struct {
	// Revision is the start revision that was asked for.
	Revision int64
	// CompactRevision is etcd's compaction revision (0 if the server did
	// not say): the oldest revision a watch can still start from.
	CompactRevision int64
	// Err is the server's answer.
	Err *Error
}

func (e *RevisionCompactedError) Error() string {
	return fmt.Sprintf("client: revision %d was compacted (compact revision %d): watch again with the initial state",
		e.Revision, e.CompactRevision)
}

// Is matches ErrRevisionCompacted.
func (e *RevisionCompactedError) Is(target error) bool { return target == ErrRevisionCompacted }

// Unwrap returns the server's answer, so the error also matches the
// sentinel of its code class.
func (e *RevisionCompactedError) Unwrap() error { return e.Err }

// WatchOptions configure Watch.
type WatchOptions struct {
	// Repository is the repository id ("sales"), or empty for every
	// repository.
	Repository string
	// StartRevision: deliver the changes after this revision (a
	// ResumeRevision received earlier, or the revision of a mutation's
	// response). 0 starts at the current revision, or with InitialState.
	StartRevision int64
	// InitialState first delivers the refs that exist at one revision (pages
	// of kind INITIAL, then one of kind INITIAL_END); see
	// WatchMessage.InitialRestart. It cannot be combined with StartRevision.
	InitialState bool
	// ProgressInterval: with no changes, a BOOKMARK arrives at least this
	// often (0: the server's default).
	ProgressInterval time.Duration
	// MinBackoff and MaxBackoff bound the wait before reopening a broken
	// stream: it starts at MinBackoff (default 100ms), doubles with each
	// failure in a row up to MaxBackoff (default 10s), and starts over once
	// a message arrives.
	MinBackoff, MaxBackoff time.Duration
	// OnRetry, when set, is told each error Watch recovers from and how long
	// it waits before reopening the stream (e.g. to log it).
	OnRetry func(err error, wait time.Duration)
}

// WatchMessage is one message of a watch.
type WatchMessage struct {
	*pb.WatchRefsResponse
	// InitialRestart is set on the first message after the stream broke
	// during the initial state: that state starts again with this message,
	// and the INITIAL pages delivered before it must be discarded.
	InitialRestart bool
}

// Watch streams the ref changes of opts.Repository (or of every repository)
// to handle, in revision order, until ctx ends (ctx.Err()), handle returns
// an error (that error), or the server answers an error it cannot recover
// from.
//
// When the stream ends with UNAVAILABLE (the server shuts down, the
// connection breaks), RESOURCE_EXHAUSTED (the consumer read too slowly) or
// no status at all, Watch reopens it after a backoff, starting after the
// last ResumeRevision it delivered, so handle sees every message exactly
// once. Before any message carries a resume revision the stream starts
// again as it started first: at the then current revision, or with the
// initial state (see WatchMessage.InitialRestart).
//
// A start revision older than etcd's compaction, asked for or reached
// while resuming, ends the watch with a *RevisionCompactedError
// (ErrRevisionCompacted); it is never retried.
//
// handle runs on Watch's goroutine; the stream waits while it runs, and a
// server cuts off a consumer that falls too far behind (Watch then
// resumes).
func (c *Client) Watch(ctx context.Context, opts WatchOptions, handle func(*WatchMessage) error) error {
	if opts.InitialState && opts.StartRevision != 0 {
		return fmt.Errorf("%w: watch: the initial state cannot be combined with a start revision (%d)",
			ErrInvalidArgument, opts.StartRevision)
	}
	minWait, maxWait := opts.MinBackoff, opts.MaxBackoff
	if minWait <= 0 {
		minWait = 100 * time.Millisecond
	}
	if maxWait <= 0 {
		maxWait = 10 * time.Second
	}
	maxWait = max(maxWait, minWait)
	w := watcher{c: c, opts: opts, handle: handle, token: opts.StartRevision, initial: opts.InitialState}
	wait := minWait
	for {
		delivered, err := w.attempt(ctx)
		if h, ok := errors.AsType[errHandler](err); ok {
			return h.err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if status.Code(err) == codes.DeadlineExceeded {
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < time.Second {
				// The deadline travelled with the call and the server's
				// copy fired first: the caller's ends a moment later, and
				// its error is the one Watch promises.
				<-ctx.Done()
				return ctx.Err()
			}
		}
		if !retryable(err) {
			return err
		}
		if delivered {
			wait = minWait
		}
		// Full jitter in the upper half keeps many clients cut off by one
		// server shutdown from coming back in step.
		d := wait/2 + rand.N(wait/2+1)
		if opts.OnRetry != nil {
			opts.OnRetry(err, d)
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, maxWait)
	}
}

// watcher is the state a watch carries from one stream to the next.
type watcher struct {
	c      *Client
	opts   WatchOptions
	handle func(*WatchMessage) error
	// token is the last resume revision delivered (or the start revision).
	token int64
	// initial: no INITIAL_END yet, so a new stream must send the initial
	// state again.
	initial bool
	// partial: INITIAL pages were delivered since the initial state last
	// started; restart: they must be discarded by the next message.
	partial, restart bool
}

// errHandler wraps an error of the handler so that it is never mistaken
// for one of the stream's.
type errHandler struct{ err error }

func (e errHandler) Error() string { return e.err.Error() }

// attempt runs one stream; delivered says whether a message reached the
// handler.
func (w *watcher) attempt(ctx context.Context) (delivered bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := &pb.WatchRefsRequest{ProgressIntervalMs: w.opts.ProgressInterval.Milliseconds()}
	if w.opts.Repository != "" {
		req.Repository = Repository(w.opts.Repository)
	}
	if w.initial {
		req.SendInitialState = true
		if w.partial {
			w.partial, w.restart = false, true
		}
	} else {
		req.StartRevision = w.token
	}
	s, err := w.c.WatchRefs(ctx, req)
	if err != nil {
		return false, w.classify(err, req.StartRevision)
	}
	for {
		m, err := s.Recv()
		if err != nil {
			return delivered, w.classify(err, req.StartRevision)
		}
		msg := &WatchMessage{WatchRefsResponse: m, InitialRestart: w.restart}
		if err := w.handle(msg); err != nil {
			return delivered, errHandler{err}
		}
		delivered, w.restart = true, false
		switch {
		case m.GetKind() == pb.WatchRefsResponse_KIND_INITIAL:
			w.partial = true
		case m.GetResumeRevision() != 0:
			w.token, w.initial, w.partial = m.GetResumeRevision(), false, false
		}
	}
}

// classify turns a stream's end into the error Watch acts on.
func (w *watcher) classify(err error, start int64) error {
	if errors.Is(err, io.EOF) {
		// A watch never ends by itself: something between us and the
		// server closed it, so it is resumed like a broken connection.
		return fmt.Errorf("%w: watch stream ended without a status", ErrUnavailable)
	}
	e, ok := errors.AsType[*Error](err)
	if !ok || e.Code != codes.OutOfRange || e.Reason != "REVISION_COMPACTED" {
		return err
	}
	ce := &RevisionCompactedError{Revision: start, Err: e}
	if v, perr := strconv.ParseInt(e.Metadata["compact_revision"], 10, 64); perr == nil {
		ce.CompactRevision = v
	}
	return ce
}

func retryable(err error) bool {
	e, ok := errors.AsType[*Error](err)
	if !ok {
		return errors.Is(err, ErrUnavailable)
	}
	switch e.Code {
	case codes.Unavailable:
		return true
	case codes.ResourceExhausted:
		// A message over a size limit would fail the same way again.
		return !errors.Is(e, ErrMessageTooLarge)
	}
	return false
}
