package etcdkv

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/big"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
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
// compacted, or when a stream's attempt (its opening and first chunk, or a
// later chunk) is not answered within Config.RequestTimeout (the member
// serving it may be stopped; the resumed walk can land on another). A
// paged walk is not resumed here: read already sent its page again, and
// resuming would multiply its attempts. Errors are mapped to kv sentinels.
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
			paged := s.noStream.Load()
			var err error
			if paged {
				err = s.rangePaged(ctx, from, end, keysOnly, emit)
			} else {
				err = s.rangeStream(ctx, from, end, keysOnly, emit)
			}
			if stopped || err == nil {
				return
			}
			if errors.Is(err, errUnimplemented) {
				// Nothing was read yet: the same range, in pages.
				continue
			}
			if isCompacted(err) && restarts < 100 {
				scanRestarts.Inc()
				continue
			}
			if paged {
				yield(nil, readErr(ctx, "range", err))
				return
			}
			if progressed {
				stalls = 0
			}
			// A stalled member, or one that failed under the stream: go on
			// after the last key, on another member.
			if (errors.Is(err, errAttemptTimeout) || memberFailed(ctx, err)) && ctx.Err() == nil && stalls < readAttempts-1 {
				stalls++
				if !errors.Is(err, errAttemptTimeout) && !resendPause(ctx, stalls) {
					yield(nil, readErr(ctx, "range", err))
					return
				}
				continue
			}
			if errors.Is(err, errAttemptTimeout) {
				err = s.attemptsRanOut()
			}
			yield(nil, readErr(ctx, "range", err))
			return
		}
	}
}

// errUnimplemented: the server has no RangeStream (noStream is now set).
var errUnimplemented = errors.New("etcdkv: RangeStream unimplemented")

func isCompacted(err error) bool {
	return errors.Is(err, rpctypes.ErrCompacted) || errors.Is(err, rpctypes.ErrGRPCCompacted)
}

// errOpenTimeout ends a stream whose opening ran out of its attempt.
var errOpenTimeout = errors.New("etcdkv: opening a scan stream ran out of the request timeout")

func (s *Store) rangeStream(ctx context.Context, from, end string, keysOnly bool, emit func(*mvccpb.KeyValue) bool) error {
	sctx, cancel := context.WithCancelCause(ctx)
	opts := []clientv3.OpOption{clientv3.WithRange(end)}
	if keysOnly {
		opts = append(opts, clientv3.WithKeysOnly())
	}
	// The opening and the first chunk are one attempt. The client waits
	// for a ready connection without bound (WaitForReady), so with no
	// member reachable an unbounded open would last as long as the
	// caller's context, for ever without a deadline.
	var openTimer *time.Timer
	due := time.Now().Add(s.cfg.RequestTimeout)
	if s.cfg.RequestTimeout > 0 {
		openTimer = time.AfterFunc(s.cfg.RequestTimeout, func() { cancel(errOpenTimeout) })
	}
	ch, err := s.cli.GetStream(sctx, from, opts...)
	openTimedOut := openTimer != nil && !openTimer.Stop()
	if err != nil {
		cancel(nil)
		if ctx.Err() == nil && context.Cause(sctx) == errOpenTimeout {
			s.attemptAbandoned()
			return fmt.Errorf("%w: opening a scan from %q", errAttemptTimeout, from)
		}
		return s.streamFallback(err, false)
	}
	// The client's stream goroutine blocks sending to ch until it is read:
	// drain it after cancelling, or it leaks.
	defer func() {
		cancel(nil)
		for range ch {
		}
	}()
	if openTimedOut {
		// Opened as the attempt ran out, and cancelled by it.
		s.attemptAbandoned()
		return fmt.Errorf("%w: opening a scan from %q", errAttemptTimeout, from)
	}
	// Each later chunk is one attempt: the wait for it, not the time the
	// caller spends on the previous one, is bounded by
	// Config.RequestTimeout.
	var timer *time.Timer
	var expired <-chan time.Time
	if s.cfg.RequestTimeout > 0 {
		timer = time.NewTimer(time.Until(due))
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
			return s.streamFallback(err, got)
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

// streamFallback turns a server without RangeStream (etcd before 3.7, or
// a proxy) answering before any entry into errUnimplemented, remembering
// it for later scans, which read in pages.
func (s *Store) streamFallback(err error, got bool) error {
	if status.Code(err) != codes.Unimplemented || got {
		return err
	}
	s.noStream.Store(true)
	s.cfg.Logger.Info("etcd server has no RangeStream; scanning in pages (slower for large partitions)")
	return fmt.Errorf("%w: %v", errUnimplemented, err)
}

// rangePaged walks [from, end) in pages of ScanPageSize keys at the
// revision of its first page. etcd's unary Range always counts every key
// from the page's start to the range's end, whatever the limit (no field
// of RangeRequest turns the count off; RangeStream skips it), so pages
// over the whole remaining range would cost the scan a count of the rest
// of the range per page: quadratic in the number of keys. Each page after
// the first asks instead for a window [from, to) expected to hold about
// 1.5 pages, estimated from the key space the last full page spanned
// (pageWindow); a window with fewer keys than a page is read whole and the
// scan goes on after it. The count is then about the window's keys, and
// the keys and their order are the same as one range.
// afterPagedRange, when set (by tests only), gets the count etcd made for
// each page of a paged scan: the keys it visited in the page's range.
var afterPagedRange func(counted int64)

func (s *Store) rangePaged(ctx context.Context, from, end string, keysOnly bool, emit func(*mvccpb.KeyValue) bool) error {
	var rev int64
	page := s.cfg.ScanPageSize
	win := newPageWindow(end)
	for {
		to := win.to(from)
		opts := []clientv3.OpOption{clientv3.WithRange(to), clientv3.WithLimit(int64(page))}
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
		if status.Code(err) == codes.ResourceExhausted && page > 1 && ctx.Err() == nil {
			// The page is larger than the client accepts (pages count
			// keys, and values reach kv.DefaultLimits' megabyte): read it
			// again in halves, and keep the smaller page for the rest.
			page /= 2
			s.cfg.Logger.Info("paged scan: a page exceeded the largest response the client accepts; reading smaller pages", zap.Int("page_keys", page), zap.Error(err))
			continue
		}
		if err != nil {
			return err
		}
		s.saw(resp.Header)
		if rev == 0 {
			rev = resp.Header.Revision
		}
		if afterPagedRange != nil {
			afterPagedRange(resp.Count)
		}
		for _, e := range resp.Kvs {
			if !emit(e) {
				return nil
			}
		}
		switch {
		case resp.More && len(resp.Kvs) > 0:
			last := string(resp.Kvs[len(resp.Kvs)-1].Key)
			win.next(from, last)
			from = last + "\x00"
		case to == end:
			return nil
		default:
			win.next(from, "")
			from = to
		}
	}
}

// pageWindow estimates where the next page of a paged scan ends. Keys are
// read as numbers: the windowKeyBytes bytes after the prefix that the
// first and last keys of the last full page share. A window is 1.5 times
// the span of that page's keys, doubled after each window that held less
// than a page, and ends at most where keys stop sharing that prefix.
// Where keys are uneven at the byte level (decimal digits: a gap in the
// numbers at each carry), a window that grew across a gap may hold several
// pages and etcd counts them all, about once per key for each level of
// gaps: measured from 2.5 (random bytes) to 6 (dense decimal) keys counted
// per key scanned, where ranges to the end count about keys/(2 x page).
type pageWindow struct {
	limit   string // the range's end
	bounded bool   // limit is a key, not "to the end of the key space"
	base    int    // bytes of a key before its number
	span    *big.Int
}

const windowKeyBytes, windowContextBytes = 32, 8

func newPageWindow(end string) *pageWindow {
	return &pageWindow{limit: end, bounded: end != "" && end != "\x00"}
}

func (w *pageWindow) num(key string) *big.Int {
	b := make([]byte, windowKeyBytes)
	if len(key) > w.base {
		copy(b, key[w.base:])
	}
	return new(big.Int).SetBytes(b)
}

// to returns the end of the next page's range when it starts at from.
func (w *pageWindow) to(from string) string {
	if w.span == nil || !w.bounded || len(from) < w.base {
		return w.limit
	}
	head := from[:w.base]
	var to string
	n := new(big.Int).Add(w.num(from), w.span)
	if n.BitLen() > 8*windowKeyBytes {
		// Past every key with from's prefix: end there.
		if to = clientv3.GetPrefixRangeEnd(head); head == "" || to == "\x00" {
			return w.limit
		}
	} else {
		to = head + string(n.FillBytes(make([]byte, windowKeyBytes)))
	}
	if to <= from || to >= w.limit {
		return w.limit
	}
	return to
}

// next sets the window after a page read from from: last is the page's
// last key when the page was full, "" when its window held less than a
// page and was read whole.
func (w *pageWindow) next(from, last string) {
	if !w.bounded {
		return
	}
	if last == "" {
		if w.span != nil {
			w.span.Lsh(w.span, 1)
		}
		return
	}
	n := 0
	for n < len(from) && n < len(last) && from[n] == last[n] {
		n++
	}
	// A few bytes of the shared prefix stay in the number, so that a
	// window can reach the neighbouring prefixes.
	w.base = max(n-windowContextBytes, 0)
	d := new(big.Int).Sub(w.num(last), w.num(from))
	if d.Sign() <= 0 {
		w.span = nil
		return
	}
	w.span = d.Add(d, new(big.Int).Rsh(d, 1))
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
