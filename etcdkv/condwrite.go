package etcdkv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/kv"
)

// SetAndReadUnless is SetAndRead whose transaction also requires every
// key of absent to be missing (CreateRevision 0); when one exists, its
// Else branch reads reads instead. It is sent and settled as SetAndRead
// is (see blindWrite): a round that finds a key of absent present ends
// the call unapplied. Every attempt carries the same requirement, so an
// attempt abandoned earlier can apply only while the key is missing,
// which is what kv.CondWriter promises. Its metrics count an unapplied
// call as predicate_failed: the writer has to go elsewhere, as after a
// lost compare-and-swap.
func (s *Store) SetAndReadUnless(ctx context.Context, absent []kv.KeyRef, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, bool, error) {
	start := time.Now()
	out, ok, err := s.setAndReadUnless(ctx, absent, writes, reads)
	res := err
	if err == nil && !ok {
		res = kv.ErrPredicateFailed
	}
	observe("set_and_read_unless", start, res)
	return out, ok, err
}

func (s *Store) setAndReadUnless(ctx context.Context, absent []kv.KeyRef, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, bool, error) {
	if err := s.checkOpen(); err != nil {
		return nil, false, err
	}
	if err := kv.CheckCondWrite(absent, writes, reads); err != nil {
		return nil, false, err
	}
	what := fmt.Sprintf("set %d keys (first %q in partition %q) unless %d exist, and read %d", len(writes), writes[0].Key, writes[0].Partition, len(absent), len(reads))
	if err := s.checkWrite(ctx, what); err != nil {
		return nil, false, err
	}
	w, err := s.setAndReadUnlessWrite(absent, writes, reads)
	if err != nil {
		return nil, false, err
	}
	resp, err := s.blind(ctx, what, w)
	if err != nil {
		return nil, false, err
	}
	return unlessResult(resp, w, len(writes), reads)
}

// setAndReadUnlessWrite checks its arguments and builds the guarded write
// of SetAndReadUnless: SetAndRead's, plus one compare per absent key and
// an Else branch of the reads, then a count of each absent key (which
// tells a round that found one present from one whose bound was stale).
// etcd bounds compares and each branch's operations apart; each is at
// most writes plus reads plus absent, which kv.CheckCondWrite keeps
// within kv.MaxSetAndReadOps.
func (s *Store) setAndReadUnlessWrite(absent []kv.KeyRef, writes []kv.Write, reads []kv.KeyRef) (blindWrite, error) {
	w, err := s.setAndReadWrite(writes, reads)
	if err != nil {
		return blindWrite{}, err
	}
	if len(absent) == 0 {
		return w, nil
	}
	w.orElse, err = s.appendReadOps(make([]clientv3.Op, 0, len(reads)+len(absent)), reads)
	if err != nil {
		return blindWrite{}, err
	}
	w.absent = make([]string, 0, len(absent))
	for _, a := range absent {
		if err := s.cfg.Limits.CheckKey(a.Partition, a.Key); err != nil {
			return blindWrite{}, err
		}
		k := s.etcdKey(a.Partition, a.Key)
		w.absent = append(w.absent, k)
		w.orElse = append(w.orElse, clientv3.OpGet(k, clientv3.WithCountOnly()))
	}
	return w, nil
}

// unlessResult is the reads of SetAndReadUnless's response and whether
// its writes applied.
func unlessResult(resp *clientv3.TxnResponse, w blindWrite, nwrites int, reads []kv.KeyRef) ([]kv.Entry, bool, error) {
	if resp.Succeeded {
		if len(resp.Responses) != len(w.ops) {
			return nil, false, fmt.Errorf("etcdkv: set and read unless: %d responses to %d operations", len(resp.Responses), len(w.ops))
		}
		return readEntries(reads, resp.Responses[nwrites:]), true, nil
	}
	if len(resp.Responses) != len(w.orElse) {
		return nil, false, fmt.Errorf("etcdkv: set and read unless: %d responses to %d operations", len(resp.Responses), len(w.orElse))
	}
	return readEntries(reads, resp.Responses[:len(reads)]), false, nil
}

// SetIfWith is SetIf whose transaction also requires every key of absent
// to be missing and puts also with the key. It is settled as SetIf is,
// from the key's history (see settleSetIfWith), and so is a NOSPACE
// answer (noSpaceSetIf): the absent keys and the other puts change
// nothing of that reasoning, since value identifies the attempt and the
// attempt applies all its puts or none.
func (s *Store) SetIfWith(ctx context.Context, partition, key, value []byte, pred kv.Predicate, absent []kv.KeyRef, also []kv.Write) error {
	start := time.Now()
	err := s.setIfWith(ctx, partition, key, value, pred, absent, also)
	observe("setif_with", start, err)
	return err
}

func (s *Store) setIfWith(ctx context.Context, partition, key, value []byte, pred kv.Predicate, absent []kv.KeyRef, also []kv.Write) error {
	what := fmt.Sprintf("setif %q in partition %q with %d more keys unless %d exist", key, partition, len(also), len(absent))
	if err := s.checkWrite(ctx, what); err != nil {
		return err
	}
	if err := kv.CheckCondWrite(absent, append([]kv.Write{{Partition: partition, Key: key, Value: value}}, also...), nil); err != nil {
		return err
	}
	k, cmps, ops, err := s.setIfWithTxn(partition, key, value, pred, absent, also)
	if err != nil {
		return err
	}
	failed := func() error {
		return fmt.Errorf("%w: %q in partition %q changed since %v, or a key that must be missing exists", kv.ErrPredicateFailed, key, partition, pred)
	}
	// Read before sending: whatever this attempt does happens at a later
	// revision.
	sentAfter := s.maxRev.Load()
	err = s.casWrite(ctx, what, cmps, ops, failed, func(firstErr error) error {
		return s.settleSetIfWith(ctx, k, value, pred, cmps, ops, sentAfter, what, firstErr, failed)
	})
	if errors.Is(err, kv.ErrQuotaExceeded) {
		return s.noSpaceSetIf(ctx, what, k, value, pred, sentAfter, err)
	}
	return err
}

// setIfWithTxn checks the keys and values of a SetIfWith and builds its
// transaction: the key's guard, then one compare per absent key; the put
// of the key, then those of also.
func (s *Store) setIfWithTxn(partition, key, value []byte, pred kv.Predicate, absent []kv.KeyRef, also []kv.Write) (string, []clientv3.Cmp, []clientv3.Op, error) {
	if err := s.cfg.Limits.CheckWrite(partition, key, value); err != nil {
		return "", nil, nil, err
	}
	k := s.etcdKey(partition, key)
	cmps := make([]clientv3.Cmp, 0, 1+len(absent))
	cmps = append(cmps, s.guard(k, pred))
	for _, a := range absent {
		if err := s.cfg.Limits.CheckKey(a.Partition, a.Key); err != nil {
			return "", nil, nil, err
		}
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.etcdKey(a.Partition, a.Key)), "=", 0))
	}
	ops := make([]clientv3.Op, 0, 1+len(also))
	ops = append(ops, clientv3.OpPut(k, string(value)))
	for _, w := range also {
		if err := s.cfg.Limits.CheckWrite(w.Partition, w.Key, w.Value); err != nil {
			return "", nil, nil, err
		}
		ops = append(ops, clientv3.OpPut(s.etcdKey(w.Partition, w.Key), string(w.Value)))
	}
	return k, cmps, ops, nil
}

// settleSetIfWith decides the outcome of a SetIfWith whose first attempt
// failed with firstErr after it may have been applied: it re-sends the
// same transaction, reading k when it fails (for a create, only after
// createdMeanwhile found no creation of k since deleted). Success means
// the first attempt had not applied and this one did. Otherwise k as read
// decides:
//
//   - k moved on from pred: its history decides, as for SetIf
//     (setIfVerdict);
//   - k is still at version pred: only an absent key failed the re-send,
//     and the first attempt, which would have moved k for good, did not
//     apply;
//   - k is still missing (pred is Absent): the first attempt may have
//     created k, since deleted, before an absent key appeared; it did iff
//     k was put with value between sentAfter and the re-send.
func (s *Store) settleSetIfWith(ctx context.Context, k string, value []byte, pred kv.Predicate, cmps []clientv3.Cmp, ops []clientv3.Op, sentAfter int64, what string, firstErr error, failed func() error) error {
	return s.settleTxn(ctx, what, k, cmps, ops, firstErr, failed, s.createdMeanwhileIf(k, value, pred, sentAfter), func(c context.Context, cur *mvccpb.KeyValue, at int64) (verdict, int64, error) {
		switch {
		case pred.IsAbsent() && cur == nil:
			rev, err := s.createdBetween(c, k, value, sentAfter, at)
			if err != nil || rev == 0 {
				return notApplied, 0, err
			}
			return applied, rev, nil
		case !pred.IsAbsent() && cur != nil && cur.ModRevision == pred.Version():
			return notApplied, 0, nil
		}
		return s.setIfVerdict(c, k, value, pred, sentAfter, cur)
	})
}

// createdBetween returns the revision in (after, upTo] at which k was
// created with value, 0 if never. Like putBetween it watches every key:
// some write certainly happened at upTo, a revision the store read, which
// ends the watch even when k has no event at all.
func (s *Store) createdBetween(ctx context.Context, k string, value []byte, after, upTo int64) (int64, error) {
	if upTo <= after {
		return 0, nil
	}
	var found int64
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range s.cli.Watch(wctx, "", clientv3.WithPrefix(), clientv3.WithRev(after+1)) {
		if err := resp.Err(); err != nil {
			return 0, fmt.Errorf("watch from revision %d: %w", after+1, err)
		}
		reached := false
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision > upTo {
				return found, nil
			}
			if found == 0 && ev.Type == mvccpb.PUT && ev.Kv.Version == 1 && string(ev.Kv.Key) == k && bytes.Equal(ev.Kv.Value, value) {
				found = ev.Kv.ModRevision
			}
			// The events of one revision come in one response.
			reached = reached || ev.Kv.ModRevision == upTo
		}
		if reached {
			return found, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("watch from revision %d: %w", after+1, err)
	}
	return 0, fmt.Errorf("%w: from revision %d", errWatchClosed, after+1)
}

// DeleteIfWith is DeleteIf whose transaction also puts also: one guard
// (the key at pred), the delete and the puts, at one revision.
func (s *Store) DeleteIfWith(ctx context.Context, partition, key []byte, pred kv.Predicate, also []kv.Write) error {
	start := time.Now()
	err := s.deleteIfWith(ctx, partition, key, pred, also)
	observe("deleteif_with", start, err)
	return err
}

func (s *Store) deleteIfWith(ctx context.Context, partition, key []byte, pred kv.Predicate, also []kv.Write) error {
	what := fmt.Sprintf("deleteif %q in partition %q with %d more keys", key, partition, len(also))
	if err := s.checkWrite(ctx, what); err != nil {
		return err
	}
	k, cmps, ops, err := s.deleteIfWithTxn(partition, key, pred, also)
	if err != nil {
		return err
	}
	failed := func() error {
		return fmt.Errorf("%w: delete %q in partition %q: changed since %v", kv.ErrPredicateFailed, key, partition, pred)
	}
	err = s.casWrite(ctx, what, cmps, ops, failed, func(firstErr error) error {
		return s.settleDeleteIfWith(ctx, k, pred, also, cmps, ops, what, firstErr, failed)
	})
	if errors.Is(err, kv.ErrQuotaExceeded) {
		return s.noSpaceDeleteIfWith(ctx, what, k, pred, also, err)
	}
	return err
}

// deleteIfWithTxn checks a DeleteIfWith and builds its transaction: the
// key's guard; the delete, then the puts of also.
func (s *Store) deleteIfWithTxn(partition, key []byte, pred kv.Predicate, also []kv.Write) (string, []clientv3.Cmp, []clientv3.Op, error) {
	if pred.IsAbsent() {
		return "", nil, nil, fmt.Errorf("etcdkv: conditional delete of %q in partition %q expects it missing: there is nothing to delete", key, partition)
	}
	if len(also) > 0 {
		if err := kv.CheckCondWrite(nil, append([]kv.Write{{Partition: partition, Key: key}}, also...), nil); err != nil {
			return "", nil, nil, err
		}
	}
	if err := s.cfg.Limits.CheckKey(partition, key); err != nil {
		return "", nil, nil, err
	}
	k := s.etcdKey(partition, key)
	ops := make([]clientv3.Op, 0, 1+len(also))
	ops = append(ops, clientv3.OpDelete(k))
	for _, w := range also {
		if err := s.cfg.Limits.CheckWrite(w.Partition, w.Key, w.Value); err != nil {
			return "", nil, nil, err
		}
		ops = append(ops, clientv3.OpPut(s.etcdKey(w.Partition, w.Key), string(w.Value)))
	}
	return k, []clientv3.Cmp{s.guard(k, pred)}, ops, nil
}

// settleDeleteIfWith decides the outcome of a DeleteIfWith whose first
// attempt failed with firstErr after it may have been applied: it re-sends
// the same transaction, reading k when the guard fails, and then k's
// history decides (deleteIfWithVerdict).
func (s *Store) settleDeleteIfWith(ctx context.Context, k string, pred kv.Predicate, also []kv.Write, cmps []clientv3.Cmp, ops []clientv3.Op, what string, firstErr error, failed func() error) error {
	return s.settleTxn(ctx, what, k, cmps, ops, firstErr, failed, nil, func(c context.Context, cur *mvccpb.KeyValue, _ int64) (verdict, int64, error) {
		return s.deleteIfWithVerdict(c, k, pred, also, cur)
	})
}

// deleteIfWithVerdict tells from k's history whether a DeleteIfWith
// guarded by pred applied, cur being k as read since (nil: missing). It
// could apply only while k was at pred, so only as k's first change after
// pred, a deletion at some revision R; and it put also's first key at R
// too. A deletion at pred without that put was another deleter's, which
// our guard then lost to.
func (s *Store) deleteIfWithVerdict(ctx context.Context, k string, pred kv.Predicate, also []kv.Write, cur *mvccpb.KeyValue) (verdict, int64, error) {
	if cur != nil && cur.ModRevision == pred.Version() {
		return notApplied, 0, nil
	}
	ev, err := s.firstChangeAfter(ctx, k, pred.Version(), cur)
	if err != nil || ev == nil || ev.Type != mvccpb.DELETE {
		return notApplied, 0, err
	}
	at := ev.Kv.ModRevision
	if len(also) == 0 {
		return applied, at, nil
	}
	w := also[0]
	resp, err := s.cli.Get(ctx, s.etcdKey(w.Partition, w.Key), clientv3.WithRev(at))
	if err != nil {
		return undecided, 0, fmt.Errorf("read %q at revision %d: %w", w.Key, at, err)
	}
	if len(resp.Kvs) == 1 && resp.Kvs[0].ModRevision == at && bytes.Equal(resp.Kvs[0].Value, w.Value) {
		return applied, at, nil
	}
	return notApplied, 0, nil
}

// noSpaceDeleteIfWith decides a DeleteIfWith that etcd answered NOSPACE
// (its puts cost quota) from k's history, without re-sending: refused
// (the answer, kv.ErrQuotaExceeded) unless the history shows it applied.
func (s *Store) noSpaceDeleteIfWith(ctx context.Context, what, k string, pred kv.Predicate, also []kv.Write, refused error) error {
	cur, _, err := s.currentKey(ctx, k)
	if err != nil {
		return noSpaceAmbiguous(what, refused, fmt.Sprintf("reading the key to tell whether it applied failed (%v)", err))
	}
	v, rev, err := s.deleteIfWithVerdict(ctx, k, pred, also, cur)
	switch {
	case isCompacted(err):
		return noSpaceAmbiguous(what, refused, "the key's history cannot tell whether it applied")
	case err != nil:
		return noSpaceAmbiguous(what, refused, fmt.Sprintf("the key's history, which tells whether it applied, could not be read (%v)", err))
	case v == applied:
		kv.NoteWrite(ctx, rev)
		return nil
	}
	return refused
}
