// Package groupctx makes the context of one request sent on behalf of
// several callers (a group-committed write, a grouped read): the request
// must not fail because one caller gave up, and must not outlive them all.
// Safe for concurrent use; it returns no errors.
package groupctx

import (
	"context"
	"sync/atomic"
	"time"
)

// Join returns a context that keeps the values of ctxs[0], carries the
// latest of their deadlines when every one has a deadline, and ends once
// every one of ctxs has ended. Its cancel function must be called. ctxs
// must not be empty.
func Join(ctxs []context.Context) (context.Context, context.CancelFunc) {
	base := context.WithoutCancel(ctxs[0])
	var latest time.Time
	for _, c := range ctxs {
		d, ok := c.Deadline()
		if !ok {
			latest = time.Time{}
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	var ctx context.Context
	var cancel context.CancelFunc
	if latest.IsZero() {
		ctx, cancel = context.WithCancel(base)
	} else {
		ctx, cancel = context.WithDeadline(base, latest)
	}
	var live atomic.Int64
	live.Store(int64(len(ctxs)))
	stops := make([]func() bool, 0, len(ctxs))
	for _, c := range ctxs {
		stops = append(stops, context.AfterFunc(c, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		}))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
