package kvtest

import (
	"bytes"
	"context"
	"iter"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"graveler/kv"
)

// PauseStore wraps a Store with named pause points, for deterministic
// interleaving tests: a test holds one chosen operation (before it reaches
// the inner store, or after it was applied but before its caller hears),
// runs the racing operation while it is held, then releases it. Every
// compare-and-swap path is tested this way with the race that matters for
// it between its read and its write.
//
// Operations are named as FaultStore names them: get, set, setif, delete,
// deleteif, scan, set_and_read, get_many, drop_partition. For the
// multi-key operations Op.Partition and Op.Key are those of the first
// write (set_and_read) or read (get_many). It passes through the optional
// abilities (SetReader, MultiGetter, PartitionDropper) to an inner store
// that has them, so fenced paths stay fenced. Safe for concurrent use.
type PauseStore struct {
	inner kv.Store
	n     atomic.Int64

	mu     sync.Mutex
	points []*PausePoint
}

// Op describes one operation as it reaches a PauseStore.
type Op struct {
	Name      string
	Partition []byte
	Key       []byte
	// N numbers the operation, from 1, in the order they arrived.
	N int64
}

// Is reports whether op is name on (partition, key); a nil key matches any
// key of the partition, a nil partition any partition.
func (op Op) Is(name string, partition, key []byte) bool {
	return op.Name == name && (partition == nil || bytes.Equal(op.Partition, partition)) &&
		(key == nil || bytes.Equal(op.Key, key))
}

// When says where a pause point holds its operation.
type When int

const (
	// Before holds the operation before the inner store sees it.
	Before When = iota
	// After holds it after the inner store applied it, before the caller
	// gets the result (the window of an acknowledgement still in flight).
	After
)

// PausePoint is one armed pause: it fires on the first operation that
// matches, holds it until Release, and then lets later matches through.
type PausePoint struct {
	when    When
	match   func(Op) bool
	fired   bool
	op      Op
	reached chan struct{}
	release chan struct{}
	once    sync.Once
}

// NewPauseStore wraps inner.
func NewPauseStore(inner kv.Store) *PauseStore { return &PauseStore{inner: inner} }

// Inner returns the wrapped store.
func (s *PauseStore) Inner() kv.Store { return s.inner }

// Pause arms a point that holds the first operation matching match.
func (s *PauseStore) Pause(when When, match func(Op) bool) *PausePoint {
	p := &PausePoint{when: when, match: match, reached: make(chan struct{}), release: make(chan struct{})}
	s.mu.Lock()
	s.points = append(s.points, p)
	s.mu.Unlock()
	return p
}

// Reached is closed once the point holds its operation.
func (p *PausePoint) Reached() <-chan struct{} { return p.reached }

// Op is the operation held (valid once Reached is closed).
func (p *PausePoint) Op() Op { <-p.reached; return p.op }

// Wait blocks until the point holds its operation, failing t after d.
func (p *PausePoint) Wait(t testing.TB, d time.Duration) Op {
	t.Helper()
	select {
	case <-p.reached:
		return p.op
	case <-time.After(d):
		t.Fatalf("kvtest: no operation reached the pause point within %v", d)
		return Op{}
	}
}

// Release lets the held operation go on (and disarms a point that has not
// fired yet). Safe to call more than once.
func (p *PausePoint) Release() { p.once.Do(func() { close(p.release) }) }

// claim returns the armed point of when that matches op, marking it fired.
func (s *PauseStore) claim(when When, op Op) *PausePoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range s.points {
		if p.when != when || p.fired {
			continue
		}
		select {
		case <-p.release:
			continue // released before it fired: disarmed
		default:
		}
		if p.match(op) {
			p.fired, p.op = true, op
			s.points = append(s.points[:i:i], s.points[i+1:]...)
			return p
		}
	}
	return nil
}

func (s *PauseStore) hold(when When, op Op) {
	if p := s.claim(when, op); p != nil {
		close(p.reached)
		<-p.release
	}
}

// do runs apply between the Before and After pause points of op.
func (s *PauseStore) do(name string, partition, key []byte, apply func()) {
	op := Op{Name: name, Partition: partition, Key: key, N: s.n.Add(1)}
	s.hold(Before, op)
	apply()
	s.hold(After, op)
}

func (s *PauseStore) Get(ctx context.Context, partition, key []byte) (v []byte, pred kv.Predicate, err error) {
	s.do("get", partition, key, func() { v, pred, err = s.inner.Get(ctx, partition, key) })
	return
}

func (s *PauseStore) Set(ctx context.Context, partition, key, value []byte) (err error) {
	s.do("set", partition, key, func() { err = s.inner.Set(ctx, partition, key, value) })
	return
}

func (s *PauseStore) SetIf(ctx context.Context, partition, key, value []byte, pred kv.Predicate) (err error) {
	s.do("setif", partition, key, func() { err = s.inner.SetIf(ctx, partition, key, value, pred) })
	return
}

func (s *PauseStore) Delete(ctx context.Context, partition, key []byte) (err error) {
	// A wrapper: forwards the caller's Delete unchanged.
	s.do("delete", partition, key, func() { err = s.inner.Delete(ctx, partition, key) })
	return
}

func (s *PauseStore) DeleteIf(ctx context.Context, partition, key []byte, pred kv.Predicate) (err error) {
	s.do("deleteif", partition, key, func() { err = s.inner.DeleteIf(ctx, partition, key, pred) })
	return
}

// Scan is held as a whole, before its first entry or after its last.
func (s *PauseStore) Scan(ctx context.Context, partition []byte, opts kv.ScanOptions) iter.Seq2[kv.Entry, error] {
	return func(yield func(kv.Entry, error) bool) {
		op := Op{Name: "scan", Partition: partition, Key: opts.Start, N: s.n.Add(1)}
		s.hold(Before, op)
		defer s.hold(After, op)
		for e, err := range s.inner.Scan(ctx, partition, opts) {
			if !yield(e, err) || err != nil {
				return
			}
		}
	}
}

func (s *PauseStore) SetAndRead(ctx context.Context, writes []kv.Write, reads []kv.KeyRef) (out []kv.Entry, err error) {
	var part, key []byte
	if len(writes) > 0 {
		part, key = writes[0].Partition, writes[0].Key
	}
	s.do("set_and_read", part, key, func() { out, err = kv.SetAndRead(ctx, s.inner, writes, reads) })
	return
}

func (s *PauseStore) GetMany(ctx context.Context, reads []kv.KeyRef) (out []kv.Entry, err error) {
	var part, key []byte
	if len(reads) > 0 {
		part, key = reads[0].Partition, reads[0].Key
	}
	s.do("get_many", part, key, func() { out, err = kv.GetMany(ctx, s.inner, reads) })
	return
}

func (s *PauseStore) DropPartition(ctx context.Context, partition []byte) (n int64, err error) {
	s.do("drop_partition", partition, nil, func() { n, err = kv.DropPartition(ctx, s.inner, partition) })
	return
}

func (s *PauseStore) Close() error { return s.inner.Close() }

var (
	_ kv.Store            = (*PauseStore)(nil)
	_ kv.SetReader        = (*PauseStore)(nil)
	_ kv.MultiGetter      = (*PauseStore)(nil)
	_ kv.PartitionDropper = (*PauseStore)(nil)
	_ kv.CondWriter       = (*PauseStore)(nil)
)

// SetAndReadUnless pauses as SetAndRead does (same name): to a test it is
// the same request.
func (s *PauseStore) SetAndReadUnless(ctx context.Context, absent []kv.KeyRef, writes []kv.Write, reads []kv.KeyRef) (out []kv.Entry, applied bool, err error) {
	var part, key []byte
	if len(writes) > 0 {
		part, key = writes[0].Partition, writes[0].Key
	}
	s.do("set_and_read", part, key, func() { out, applied, err = kv.SetAndReadUnless(ctx, s.inner, absent, writes, reads) })
	return
}

// DeleteIfWith pauses as DeleteIf does (same name).
func (s *PauseStore) DeleteIfWith(ctx context.Context, partition, key []byte, pred kv.Predicate, also []kv.Write) (err error) {
	s.do("deleteif", partition, key, func() { err = kv.DeleteIfWith(ctx, s.inner, partition, key, pred, also) })
	return
}

// SetIfWith pauses as SetIf does (same name).
func (s *PauseStore) SetIfWith(ctx context.Context, partition, key, value []byte, pred kv.Predicate, absent []kv.KeyRef, also []kv.Write) (err error) {
	s.do("setif", partition, key, func() { err = kv.SetIfWith(ctx, s.inner, partition, key, value, pred, absent, also) })
	return
}
