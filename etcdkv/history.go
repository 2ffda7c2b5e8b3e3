package etcdkv

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// firstChangeAfter returns the first event on k after revision v, the
// revision of a version of k; cur is k as read after v (nil: missing). It
// returns nil, nil when k was never at version v: no guarded write
// against v can have applied then. A compacted history is an error that
// isCompacted recognizes.
func (s *Store) firstChangeAfter(ctx context.Context, k string, v int64, cur *mvccpb.KeyValue) (*clientv3.Event, error) {
	if cur != nil && cur.ModRevision < v {
		return nil, nil
	}
	// Make sure k was at v. Then an event after v exists (k is missing or
	// at a later version now), so the watch below cannot wait forever.
	resp, err := s.cli.Get(ctx, k, clientv3.WithRev(v))
	if err != nil {
		return nil, fmt.Errorf("read %q at revision %d: %w", k, v, err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision != v {
		return nil, nil
	}
	var first *clientv3.Event
	err = s.watchHistory(ctx, k, v+1, func(ev *clientv3.Event) bool {
		first = ev
		return false
	})
	return first, err
}

// createdSince reports whether k was created with value at a revision
// after sentAfter, and at which: whether a put guarded by "k is missing",
// sent after sentAfter was seen, applied. cur is k as read after the put
// was sent; it exists (the guard failed on it), and every creation after
// sentAfter comes at or before cur's own creation.
func (s *Store) createdSince(ctx context.Context, k string, value []byte, sentAfter int64, cur *mvccpb.KeyValue) (verdict, int64, error) {
	if cur == nil {
		return undecided, 0, fmt.Errorf("etcdkv: %q: create guard failed on a missing key", k)
	}
	if cur.CreateRevision <= sentAfter {
		// The key has existed since before the put was sent.
		return notApplied, 0, nil
	}
	var found int64
	err := s.watchHistory(ctx, k, sentAfter+1, func(ev *clientv3.Event) bool {
		if ev.Type == mvccpb.PUT && ev.Kv.Version == 1 && bytes.Equal(ev.Kv.Value, value) {
			found = ev.Kv.ModRevision
			return false
		}
		return ev.Kv.ModRevision < cur.CreateRevision
	})
	if err != nil {
		return undecided, 0, err
	}
	if found > 0 {
		return applied, found, nil
	}
	return notApplied, 0, nil
}

// errWatchClosed: a history watch ended before the events it needed.
var errWatchClosed = errors.New("etcdkv: history watch closed early")

// watchHistory passes the events on k from revision from on, in order,
// to fn until fn returns false. Callers know such an event exists, so
// the watch ends within ctx. It asks for a member with a leader, so a
// member cut off from the cluster cannot leave it waiting silently.
func (s *Store) watchHistory(ctx context.Context, k string, from int64, fn func(*clientv3.Event) bool) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range s.cli.Watch(wctx, k, clientv3.WithRev(from)) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("watch %q from revision %d: %w", k, from, err)
		}
		s.saw(resp.Header)
		for _, ev := range resp.Events {
			if !fn(ev) {
				return nil
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("watch %q from revision %d: %w", k, from, err)
	}
	return fmt.Errorf("%w: %q from revision %d", errWatchClosed, k, from)
}
