package ref_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"graveler/graveler"
	"graveler/graveler/gravelertest"
	"graveler/graveler/ref"
	"graveler/kv"
)

// newStoreFunc makes a fresh, empty store closed at the end of the test.
type newStoreFunc func(t *testing.T) kv.Store

func memoryStore(t *testing.T) kv.Store {
	s := kv.NewMemoryStore()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// ids hands out predictable unique ids and remembers them, so a test can
// find every repository partition a run could have written.
type ids struct {
	mu   sync.Mutex
	n    int
	seen []string
}

func (g *ids) New() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n++
	id := fmt.Sprintf("id%06d", g.n)
	g.seen = append(g.seen, id)
	return id
}

func (g *ids) All() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.seen...)
}

type env struct {
	t     *testing.T
	ctx   context.Context
	store kv.Store
	clock *gravelertest.Clock
	ids   *ids
	cfg   ref.Config
	m     *ref.Manager
}

func newEnv(t *testing.T, store kv.Store, tweak func(*ref.Config)) *env {
	e := &env{t: t, ctx: t.Context(), store: store, clock: gravelertest.NewClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), ids: &ids{}}
	e.cfg = ref.Config{Now: e.clock.Now, NewID: e.ids.New, RepositoryCreationTimeout: time.Minute}
	if tweak != nil {
		tweak(&e.cfg)
	}
	e.m = ref.New(store, e.cfg)
	return e
}

// managerOn returns a manager sharing e's clock and ids but using store.
func (e *env) managerOn(store kv.Store) *ref.Manager { return ref.New(store, e.cfg) }

var namespaces atomic.Int64

// repoParams returns the parameters of a new repository, on a storage
// namespace no other call returns (a namespace is held by one repository).
func repoParams() graveler.Repository {
	return graveler.Repository{StorageNamespace: graveler.StorageNamespace(fmt.Sprintf("mem://bucket/ns-%d", namespaces.Add(1))), DefaultBranchID: "main"}
}

func initialCommit() graveler.Commit {
	return graveler.Commit{Committer: "tester", Message: "Repository created"}
}

func (e *env) createRepo(id graveler.RepositoryID) *graveler.RepositoryRecord {
	e.t.Helper()
	r, err := e.m.CreateRepository(e.ctx, id, repoParams(), initialCommit())
	if err != nil {
		e.t.Fatalf("CreateRepository(%s): %v", id, err)
	}
	return r
}

// commit adds a commit with the given parents and returns its id.
func (e *env) commit(repo *graveler.RepositoryRecord, msg string, parents ...graveler.CommitID) graveler.CommitID {
	e.t.Helper()
	id, err := e.m.AddCommit(e.ctx, repo, graveler.Commit{Committer: "tester", Message: msg, MetaRangeID: graveler.MetaRangeID("mr-" + msg), Parents: parents, CreationDate: e.clock.Now()})
	if err != nil {
		e.t.Fatalf("AddCommit(%s): %v", msg, err)
	}
	e.clock.Advance(time.Second)
	return id
}

func collect[T any](t *testing.T, seq iter.Seq2[T, error]) []T {
	t.Helper()
	var out []T
	for v, err := range seq {
		if err != nil {
			t.Fatalf("iteration: %v", err)
		}
		out = append(out, v)
	}
	return out
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want %v", err, target)
	}
}

// faultMode is how faultStore breaks the operation it targets.
type faultMode int

const (
	// faultError fails operation N without applying it; later ones work.
	faultError faultMode = iota
	// faultAmbiguous applies operation N, then reports an error (a timeout
	// after the write landed); later ones work.
	faultAmbiguous
	// faultCrash fails operation N and every later one: the process died,
	// so no cleanup code reaches the store.
	faultCrash
)

func (m faultMode) String() string { return [...]string{"error", "ambiguous", "crash"}[m] }

var errInjected = fmt.Errorf("injected fault: %w", kv.ErrUnavailable)

// faultStore counts kv operations (Get, Set, SetIf, Delete, Scan) and
// breaks operation failAt (1-based; 0 never).
type faultStore struct {
	kv.Store
	mode   faultMode
	failAt int64
	ops    atomic.Int64
}

func (f *faultStore) arm(mode faultMode, failAt int64) {
	f.mode, f.failAt = mode, failAt
	f.ops.Store(0)
}

// before returns the error for an operation that must not be applied, and
// whether to report an error after applying it.
func (f *faultStore) before() (error, bool) {
	n := f.ops.Add(1)
	if f.failAt == 0 {
		return nil, false
	}
	switch {
	case f.mode == faultCrash && n >= f.failAt, f.mode == faultError && n == f.failAt:
		return errInjected, false
	case f.mode == faultAmbiguous && n == f.failAt:
		return nil, true
	}
	return nil, false
}

func (f *faultStore) Get(ctx context.Context, p, k []byte) ([]byte, kv.Predicate, error) {
	err, after := f.before()
	if err != nil {
		return nil, kv.Absent, err
	}
	v, pred, err := f.Store.Get(ctx, p, k)
	if after {
		return nil, kv.Absent, errInjected
	}
	return v, pred, err
}

func (f *faultStore) Set(ctx context.Context, p, k, v []byte) error {
	err, after := f.before()
	if err != nil {
		return err
	}
	if err := f.Store.Set(ctx, p, k, v); err != nil || !after {
		return err
	}
	return fmt.Errorf("%w (applied)", kv.ErrAmbiguous)
}

func (f *faultStore) SetIf(ctx context.Context, p, k, v []byte, pred kv.Predicate) error {
	err, after := f.before()
	if err != nil {
		return err
	}
	if err := f.Store.SetIf(ctx, p, k, v, pred); err != nil || !after {
		return err
	}
	return fmt.Errorf("%w (applied)", kv.ErrAmbiguous)
}

func (f *faultStore) Delete(ctx context.Context, p, k []byte) error {
	err, after := f.before()
	if err != nil {
		return err
	}
	if err := f.Store.Delete(ctx, p, k); err != nil || !after {
		return err
	}
	return fmt.Errorf("%w (applied)", kv.ErrAmbiguous)
}

func (f *faultStore) DeleteIf(ctx context.Context, p, k []byte, pred kv.Predicate) error {
	err, after := f.before()
	if err != nil {
		return err
	}
	if err := f.Store.DeleteIf(ctx, p, k, pred); err != nil || !after {
		return err
	}
	return fmt.Errorf("%w (applied)", kv.ErrAmbiguous)
}

// The conditional writes are one operation each, as on etcd: without
// them kv.SetIfWith and kv.DeleteIfWith fall back to several plain
// operations, which is not the path production stores take.
var _ kv.CondWriter = (*faultStore)(nil)

func (f *faultStore) SetIfWith(ctx context.Context, p, k, v []byte, pred kv.Predicate, absent []kv.KeyRef, also []kv.Write) error {
	err, after := f.before()
	if err != nil {
		return err
	}
	if err := kv.SetIfWith(ctx, f.Store, p, k, v, pred, absent, also); err != nil || !after {
		return err
	}
	return fmt.Errorf("%w (applied)", kv.ErrAmbiguous)
}

func (f *faultStore) DeleteIfWith(ctx context.Context, p, k []byte, pred kv.Predicate, also []kv.Write) error {
	err, after := f.before()
	if err != nil {
		return err
	}
	if err := kv.DeleteIfWith(ctx, f.Store, p, k, pred, also); err != nil || !after {
		return err
	}
	return fmt.Errorf("%w (applied)", kv.ErrAmbiguous)
}

func (f *faultStore) SetAndReadUnless(ctx context.Context, absent []kv.KeyRef, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, bool, error) {
	err, after := f.before()
	if err != nil {
		return nil, false, err
	}
	out, ok, err := kv.SetAndReadUnless(ctx, f.Store, absent, writes, reads)
	if err != nil || !after {
		return out, ok, err
	}
	return nil, false, fmt.Errorf("%w (applied)", kv.ErrAmbiguous)
}

func (f *faultStore) Scan(ctx context.Context, p []byte, opts kv.ScanOptions) iter.Seq2[kv.Entry, error] {
	err, _ := f.before()
	if err != nil {
		return func(yield func(kv.Entry, error) bool) { yield(kv.Entry{}, err) }
	}
	return f.Store.Scan(ctx, p, opts)
}

// countingStore counts Gets, and can hold the first Get after hold() was
// called, after it has read its value, until release.
type countingStore struct {
	kv.Store
	gets    atomic.Int64
	mu      sync.Mutex
	holding chan struct{} // closed when the held Get has read
	release chan struct{}
}

func (c *countingStore) hold() (readDone <-chan struct{}, release func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holding, c.release = make(chan struct{}), make(chan struct{})
	rel := c.release
	return c.holding, func() { close(rel) }
}

func (c *countingStore) Get(ctx context.Context, p, k []byte) ([]byte, kv.Predicate, error) {
	c.gets.Add(1)
	v, pred, err := c.Store.Get(ctx, p, k)
	c.mu.Lock()
	holding, release := c.holding, c.release
	c.holding = nil
	c.mu.Unlock()
	if holding != nil {
		close(holding)
		<-release
	}
	return v, pred, err
}

// counter reads a counter from the default Prometheus registry.
func counter(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}
