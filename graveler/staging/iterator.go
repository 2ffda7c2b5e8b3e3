package staging

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"sort"

	"graveler/graveler"
	"graveler/keys"
	"graveler/kv"
)

// iterator is List's graveler.ValueIterator: a lazy, paged walk of one
// token's partition. Each page is bounded by a count (doubling from
// cfg.ListFirstPageSize to cfg.ScanPageSize) and by cfg.ListPageBytes, and
// only the current page is held. The first page after List or a SeekGE
// that leaves the page is one kv.Scan with the page size as its limit, so
// reading a few entries costs one small read; the pages after it come
// from one more kv.Scan, left open from page to page until the partition
// ends, a SeekGE leaves the page, or Close. On etcd a scan is a
// RangeStream, and a stream per page would cost a linearizable read each
// time, restart at small chunks, and let the server read ahead past the
// page only to be cancelled: a full walk of a large token (a commit) read
// about 2.3x slower that way. etcdkv cannot pass a page size on to etcd as
// a limit instead, since etcd then counts every remaining key of the range.
//
// Invariant: once a page is fetched, every entry whose kv key is >= floor
// (> floor when floorExcl) and <= last (or any key, when done) is in
// page[pos:]. That is what lets SeekGE move forward inside the page
// without reading again.
type iterator struct {
	ctx       context.Context
	store     kv.Store
	partition []byte
	token     graveler.StagingToken
	cfg       Config
	// entries is keys.Entry(nil): every entry's kv key starts with it.
	entries []byte

	pageSize int
	page     []kv.Entry
	pos      int
	last     []byte // kv key of the page's last entry
	floor    []byte // nil until a page is fetched
	floorEx  bool
	start    []byte // where the next page starts (inclusive)
	done     bool   // nothing after the current page
	// next and stop pull from the open scan, which resumes at start; nil
	// when no scan is open.
	next func() (kv.Entry, error, bool)
	stop func()
	// bounded: the next page is the first since List or a SeekGE, read by
	// a scan limited to the page; every page is, with boundAll.
	bounded  bool
	boundAll bool

	// ranges are the token's range tombstones and reset ranges, read
	// before the first page (rangesRead); an entry staged before a
	// tombstone covering it is returned as a tombstone, one staged
	// before a reset range covering it is skipped.
	ranges     rangeSet
	rangesRead bool
	// read counts the records read (graveler.RecordCounter).
	read int

	value  *graveler.ValueRecord
	err    error
	closed bool
}

func newIterator(ctx context.Context, store kv.Store, partition []byte, token graveler.StagingToken, cfg Config) *iterator {
	entries := keys.Entry(nil)
	return &iterator{
		ctx:       ctx,
		store:     store,
		partition: partition,
		token:     token,
		cfg:       cfg,
		entries:   entries,
		pageSize:  cfg.ListFirstPageSize,
		start:     entries,
		bounded:   true,
	}
}

// Next advances to the next entry. The ValueRecord it makes is never
// reused: it stays valid after later calls, and its slices alias only the
// bytes the store handed over for that entry.
func (it *iterator) Next() bool {
	it.value = nil
	if it.err != nil || it.closed {
		return false
	}
	for {
		for it.pos >= len(it.page) {
			if it.done || !it.fetch() {
				return false
			}
		}
		e := it.page[it.pos]
		it.page[it.pos] = kv.Entry{} // let the caller's record be the only reference
		it.pos++
		it.floor, it.floorEx = e.Key, true
		key, err := keys.ParseEntry(e.Key)
		if err != nil {
			it.err = fmt.Errorf("staging: list token %q: %w: %w", it.token, ErrCorruptRecord, err)
			return false
		}
		v, reset, err := decode(e.Value)
		if err != nil {
			it.err = fmt.Errorf("staging: list token %q: key %s: %w", it.token, qkey(key), err)
			return false
		}
		it.read++
		if reset {
			// A reset record: the token stages nothing here.
			continue
		}
		switch verdict, _ := it.ranges.judge(key, e.Predicate.Version()); verdict {
		case entryReset:
			// Discarded by a reset range: the token stages nothing here.
			continue
		case entryDeleted:
			v = nil
		}
		it.value = &graveler.ValueRecord{Key: key[:len(key):len(key)], Value: v}
		return true
	}
}

// fetch reads the page at it.start. It returns false (with it.err set) on
// a read error.
func (it *iterator) fetch() bool {
	if err := it.ctx.Err(); err != nil {
		// An open scan may hold entries read before ctx ended.
		it.closeScan()
		it.err = storeErr(err, "list token %q", it.token)
		return false
	}
	if !it.rangesRead {
		rs, err := readRangesOf(it.ctx, it.store, it.partition, it.token)
		if err != nil {
			it.err = err
			return false
		}
		it.ranges, it.rangesRead = rs, true
	}
	clear(it.page)
	page := it.page[:0]
	size := 0
	more := false
	if it.next == nil {
		opts := kv.ScanOptions{Start: it.start}
		if it.bounded {
			opts.Limit = it.pageSize
		}
		it.next, it.stop = iter.Pull2(it.store.Scan(it.ctx, it.partition, opts))
	}
	for {
		e, err, ok := it.next()
		if !ok {
			break
		}
		if err != nil {
			it.closeScan()
			it.page, it.pos = page, 0
			it.err = storeErr(err, "list token %q", it.token)
			return false
		}
		if !bytes.HasPrefix(e.Key, it.entries) {
			break // past the entries (the partition holds nothing else today)
		}
		page = append(page, e)
		size += len(e.Key) + len(e.Value)
		if len(page) >= it.pageSize || size >= it.cfg.ListPageBytes {
			more = true
			break
		}
	}
	if !more || it.bounded {
		it.closeScan()
	}
	it.bounded = it.boundAll
	it.page, it.pos = page, 0
	it.floor, it.floorEx = it.start, false
	if more {
		it.last = page[len(page)-1].Key
		it.start = after(it.last)
	} else {
		it.last, it.start, it.done = nil, nil, true
	}
	it.pageSize = min(it.pageSize*2, it.cfg.ScanPageSize)
	return true
}

// Value returns the current entry, or nil before the first Next, after
// Next returned false, and after SeekGE.
func (it *iterator) Value() *graveler.ValueRecord { return it.value }

// SeekGE positions the iterator so that the next Next returns the first
// entry whose key is >= key (nil or empty: the first entry). A target
// inside the fetched page at or after the current position moves within
// the page; any other target starts a new scan at key.
func (it *iterator) SeekGE(key graveler.Key) {
	it.value = nil
	if it.err != nil || it.closed {
		return
	}
	target := keys.Entry(key)
	if it.seekInPage(target) {
		return
	}
	it.closeScan()
	clear(it.page)
	it.page, it.pos = it.page[:0], 0
	it.last, it.floor, it.floorEx = nil, nil, false
	it.start, it.done, it.bounded = target, false, true
	it.pageSize = it.cfg.ListFirstPageSize
}

func (it *iterator) seekInPage(target []byte) bool {
	if it.floor == nil {
		return false
	}
	if c := bytes.Compare(target, it.floor); c < 0 || c == 0 && it.floorEx {
		return false
	}
	if !it.done && bytes.Compare(target, it.last) > 0 {
		return false
	}
	rest := it.page[it.pos:]
	i := sort.Search(len(rest), func(j int) bool { return bytes.Compare(rest[j].Key, target) >= 0 })
	clear(rest[:i])
	it.pos += i
	it.floor, it.floorEx = target, false
	return true
}

// BoundPages makes every page a scan limited to the page, as the first
// is: a reader that stops after a bounded number of entries (a listing
// page's read budget) then never has the store read ahead of it, at the
// cost of one request per page on a long walk.
func (it *iterator) BoundPages() { it.boundAll, it.bounded = true, true }

// RecordsRead is how many stored entries the iterator has decoded.
func (it *iterator) RecordsRead() int { return it.read }

// Err returns the error that ended the iteration, if any.
func (it *iterator) Err() error { return it.err }

// closeScan ends the open scan, if any, releasing what it holds.
func (it *iterator) closeScan() {
	if it.stop != nil {
		it.stop()
		it.next, it.stop = nil, nil
	}
}

// Close ends the scan and releases the current page. It is safe to call
// more than once; Next returns false afterwards.
func (it *iterator) Close() {
	it.closeScan()
	it.closed = true
	it.page, it.value, it.last, it.floor, it.start = nil, nil, nil, nil, nil
}
