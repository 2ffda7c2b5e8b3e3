package fsck

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"graveler/etcdkv"
	"graveler/graveler/committed"
)

// Checker checks one installation: the etcd store under one root prefix
// and the blob store its repositories' storage namespaces live in.
type Checker struct {
	store *etcdkv.Store
	cli   *clientv3.Client
	blobs committed.BlobStore
	cfg   Config
	// noStream is set once etcd answers RangeStream with Unimplemented.
	noStream atomic.Bool
}

// New returns a Checker. The stores stay the caller's to close.
func New(store *etcdkv.Store, blobs committed.BlobStore, cfg Config) *Checker {
	return &Checker{store: store, cli: store.Client(), blobs: blobs, cfg: cfg.withDefaults()}
}

// run is the state of one Run.
type run struct {
	c   *Checker
	ctx context.Context
	// mu guards rep from the blob checks' goroutines.
	mu  sync.Mutex
	rep *Report
	// snap: the references at the report's revision.
	snap *snapshot
}

// Run makes one pass and returns its report. The error, wrapping
// ErrIncomplete, says why some checks could not be made; the report then
// holds what was checked.
func (c *Checker) Run(ctx context.Context) (*Report, error) {
	r := &run{c: c, ctx: ctx, rep: &Report{
		Started: c.cfg.Now(),
		Full:    c.cfg.Full,
		Repair:  c.cfg.Repair,
		Stats:   Stats{Repositories: map[string]int{}},
	}}
	err := r.run()
	if err != nil {
		r.problem("%v", err)
	}
	r.rep.finish(c.cfg.Now())
	if err == nil && r.rep.Incomplete {
		err = fmt.Errorf("%w: %s", ErrIncomplete, r.rep.Problems[0])
	}
	return r.rep, err
}

func (r *run) run() error {
	if err := r.reach(); err != nil {
		return err
	}
	rev, err := r.currentRevision()
	if err != nil {
		return err
	}
	r.rep.Revision = rev
	if afterRevision != nil {
		afterRevision()
	}
	r.c.cfg.Logger.Info("fsck: checking", zap.Int64("revision", rev), zap.Bool("full", r.c.cfg.Full))
	// Listing costs a round trip per partition: it runs beside the other
	// checks (see the package doc for why it may come after rev).
	type listing struct {
		parts []string
		err   error
	}
	listed := make(chan listing, 1)
	lctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	go func() {
		parts, err := r.listStaging(lctx)
		listed <- listing{parts, err}
	}()
	err = r.checkAt(rev)
	if err != nil {
		cancel()
	}
	l := <-listed
	if err != nil {
		return err
	}
	if l.err != nil {
		return l.err
	}
	orphans, err := r.checkOrphans(l.parts, r.snap)
	if err != nil {
		return err
	}
	if r.c.cfg.Repair && len(orphans) > 0 {
		return r.repair(orphans)
	}
	return nil
}

// checkAt makes every check of the refs and the committed data at rev.
func (r *run) checkAt(rev int64) error {
	r.checkEtcd(rev)
	snap, err := r.collect(rev, true)
	if err != nil {
		return err
	}
	r.snap = snap
	r.checkRecords(snap)
	blobs := r.startBlobChecks()
	for _, repo := range snap.repos {
		if repo.rec == nil || !snap.live(repo) {
			continue
		}
		if err := r.checkRepository(snap, repo, blobs); err != nil {
			blobs.stop()
			return err
		}
	}
	blobs.wait()
	if err := r.ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrIncomplete, err)
	}
	return nil
}

// Hooks for tests (export_test.go), nil otherwise.
var afterRevision, beforeRepair func()

// find records a finding of kind k.
func (r *run) find(k Kind, repo, resource, format string, args ...any) {
	info := Kinds[k]
	f := Finding{Kind: k, Severity: info.Severity, Repository: repo, Resource: resource, Detail: fmt.Sprintf(format, args...), Action: info.Action}
	r.mu.Lock()
	r.rep.Findings = append(r.rep.Findings, f)
	r.mu.Unlock()
}

// problem records a check that could not be made.
func (r *run) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.rep.Problems = append(r.rep.Problems, msg)
	r.mu.Unlock()
}

// stats updates the report's counters under the lock.
func (r *run) stats(f func(*Stats)) {
	r.mu.Lock()
	f(&r.rep.Stats)
	r.mu.Unlock()
}
