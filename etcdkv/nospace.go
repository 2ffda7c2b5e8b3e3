package etcdkv

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/kv"
)

// A write etcd answers NOSPACE was not always refused. etcd refuses
// without applying a write whose cost its front door finds over the
// quota, and every write once the alarm is raised; but the write whose
// application takes the database past the quota is applied, then
// answered NOSPACE (etcd raises the alarm at that moment). The backend
// size both checks read is refreshed only when etcd commits its batch,
// so which of the two a caller meets is a matter of timing. Reads still
// work under the alarm, so the key's history decides, as when settling
// an ambiguous write, only without re-sending (a re-send would be
// refused).

// isNoSpace reports whether err is etcd's NOSPACE.
func isNoSpace(err error) bool {
	return errors.Is(err, rpctypes.ErrNoSpace) || errors.Is(err, rpctypes.ErrGRPCNoSpace)
}

// noSpaceAmbiguous is the answer when the history shows that a write
// answered NOSPACE may have applied.
func noSpaceAmbiguous(what string, refused error, why string) error {
	ambiguousWrites.Inc()
	return fmt.Errorf("%w: etcdkv: %s: %s; it was answered: %w", kv.ErrAmbiguous, what, why, refused)
}

// currentKey reads k (nil: missing) and the store's revision.
func (s *Store) currentKey(ctx context.Context, k string) (*mvccpb.KeyValue, int64, error) {
	var resp *clientv3.GetResponse
	err := s.read(ctx, func(c context.Context) error {
		var err error
		resp, err = s.cli.Get(c, k)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	s.saw(resp.Header)
	if len(resp.Kvs) == 0 {
		return nil, resp.Header.Revision, nil
	}
	return resp.Kvs[0], resp.Header.Revision, nil
}

// noSpaceSetIf decides a SetIf of value on k guarded by pred, sent after
// revision sentAfter, that etcd answered NOSPACE; refused is that answer
// as the caller would see it (kv.ErrQuotaExceeded). Applied: nil, as if
// it had succeeded. Not applied: refused. Unknowable: kv.ErrAmbiguous.
func (s *Store) noSpaceSetIf(ctx context.Context, what, k string, value []byte, pred kv.Predicate, sentAfter int64, refused error) error {
	cur, at, err := s.currentKey(ctx, k)
	if err != nil {
		return noSpaceAmbiguous(what, refused, fmt.Sprintf("reading the key to tell whether it applied failed (%v)", err))
	}
	if pred.IsAbsent() && cur == nil {
		// Missing now, but a create that applied may have been deleted
		// since: its history tells.
		rev, err := s.createdBetween(ctx, k, value, sentAfter, at)
		switch {
		case isCompacted(err):
			return noSpaceAmbiguous(what, refused, "the key's history cannot tell whether it applied")
		case err != nil:
			return noSpaceAmbiguous(what, refused, fmt.Sprintf("the key's history, which tells whether it applied, could not be read (%v)", err))
		case rev > 0:
			kv.NoteWrite(ctx, rev)
			return nil
		}
		return refused
	}
	if !pred.IsAbsent() && cur != nil && cur.ModRevision == pred.Version() {
		// The guard still holds: had the put applied, the key would
		// have moved on, and only deletes have happened since.
		return refused
	}
	var v verdict
	var rev int64
	if pred.IsAbsent() {
		v, rev, err = s.createdSince(ctx, k, value, sentAfter, cur)
	} else {
		var ev *clientv3.Event
		ev, err = s.firstChangeAfter(ctx, k, pred.Version(), cur)
		v = notApplied
		if err == nil && ev != nil && ev.Type == mvccpb.PUT && bytes.Equal(ev.Kv.Value, value) {
			v, rev = applied, ev.Kv.ModRevision
		}
	}
	switch {
	case err != nil:
		return noSpaceAmbiguous(what, refused, fmt.Sprintf("the key's history, which tells whether it applied, could not be read (%v)", err))
	case v == applied:
		kv.NoteWrite(ctx, rev)
		return nil
	case v == notApplied:
		return refused
	}
	return noSpaceAmbiguous(what, refused, "the key's history cannot tell whether it applied")
}

// noSpaceBlind decides an attempt of w, guarded by bound, that etcd
// answered NOSPACE. The attempt applies all its puts or none, at one
// revision above bound, so its first put decides. Not applied: refused.
// Otherwise kv.ErrAmbiguous: another writer may have put the same value
// (and SetAndRead's reads are lost with the response).
func (s *Store) noSpaceBlind(ctx context.Context, what string, w blindWrite, bound int64, refused error) error {
	if len(w.ops) == 0 || !w.ops[0].IsPut() {
		return refused // deletes cost no quota: etcd never answers them NOSPACE
	}
	k, value := string(w.ops[0].KeyBytes()), w.ops[0].ValueBytes()
	cur, now, err := s.currentKey(ctx, k)
	switch {
	case err != nil:
		return noSpaceAmbiguous(what, refused, fmt.Sprintf("reading the key to tell whether it applied failed (%v)", err))
	case now <= bound, cur != nil && cur.ModRevision <= bound:
		// Nothing at all was written since the attempt was sent, or the
		// key not since: it did not apply.
		return refused
	}
	put, err := s.putBetween(ctx, k, value, bound, now)
	switch {
	case err != nil:
		return noSpaceAmbiguous(what, refused, fmt.Sprintf("the key's history, which tells whether it applied, could not be read (%v)", err))
	case put:
		return noSpaceAmbiguous(what, refused, "etcd applies the write that takes its database past the quota and answers it NOSPACE, and the key's history holds this value since the attempt was sent")
	}
	return refused
}

// putBetween reports whether k was put with value at a revision in
// (after, upTo]. It watches every key, not only k, because some write
// certainly happened at upTo (a revision the store read), which ends the
// watch: k itself may have no event at all.
func (s *Store) putBetween(ctx context.Context, k string, value []byte, after, upTo int64) (bool, error) {
	found := false
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range s.cli.Watch(wctx, "", clientv3.WithPrefix(), clientv3.WithRev(after+1)) {
		if err := resp.Err(); err != nil {
			return false, fmt.Errorf("watch from revision %d: %w", after+1, err)
		}
		reached := false
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision > upTo {
				return found, nil
			}
			if ev.Type == mvccpb.PUT && string(ev.Kv.Key) == k && bytes.Equal(ev.Kv.Value, value) {
				found = true
			}
			// The events of one revision come in one response.
			reached = reached || ev.Kv.ModRevision == upTo
		}
		if reached {
			return found, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("watch from revision %d: %w", after+1, err)
	}
	return false, fmt.Errorf("%w: from revision %d", errWatchClosed, after+1)
}
