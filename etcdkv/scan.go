package etcdkv

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"graveler/kv"
)

func (s *Store) Scan(ctx context.Context, partition []byte, opts kv.ScanOptions) iter.Seq2[kv.Entry, error] {
	return func(yield func(kv.Entry, error) bool) {
		start := time.Now()
		var scanErr error
		defer func() { observe("scan", start, scanErr) }()
		if err := s.checkOpen(); err != nil {
			scanErr = err
			yield(kv.Entry{}, err)
			return
		}
		if err := kv.ValidatePartition(partition); err != nil {
			scanErr = err
			yield(kv.Entry{}, err)
			return
		}
		prefix := s.partitionPrefix(partition)
		returned := 0
		for e, err := range s.rangeIter(ctx, prefix+string(opts.Start), clientv3.GetPrefixRangeEnd(prefix), false) {
			if err != nil {
				scanErr = fmt.Errorf("etcdkv: scan partition %q: %w", partition, err)
				yield(kv.Entry{}, scanErr)
				return
			}
			ent := kv.Entry{Key: e.Key[len(prefix):], Value: e.Value, Predicate: kv.NewPredicate(e.ModRevision)}
			if !yield(ent, nil) {
				return
			}
			returned++
			if opts.Limit > 0 && returned >= opts.Limit {
				return
			}
		}
	}
}

// rangeIter walks [from, end) at a revision pinned by the first read,
// resuming after the last key at the current revision when that revision is
// compacted, or when a chunk is not answered within Config.RequestTimeout
// (the member serving it may be stopped; the resumed walk can land on
// another). Errors are mapped to kv sentinels.
func (s *Store) rangeIter(ctx context.Context, from, end string, keysOnly bool) iter.Seq2[*mvccpb.KeyValue, error] {
	return func(yield func(*mvccpb.KeyValue, error) bool) {
		var last []byte
		stalls := 0
		for restarts := 0; ; restarts++ {
			if last != nil {
				from = string(last) + "\x00"
			}
			var stopped, progressed bool
			emit := func(e *mvccpb.KeyValue) bool {
				last, progressed = e.Key, true
				if !yield(e, nil) {
					stopped = true
					return false
				}
				return true
			}
			var err error
			if s.noStream.Load() {
				err = s.rangePaged(ctx, from, end, keysOnly, emit)
			} else {
				err = s.rangeStream(ctx, from, end, keysOnly, emit)
			}
			if stopped || err == nil {
				return
			}
			if isCompacted(err) && restarts < 100 {
				scanRestarts.Inc()
				continue
			}
			if progressed {
				stalls = 0
			}
			if errors.Is(err, errAttemptTimeout) && ctx.Err() == nil && stalls < readAttempts-1 {
				stalls++
				continue
			}
			yield(nil, readErr(ctx, "range", err))
			return
		}
	}
}

var errUnimplemented = errors.New("etcdkv: RangeStream unimplemented")

func isCompacted(err error) bool {
	return errors.Is(err, rpctypes.ErrCompacted) || errors.Is(err, rpctypes.ErrGRPCCompacted)
}

func (s *Store) rangeStream(ctx context.Context, from, end string, keysOnly bool, emit func(*mvccpb.KeyValue) bool) error {
	sctx, cancel := context.WithCancel(ctx)
	opts := []clientv3.OpOption{clientv3.WithRange(end)}
	if keysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	ch, err := s.cli.GetStream(sctx, from, opts...)
	if err != nil {
		cancel()
		return s.streamFallback(ctx, err, from, end, keysOnly, emit, false)
	}
	// The client's stream goroutine blocks sending to ch until it is read:
	// drain it after cancelling, or it leaks.
	defer func() {
		cancel()
		for range ch {
		}
	}()
	// Each chunk is one attempt: the wait for it, not the time the caller
	// spends on the previous one, is bounded by Config.RequestTimeout.
	var timer *time.Timer
	var expired <-chan time.Time
	if s.cfg.RequestTimeout > 0 {
		timer = time.NewTimer(s.cfg.RequestTimeout)
		defer timer.Stop()
		expired = timer.C
	}
	got := false
	for {
		var r clientv3.RangeStreamResponse
		var ok bool
		select {
		case r, ok = <-ch:
		case <-expired:
			s.attemptAbandoned()
			return fmt.Errorf("%w: a scan chunk from %q", errAttemptTimeout, from)
		}
		if !ok {
			return nil
		}
		if err := r.Err(); err != nil {
			return s.streamFallback(ctx, err, from, end, keysOnly, emit, got)
		}
		if r.RangeResponse != nil {
			s.saw(r.Header)
		}
		for _, e := range r.Kvs {
			got = true
			if !emit(e) {
				return nil
			}
		}
		if timer != nil {
			timer.Reset(s.cfg.RequestTimeout)
		}
	}
}

// streamFallback switches to paged ranges when the server has no RangeStream
// (etcd before 3.7, or a proxy), remembering it for later scans.
func (s *Store) streamFallback(ctx context.Context, err error, from, end string, keysOnly bool, emit func(*mvccpb.KeyValue) bool, got bool) error {
	if status.Code(err) != codes.Unimplemented || got {
		return err
	}
	s.noStream.Store(true)
	s.cfg.Logger.Info("etcd server has no RangeStream; scanning in pages (slower for large partitions)")
	return s.rangePaged(ctx, from, end, keysOnly, emit)
}

func (s *Store) rangePaged(ctx context.Context, from, end string, keysOnly bool, emit func(*mvccpb.KeyValue) bool) error {
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(s.cfg.ScanPageSize))}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		if keysOnly {
			opts = append(opts, clientv3.WithKeysOnly())
		}
		var resp *clientv3.GetResponse
		err := s.read(ctx, func(c context.Context) error {
			var err error
			resp, err = s.cli.Get(c, from, opts...)
			return err
		})
		if err != nil {
			return err
		}
		s.saw(resp.Header)
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, e := range resp.Kvs {
			if !emit(e) {
				return nil
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// DropChunk is how many keys one DeleteRange of DropPartition removes: one
// raft proposal each, so a huge partition never becomes one unbounded delete.
const DropChunk = 5000

// afterDropChunk, when set (by tests only), runs after each deleted chunk.
var afterDropChunk func()

// DropPartition deletes a partition in chunks of at most DropChunk keys:
// read the next chunk's keys, then DeleteRange from a cursor to just after
// the chunk's last key, and move the cursor past it. Every chunk starts at
// the cursor, not at the partition's start: etcd keeps deleted keys in its
// index as tombstones until a compaction, and a range walks them, so
// starting each chunk at the partition's start would make dropping a
// large partition quadratic (1M keys: about 30k keys/s instead of well
// over 100k). Keys written behind the cursor meanwhile are found by one
// more pass from the partition's start at the end, which walks the
// tombstones once.
func (s *Store) DropPartition(ctx context.Context, partition []byte) (int64, error) {
	start := time.Now()
	n, err := s.dropPartition(ctx, partition)
	observe("drop_partition", start, err)
	return n, err
}

func (s *Store) dropPartition(ctx context.Context, partition []byte) (int64, error) {
	if err := s.checkOpen(); err != nil {
		return 0, err
	}
	if err := kv.ValidatePartition(partition); err != nil {
		return 0, err
	}
	prefix := s.partitionPrefix(partition)
	end := clientv3.GetPrefixRangeEnd(prefix)
	from := prefix
	var total int64
	for {
		var last []byte
		n := 0
		for e, err := range s.rangeIter(ctx, from, end, true) {
			if err != nil {
				return total, fmt.Errorf("etcdkv: drop partition %q: %w", partition, err)
			}
			last = e.Key
			n++
			if n == DropChunk {
				break
			}
		}
		if n > 0 {
			var resp *clientv3.DeleteResponse
			err := s.write(ctx, func(c context.Context) error {
				var err error
				// Partition drop: the partition's owner (a retired incarnation or token) is unreachable, so nobody re-creates its keys.
				resp, err = s.cli.Delete(c, from, clientv3.WithRange(string(last)+"\x00"))
				return err
			})
			if err != nil {
				// Deleting a range is idempotent: the next pass re-reads what is left.
				if maybeApplied(ctx, err) && ctx.Err() == nil {
					continue
				}
				return total, writeErr(ctx, fmt.Sprintf("drop partition %q", partition), err)
			}
			s.saw(resp.Header)
			kv.NoteWrite(ctx, resp.Header.Revision)
			total += resp.Deleted
			keysDropped.Add(float64(resp.Deleted))
			if afterDropChunk != nil {
				afterDropChunk()
			}
		}
		switch {
		case n == DropChunk:
			from = string(last) + "\x00"
		case from == prefix:
			// This pass read from the partition's start to its end.
			return total, nil
		default:
			from = prefix
		}
	}
}
