// Package gcfence closes the race between the garbage collector deleting
// committed objects and a commit writing or refreshing the same objects.
//
// Committed objects are content-addressed, so a commit may write (or, when
// it passes a subtree through, touch) an object that already exists and
// that the collector found unreferenced and old. The collector checks an
// object's modification time and then deletes it: two blob-store calls
// that no condition joins. A commit whose write or touch lands between
// them would reference an object that is then deleted. Blob stores offer
// no conditional delete to close that, so etcd does.
//
// Before the collector deletes anything in a storage namespace it records
// a sweep there (keys.GCSweep): running, until a deadline it extends while
// it works, and done when it ends. It checks an object's age only after
// that record is stored, and never deletes once its deadline is near.
// A commit reads the record before its first object write (Begin) and
// again after its last (Settle). If the record did not change and no sweep
// was running, no sweep's check-then-delete overlapped the commit's
// writes: either the sweep checked after the commit wrote (and found the
// objects young) or it never ran. Otherwise the commit waits until that
// sweep is done (or its deadline has passed) and then checks that every
// object of its new tree is stored (Wrap does this around every
// CommittedManager call that writes a tree); an object found gone fails
// the commit with ErrSwept, which the caller retries, writing it again.
//
// The deadline makes this depend on clocks: the collector stops deleting
// SafetyMargin before its deadline and a writer waits for the deadline
// plus ClockSkew, so the clocks of the two machines may disagree by up to
// SafetyMargin+ClockSkew. A sweep record names no writer and no object,
// so the cost to a commit is two reads of one small key.
//
// A Fence and a Sweep are safe for concurrent use. Errors: ErrSwept (wraps
// graveler.ErrUnavailable), ErrSweepBusy (another collector is sweeping
// the namespace), ErrSweepLost (the record changed under a running sweep,
// or its deadline passed: stop deleting), ErrCorruptRecord, and kv errors
// wrapped.
package gcfence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"graveler/graveler"
	"graveler/internal/ctxtime"
	"graveler/keys"
	"graveler/kv"
)

// Defaults of a Fence.
const (
	// DefaultTTL is how far ahead a sweep's deadline is set each time it
	// is extended.
	DefaultTTL = 30 * time.Second
	// DefaultSafetyMargin is how long before its deadline a sweep stops
	// deleting.
	DefaultSafetyMargin = 10 * time.Second
	// DefaultClockSkew is how long after a sweep's deadline a writer
	// still treats it as running.
	DefaultClockSkew = 10 * time.Second
	// DefaultPoll is how often a writer looks again at a running sweep.
	DefaultPoll = 200 * time.Millisecond
)

var (
	// ErrSwept: an object the new tree references was deleted by a sweep
	// that overlapped its writing. Retrying writes it again.
	ErrSwept = fmt.Errorf("an object of the new tree was deleted by a concurrent garbage collection; retry: %w", graveler.ErrUnavailable)
	// ErrSweepBusy: another collector holds a running sweep of the
	// namespace.
	ErrSweepBusy = errors.New("gcfence: another garbage collection is sweeping this storage namespace")
	// ErrSweepLost: the sweep may no longer delete (its record changed,
	// or its deadline is too near or past).
	ErrSweepLost = errors.New("gcfence: the sweep lost its record or its deadline passed; stop deleting")
	// ErrCorruptRecord: a sweep record that does not decode.
	ErrCorruptRecord = errors.New("gcfence: sweep record does not decode")
)

// Record states.
const (
	StateRunning = "running"
	StateDone    = "done"
)

// Record is the value of keys.GCSweep(ns), JSON-encoded.
type Record struct {
	Run     string    `json:"run"`
	State   string    `json:"state"`
	Started time.Time `json:"started"`
	Until   time.Time `json:"until"`
}

// Config tunes a Fence; zero values take the defaults.
type Config struct {
	TTL          time.Duration
	SafetyMargin time.Duration
	ClockSkew    time.Duration
	Poll         time.Duration
	// Now is the clock (tests); time.Now by default.
	Now func() time.Time
}

// Fence reads and writes sweep records in a kv store.
type Fence struct {
	store kv.Store
	cfg   Config
}

// New returns a Fence over store (the store gravelerd and the cleaner
// share).
func New(store kv.Store, cfg Config) *Fence {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.SafetyMargin <= 0 {
		cfg.SafetyMargin = DefaultSafetyMargin
	}
	if cfg.SafetyMargin*2 > cfg.TTL {
		cfg.SafetyMargin = cfg.TTL / 3
	}
	if cfg.ClockSkew <= 0 {
		cfg.ClockSkew = DefaultClockSkew
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Fence{store: store, cfg: cfg}
}

// key is the record key of ns, spelled as the collector compares
// namespaces, so two spellings of one location share one record.
func key(ns graveler.StorageNamespace) []byte {
	if norm, err := graveler.NormalizeStorageNamespace(ns); err == nil {
		return keys.GCSweep(string(norm))
	}
	return keys.GCSweep(string(ns))
}

func (f *Fence) read(ctx context.Context, ns graveler.StorageNamespace) (*Record, kv.Predicate, error) {
	v, pred, err := f.store.Get(ctx, keys.Graveler(), key(ns))
	if errors.Is(err, kv.ErrNotFound) {
		return nil, kv.Predicate{}, nil
	}
	if err != nil {
		return nil, kv.Predicate{}, fmt.Errorf("gcfence: read sweep record of %s: %w", ns, err)
	}
	var rec Record
	if err := json.Unmarshal(v, &rec); err != nil {
		return nil, pred, fmt.Errorf("%w: %s: %w", ErrCorruptRecord, ns, err)
	}
	return &rec, pred, nil
}

// running reports whether rec is a sweep a writer must still wait for.
func (f *Fence) running(rec *Record) bool {
	return rec != nil && rec.State == StateRunning && f.cfg.Now().Before(rec.Until.Add(f.cfg.ClockSkew))
}

// Token is what Begin saw.
type Token struct {
	version int64
	running bool
}

// Begin is called before a writer's first object write in ns.
func (f *Fence) Begin(ctx context.Context, ns graveler.StorageNamespace) (Token, error) {
	rec, pred, err := f.read(ctx, ns)
	if err != nil && !errors.Is(err, ErrCorruptRecord) {
		return Token{}, err
	}
	// A record that does not decode is treated as a running sweep: Settle
	// then checks the tree.
	return Token{version: pred.Version(), running: err != nil || f.running(rec)}, nil
}

// Settle is called after a writer's last object write in ns. It returns
// once no sweep that could have overlapped the writes since Begin can
// still delete, and reports whether one could have (the writer must then
// check that its objects are stored).
func (f *Fence) Settle(ctx context.Context, ns graveler.StorageNamespace, tok Token) (bool, error) {
	rec, pred, err := f.read(ctx, ns)
	if err != nil && !errors.Is(err, ErrCorruptRecord) {
		return false, err
	}
	if err == nil && pred.Version() == tok.version && !tok.running {
		return false, nil
	}
	for err == nil && f.running(rec) {
		if !ctxtime.Sleep(ctx, f.cfg.Poll) {
			return true, ctx.Err()
		}
		rec, _, err = f.read(ctx, ns)
		if err != nil && !errors.Is(err, ErrCorruptRecord) {
			return true, err
		}
	}
	return true, nil
}

// Sweep is a collector's running sweep of one namespace.
type Sweep struct {
	// mu serializes the record's updates: a collector deletes from
	// several goroutines.
	mu   sync.Mutex
	f    *Fence
	ns   graveler.StorageNamespace
	rec  Record
	pred kv.Predicate
	lost bool
}

// StartSweep records a running sweep of ns by run. ErrSweepBusy when
// another run's sweep there is still running.
func (f *Fence) StartSweep(ctx context.Context, ns graveler.StorageNamespace, run string) (*Sweep, error) {
	cur, pred, err := f.read(ctx, ns)
	if err != nil && !errors.Is(err, ErrCorruptRecord) {
		return nil, err
	}
	if err == nil && f.running(cur) && cur.Run != run {
		return nil, fmt.Errorf("%w (%s, run %s, until %s)", ErrSweepBusy, ns, cur.Run, cur.Until.Format(time.RFC3339))
	}
	now := f.cfg.Now()
	s := &Sweep{f: f, ns: ns, rec: Record{Run: run, State: StateRunning, Started: now, Until: now.Add(f.cfg.TTL)}}
	if err := s.write(ctx, pred); err != nil {
		if errors.Is(err, ErrSweepLost) {
			// Another collector started between the read and the write.
			return nil, fmt.Errorf("%w (%s): it started as this one did", ErrSweepBusy, ns)
		}
		return nil, err
	}
	return s, nil
}

func (s *Sweep) write(ctx context.Context, pred kv.Predicate) error {
	v, err := json.Marshal(s.rec)
	if err != nil {
		return err
	}
	err = s.f.store.SetIf(ctx, keys.Graveler(), key(s.ns), v, pred)
	if errors.Is(err, kv.ErrPredicateFailed) {
		s.lost = true
		return fmt.Errorf("%w: %s: the record changed", ErrSweepLost, s.ns)
	}
	if err != nil {
		// The outcome may be unknown: the record may hold this value or
		// the previous one. Either way this sweep stops deleting.
		s.lost = true
		return fmt.Errorf("gcfence: write sweep record of %s: %w", s.ns, err)
	}
	_, s.pred, err = s.f.store.Get(ctx, keys.Graveler(), key(s.ns))
	if err != nil {
		s.lost = true
		return fmt.Errorf("gcfence: read back sweep record of %s: %w", s.ns, err)
	}
	return nil
}

// Permit is called before each delete: nil means the delete may be issued
// now. It extends the deadline when half of it is spent, and refuses
// (ErrSweepLost) once the deadline is within the safety margin, which
// happens only when the collector stalled or etcd could not be written.
func (s *Sweep) Permit(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost {
		return fmt.Errorf("%w: %s", ErrSweepLost, s.ns)
	}
	// Checked before extending too: a collector that stalled past its
	// deadline may have been given up on by writers, and extending would
	// not undo that.
	if err := s.inTime(); err != nil {
		return err
	}
	if now := s.f.cfg.Now(); s.rec.Until.Sub(now) < s.f.cfg.TTL/2 {
		prev := s.rec.Until
		s.rec.Until = now.Add(s.f.cfg.TTL)
		if err := s.write(ctx, s.pred); err != nil {
			s.rec.Until = prev
			return err
		}
		return s.inTime()
	}
	return nil
}

func (s *Sweep) inTime() error {
	if s.rec.Until.Sub(s.f.cfg.Now()) < s.f.cfg.SafetyMargin {
		s.lost = true
		return fmt.Errorf("%w: %s: deadline %s is too near", ErrSweepLost, s.ns, s.rec.Until.Format(time.RFC3339Nano))
	}
	return nil
}

// Finish marks the sweep done; writers waiting on it go on. Call it once
// no delete of the sweep is in flight. It works after the sweep was lost
// too (a failed extension, a caller that gave up): as long as the record
// still names this run, marking it done releases the writers at once
// instead of at its deadline.
func (s *Sweep) Finish(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, pred, err := s.f.read(ctx, s.ns)
	if err != nil {
		return err
	}
	if cur == nil || cur.Run != s.rec.Run || cur.State != StateRunning {
		return nil // another collector's record now, or done already
	}
	s.lost = true // no delete after Finish
	s.rec.State = StateDone
	s.rec.Until = s.f.cfg.Now()
	return s.write(ctx, pred)
}
