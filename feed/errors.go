package feed

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"graveler/graveler"
	"graveler/kv"
)

// Errors of Subscribe and Subscription.Next. The server maps each to a
// gRPC status (server/errors.go).
var (
	// ErrClosed: the feed was closed (the server is shutting down).
	// Resume elsewhere with the last ResumeRevision received.
	ErrClosed = errors.New("feed: closed: the server is shutting down")
	// ErrCompacted is matched by *CompactedError.
	ErrCompacted = errors.New("feed: revision compacted")
	// ErrTooSlow is matched by *TooSlowError.
	ErrTooSlow = errors.New("feed: subscriber too slow")
	// ErrFutureRevision is matched by *FutureRevisionError.
	ErrFutureRevision = errors.New("feed: start revision is in the future")
	// ErrInvalidRequest: a Request that cannot be served as asked.
	ErrInvalidRequest = fmt.Errorf("feed: request: %w", graveler.ErrInvalidArgument)
)

// CompactedError: the changes after Revision are no longer in etcd's
// history (etcd compacted it up to CompactRevision). Start again with the
// initial state.
type CompactedError struct {
	// Revision is the revision the changes were wanted after.
	Revision int64
	// CompactRevision is etcd's compaction revision: the oldest revision a
	// subscription can start from.
	CompactRevision int64
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("feed: the changes after revision %d are compacted (etcd's compact revision is %d): start again with the initial state",
		e.Revision, e.CompactRevision)
}

// Is matches ErrCompacted.
func (e *CompactedError) Is(target error) bool { return target == ErrCompacted }

// ErrorMetadata is the metadata of the status the error becomes.
func (e *CompactedError) ErrorMetadata() map[string]string {
	return map[string]string{"compact_revision": strconv.FormatInt(e.CompactRevision, 10), "revision": strconv.FormatInt(e.Revision, 10)}
}

// TooSlowError: the subscriber read so slowly that the changes it had not
// read yet were dropped from the feed's memory. Subscribe again with
// ResumeRevision as the start revision.
type TooSlowError struct {
	// ResumeRevision is the revision of the last message delivered (or the
	// start revision when none was).
	ResumeRevision int64
}

func (e *TooSlowError) Error() string {
	return fmt.Sprintf("feed: subscriber too slow: the changes after revision %d it had not read were dropped; resume from revision %d",
		e.ResumeRevision, e.ResumeRevision)
}

// Is matches ErrTooSlow.
func (e *TooSlowError) Is(target error) bool { return target == ErrTooSlow }

// ErrorMetadata is the metadata of the status the error becomes.
func (e *TooSlowError) ErrorMetadata() map[string]string {
	return map[string]string{"resume_revision": strconv.FormatInt(e.ResumeRevision, 10)}
}

// FutureRevisionError: a start revision after etcd's current revision.
type FutureRevisionError struct {
	Revision        int64
	CurrentRevision int64
}

func (e *FutureRevisionError) Error() string {
	return fmt.Sprintf("feed: start revision %d is after etcd's current revision %d", e.Revision, e.CurrentRevision)
}

// Is matches ErrFutureRevision.
func (e *FutureRevisionError) Is(target error) bool { return target == ErrFutureRevision }

// ErrorMetadata is the metadata of the status the error becomes.
func (e *FutureRevisionError) ErrorMetadata() map[string]string {
	return map[string]string{"current_revision": strconv.FormatInt(e.CurrentRevision, 10)}
}

func isCompacted(err error) bool {
	return errors.Is(err, rpctypes.ErrCompacted) || errors.Is(err, rpctypes.ErrGRPCCompacted)
}

// etcdErr names what failed; an error of etcd that is neither a context's
// nor a compaction is kv.ErrUnavailable, the store's category for "retry
// later".
func etcdErr(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("feed: %s: %w", what, ctx.Err())
	}
	if isCompacted(err) {
		return fmt.Errorf("feed: %s: %w", what, err)
	}
	return fmt.Errorf("feed: %s: %w: %w", what, kv.ErrUnavailable, err)
}
