package kv

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"sync"

	"github.com/google/btree"
)

// MemoryStore is an in-memory, sorted Store for fast tests of logic above
// kv. It enforces the same limits as a real store and gives the same
// consistency (a scan reads in pages, so it interleaves with writers just as
// a paged etcd scan does). Its revisions (NoteWrite, Predicate.Version)
// come from one counter that every write and every deletion advances, as
// etcd's revision does; a SetAndRead advances it once per key written.
type MemoryStore struct {
	limits Limits

	mu         sync.RWMutex
	closed     bool
	version    int64
	partitions map[string]*btree.BTreeG[memItem]
}

type memItem struct {
	key     []byte
	value   []byte
	version int64
}

func memLess(a, b memItem) bool { return bytes.Compare(a.key, b.key) < 0 }

var (
	_ Store            = (*MemoryStore)(nil)
	_ PartitionDropper = (*MemoryStore)(nil)
	_ SetReader        = (*MemoryStore)(nil)
	_ MultiGetter      = (*MemoryStore)(nil)
)

// memScanPage is how many entries a scan copies per lock acquisition.
const memScanPage = 256

// NewMemoryStore returns an empty store with DefaultLimits.
func NewMemoryStore() *MemoryStore { return NewMemoryStoreWithLimits(DefaultLimits) }

// NewMemoryStoreWithLimits returns an empty store enforcing limits.
func NewMemoryStoreWithLimits(limits Limits) *MemoryStore {
	return &MemoryStore{limits: limits, partitions: make(map[string]*btree.BTreeG[memItem])}
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

func (s *MemoryStore) Get(ctx context.Context, partition, key []byte) ([]byte, Predicate, error) {
	if err := ctx.Err(); err != nil {
		return nil, Absent, err
	}
	if err := s.limits.CheckKey(partition, key); err != nil {
		return nil, Absent, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, Absent, ErrClosed
	}
	t := s.partitions[string(partition)]
	if t == nil {
		return nil, Absent, fmt.Errorf("%w: %q in partition %q", ErrNotFound, key, partition)
	}
	it, ok := t.Get(memItem{key: key})
	if !ok {
		return nil, Absent, fmt.Errorf("%w: %q in partition %q", ErrNotFound, key, partition)
	}
	return clone(it.value), NewPredicate(it.version), nil
}

func (s *MemoryStore) Set(ctx context.Context, partition, key, value []byte) error {
	return s.write(ctx, partition, key, value, nil)
}

func (s *MemoryStore) SetIf(ctx context.Context, partition, key, value []byte, pred Predicate) error {
	return s.write(ctx, partition, key, value, &pred)
}

func (s *MemoryStore) write(ctx context.Context, partition, key, value []byte, pred *Predicate) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.limits.CheckWrite(partition, key, value); err != nil {
		return err
	}
	s.mu.Lock()
	err := s.writeLocked(partition, key, value, pred)
	rev := s.version
	s.mu.Unlock()
	if err == nil {
		NoteWrite(ctx, rev)
	}
	return err
}

func (s *MemoryStore) writeLocked(partition, key, value []byte, pred *Predicate) error {
	if s.closed {
		return ErrClosed
	}
	t := s.partitions[string(partition)]
	if t == nil {
		t = btree.NewG(16, memLess)
		s.partitions[string(partition)] = t
	}
	if pred != nil {
		cur, ok := t.Get(memItem{key: key})
		var curVersion int64
		if ok {
			curVersion = cur.version
		}
		if curVersion != pred.version {
			return fmt.Errorf("%w: %q in partition %q is %v, expected %v", ErrPredicateFailed, key, partition, NewPredicate(curVersion), *pred)
		}
	}
	s.version++
	t.ReplaceOrInsert(memItem{key: clone(key), value: clone(value), version: s.version})
	return nil
}

// SetAndRead writes and reads under one lock: the writes are atomic and
// the reads see the store exactly as they left it.
func (s *MemoryStore) SetAndRead(ctx context.Context, writes []Write, reads []KeyRef) ([]Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckSetAndRead(writes, reads); err != nil {
		return nil, err
	}
	for _, w := range writes {
		if err := s.limits.CheckWrite(w.Partition, w.Key, w.Value); err != nil {
			return nil, err
		}
	}
	if err := s.checkReads(reads); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range writes {
		if err := s.writeLocked(w.Partition, w.Key, w.Value, nil); err != nil {
			return nil, err
		}
	}
	// Each write took its own version; the last is the one the reads see.
	NoteWrite(ctx, s.version)
	return s.readLocked(reads), nil
}

func (s *MemoryStore) checkReads(reads []KeyRef) error {
	for _, r := range reads {
		if err := s.limits.CheckKey(r.Partition, r.Key); err != nil {
			return err
		}
	}
	return nil
}

// readLocked reads each of reads, Absent when missing; s.mu is held.
func (s *MemoryStore) readLocked(reads []KeyRef) []Entry {
	out := make([]Entry, len(reads))
	for i, r := range reads {
		out[i] = Entry{Key: clone(r.Key)}
		if t := s.partitions[string(r.Partition)]; t != nil {
			if it, ok := t.Get(memItem{key: r.Key}); ok {
				out[i].Value, out[i].Predicate = clone(it.value), NewPredicate(it.version)
			}
		}
	}
	return out
}

// GetMany reads under one lock: one instant.
func (s *MemoryStore) GetMany(ctx context.Context, reads []KeyRef) ([]Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckGetMany(reads); err != nil {
		return nil, err
	}
	if err := s.checkReads(reads); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	return s.readLocked(reads), nil
}

func (s *MemoryStore) Delete(ctx context.Context, partition, key []byte) error {
	// Store.Delete itself: unconditional by contract.
	return s.remove(ctx, partition, key, nil)
}

func (s *MemoryStore) DeleteIf(ctx context.Context, partition, key []byte, pred Predicate) error {
	return s.remove(ctx, partition, key, &pred)
}

// remove deletes key, only at version *pred when pred is not nil, as
// write sets it.
func (s *MemoryStore) remove(ctx context.Context, partition, key []byte, pred *Predicate) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.limits.CheckKey(partition, key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	t := s.partitions[string(partition)]
	if pred != nil {
		var cur int64
		if t != nil {
			if it, ok := t.Get(memItem{key: key}); ok {
				cur = it.version
			}
		}
		if cur != pred.version {
			return fmt.Errorf("%w: delete %q in partition %q: it is %v, expected %v", ErrPredicateFailed, key, partition, NewPredicate(cur), *pred)
		}
	}
	if t != nil {
		if _, ok := t.Delete(memItem{key: key}); ok {
			// A deletion takes a version of its own, as on etcd, so that
			// its revision comes after every version of the key.
			s.version++
		}
		if t.Len() == 0 {
			delete(s.partitions, string(partition))
		}
	}
	NoteWrite(ctx, s.version)
	return nil
}

func (s *MemoryStore) Scan(ctx context.Context, partition []byte, opts ScanOptions) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		if err := ValidatePartition(partition); err != nil {
			yield(Entry{}, err)
			return
		}
		start := clone(opts.Start)
		inclusive := true
		returned := 0
		for {
			if err := ctx.Err(); err != nil {
				yield(Entry{}, err)
				return
			}
			page, err := s.scanPage(partition, start, inclusive)
			if err != nil {
				yield(Entry{}, err)
				return
			}
			for _, e := range page {
				if !yield(e, nil) {
					return
				}
				returned++
				if opts.Limit > 0 && returned >= opts.Limit {
					return
				}
			}
			if len(page) < memScanPage {
				return
			}
			start, inclusive = page[len(page)-1].Key, false
		}
	}
}

func (s *MemoryStore) scanPage(partition, start []byte, inclusive bool) ([]Entry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	t := s.partitions[string(partition)]
	if t == nil {
		return nil, nil
	}
	page := make([]Entry, 0, memScanPage)
	visit := func(it memItem) bool {
		if !inclusive && bytes.Equal(it.key, start) {
			return true
		}
		page = append(page, Entry{Key: clone(it.key), Value: clone(it.value), Predicate: NewPredicate(it.version)})
		return len(page) < memScanPage
	}
	if start == nil {
		t.Ascend(visit)
	} else {
		t.AscendGreaterOrEqual(memItem{key: start}, visit)
	}
	return page, nil
}

// DropPartition deletes the whole partition at once; memory has no request
// size to bound.
func (s *MemoryStore) DropPartition(ctx context.Context, partition []byte) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := ValidatePartition(partition); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	t := s.partitions[string(partition)]
	if t == nil {
		return 0, nil
	}
	delete(s.partitions, string(partition))
	s.version++
	NoteWrite(ctx, s.version)
	return int64(t.Len()), nil
}

// Partitions lists the partitions holding at least one key, for tests that
// assert nothing was left behind.
func (s *MemoryStore) Partitions() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.partitions))
	for p := range s.partitions {
		out = append(out, p)
	}
	return out
}

func (s *MemoryStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.partitions = nil
	return nil
}
