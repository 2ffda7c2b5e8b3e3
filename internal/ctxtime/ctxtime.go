// Package ctxtime waits on a clock and a context together: the backoffs,
// polls and intervals of the daemon, the cleaner and the change feed all
// end early when their caller gives up. Safe for concurrent use.
//
// Errors: none; Sleep reports a wait cut short by its context as false,
// and the caller reads ctx.Err() if it needs why.
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends. It reports whether the whole wait
// passed (false: ctx ended first).
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
