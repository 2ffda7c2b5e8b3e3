package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// bench holds one run's targets and settings. g is nil in baseline-only
// mode; raw is nil without --etcd.
type bench struct {
	out        io.Writer
	g          *grav
	raw        *rawEtcd
	w          workload
	writers    []int
	readers    int
	readerList []int // reader counts of the reads scenario
	committers int
	duration   time.Duration
	preload    int
	stage      int
	sizes      []int
	runID      string
	// pairs, warmup and etcdConns shape compare (load.go).
	pairs     int
	warmup    time.Duration
	etcdConns int
	// etcdPIDs and serverPIDs are separate etcd and gravelerd processes
	// whose CPU compare reports per call (--etcd-pid, --server-pid).
	etcdPIDs, serverPIDs []int
	// embedded: gravelerd and etcd (at endpoints) run in this process.
	embedded  bool
	endpoints []string
	// failed lists the tables with an operation whose every call failed
	// (report); run then fails.
	failedMu sync.Mutex
	failed   []string
}

// report prints a table of stats and notes each operation of it that
// never succeeded: its figures time only the error path (a key over the
// server's limit answers INVALID_ARGUMENT in microseconds), so the run
// must not end as if it had measured something.
func (b *bench) report(title string, stats []OpStats) {
	printStats(b.out, title, stats)
	b.failedMu.Lock()
	defer b.failedMu.Unlock()
	for _, f := range allFailed(stats) {
		b.failed = append(b.failed, title+": "+f)
	}
}

// allCallsFailed is the error of a run with a table whose operation never
// succeeded, or nil.
func (b *bench) allCallsFailed() error {
	b.failedMu.Lock()
	defer b.failedMu.Unlock()
	if len(b.failed) == 0 {
		return nil
	}
	return fmt.Errorf("not measured: %s", strings.Join(b.failed, "; "))
}

func (b *bench) repo(name string) string { return fmt.Sprintf("bench-%s-%s", b.runID, name) }

// ratio prints graveler's throughput over raw etcd's from one phase of
// each. Comparisons quoted as figures go through compare (load.go), which
// alternates several phases of each side and quotes the median.
func (b *bench) ratio(what string, clients int, g, raw []OpStats, gop, rop string) {
	gs, ok1 := find(g, gop)
	rs, ok2 := find(raw, rop)
	if !ok1 || !ok2 || rs.Throughput() == 0 {
		return
	}
	fmt.Fprintf(b.out, "RATIO %s clients=%d graveler/etcd throughput=%.3f (%.0f vs %.0f ops/s) p50=%.2fx p99=%.2fx\n",
		what, clients, gs.Throughput()/rs.Throughput(), gs.Throughput(), rs.Throughput(),
		float64(gs.P50)/float64(max(rs.P50, 1)), float64(gs.P99)/float64(max(rs.P99, 1)))
}

func (b *bench) rawPuts(ctx context.Context, n int) []OpStats {
	data := b.w.data()
	recs, el := runWorkers(ctx, n, b.duration, func(ctx context.Context, rec *recorder, w, seq int) error {
		k := b.w.key("p", w, seq)
		v := append(identity(w, seq), data...)
		return timed(ctx, rec, "etcd.put", func() error { return b.raw.put(ctx, w, k, v) })
	})
	return summarize(el, recs...)
}

// rawPutSide is raw etcd puts by n clients, new keys in every phase.
func (b *bench) rawPutSide(what string, n int) *side {
	if b.raw == nil {
		return nil
	}
	data := b.w.data()
	return &side{title: fmt.Sprintf("%s: raw etcd, %d writers", what, n), op: "etcd.put",
		run: func(ctx context.Context, phase int, d time.Duration) ([]*recorder, time.Duration) {
			return runWorkers(ctx, n, d, func(ctx context.Context, rec *recorder, w, seq int) error {
				k := b.w.key(fmt.Sprintf("p%d-", phase+1), w, seq)
				v := append(identity(w, seq), data...)
				return timed(ctx, rec, "etcd.put", func() error { return b.raw.put(ctx, w, k, v) })
			})
		}}
}

func (b *bench) stagedWrites(ctx context.Context) error {
	for i, n := range b.writers {
		var gs *side
		if b.g != nil {
			repo := b.repo(fmt.Sprintf("writes%d", i))
			if err := b.g.createRepository(ctx, repo); err != nil {
				return fmt.Errorf("create repository %s: %w", repo, err)
			}
			data := b.w.data()
			gs = &side{title: fmt.Sprintf("staged-writes: graveler, %d writers", n), op: "graveler.put",
				run: func(ctx context.Context, phase int, d time.Duration) ([]*recorder, time.Duration) {
					return runWorkers(ctx, n, d, func(ctx context.Context, rec *recorder, w, seq int) error {
						k := b.w.key(fmt.Sprintf("p%d-", phase+1), w, seq)
						return timed(ctx, rec, "graveler.put", func() error { return b.g.put(ctx, w, repo, "main", k, identity(w, seq), data) })
					})
				}}
		}
		b.compare(ctx, "staged-writes", n, gs, b.rawPutSide("staged-writes", n))
	}
	return nil
}

// reads: readers Get random committed keys of one branch, against the same
// number of raw etcd linearizable gets of the same keys and values, once
// per --readers count. Concurrent Gets of a branch share etcd
// transactions (graveler's grouped reads), so the ratio grows with the
// readers.
func (b *bench) reads(ctx context.Context) error {
	counts := b.readerList
	if len(counts) == 0 {
		counts = []int{b.readers}
	}
	repo := b.repo("reads")
	if b.g != nil {
		if err := b.g.createRepository(ctx, repo); err != nil {
			return fmt.Errorf("create repository %s: %w", repo, err)
		}
		if err := b.g.stage(ctx, b.w, repo, "main", b.preload, 4); err != nil {
			return fmt.Errorf("preload: %w", err)
		}
		if err := b.g.commit(ctx, 0, repo, "main"); err != nil {
			return fmt.Errorf("commit preload: %w", err)
		}
	}
	if b.raw != nil {
		data := b.w.data()
		per := (b.preload + 15) / 16
		runWorkers(ctx, 16, time.Hour, func(ctx context.Context, rec *recorder, w, seq int) error {
			i := w*per + seq
			if seq >= per || i >= b.preload {
				return io.EOF
			}
			// The same value graveler stores: identity, then data.
			return b.raw.put(ctx, w, b.w.key("s", 0, i), append(identity(-1, i), data...))
		})
	}
	for _, n := range counts {
		var gs, rs *side
		if b.g != nil {
			gs = &side{title: fmt.Sprintf("reads (committed, %d entries): graveler, %d readers", b.preload, n), op: "graveler.get",
				run: func(ctx context.Context, _ int, d time.Duration) ([]*recorder, time.Duration) {
					return runWorkers(ctx, n, d, func(ctx context.Context, rec *recorder, w, seq int) error {
						k := randomKey(b.w, w, b.preload)
						return timed(ctx, rec, "graveler.get", func() error { return b.g.get(ctx, w, repo, "main", k) })
					})
				}}
		}
		if b.raw != nil {
			rs = &side{title: fmt.Sprintf("reads: raw etcd, %d readers", n), op: "etcd.get",
				run: func(ctx context.Context, _ int, d time.Duration) ([]*recorder, time.Duration) {
					return runWorkers(ctx, n, d, func(ctx context.Context, rec *recorder, w, seq int) error {
						k := randomKey(b.w, w, b.preload)
						return timed(ctx, rec, "etcd.get", func() error { return b.raw.get(ctx, w, k) })
					})
				}}
		}
		b.compare(ctx, "reads", n, gs, rs)
	}
	return nil
}

// mixed runs writers (new keys) and readers (staged keys) on repo's main
// until ctx ends or d passes.
func (b *bench) mixed(ctx context.Context, repo string, d time.Duration, tag int) ([]*recorder, time.Duration) {
	data := b.w.data()
	nw := b.writers[0]
	return runWorkers(ctx, nw+b.readers, d, func(ctx context.Context, rec *recorder, w, seq int) error {
		if w < nw {
			k := b.w.key(fmt.Sprintf("m%d-", tag), w, seq)
			return timed(ctx, rec, "graveler.put", func() error { return b.g.put(ctx, w, repo, "main", k, identity(w, seq), data) })
		}
		k := randomKey(b.w, w, b.stage)
		return timed(ctx, rec, "graveler.get", func() error { return b.g.get(ctx, w, repo, "main", k) })
	})
}

// longCommit: stage many entries, then compare write and read latency
// with no commit running against latency while one commit of them runs.
func (b *bench) longCommit(ctx context.Context) error {
	if b.g == nil {
		return fmt.Errorf("long-commit needs gravelerd")
	}
	repo := b.repo("longcommit")
	if err := b.g.createRepository(ctx, repo); err != nil {
		return fmt.Errorf("create repository %s: %w", repo, err)
	}
	start := time.Now()
	if err := b.g.stage(ctx, b.w, repo, "main", b.stage, 4); err != nil {
		return fmt.Errorf("stage: %w", err)
	}
	fmt.Fprintf(b.out, "\nlong-commit: staged %d entries in %s\n", b.stage, time.Since(start).Round(time.Millisecond))

	recs, el := b.mixed(ctx, repo, b.duration, 0)
	base := summarize(el, recs...)
	b.report(fmt.Sprintf("long-commit: no commit running, %d writers + %d readers", b.writers[0], b.readers), base)

	cctx, stop := context.WithCancel(ctx)
	var commitTime time.Duration
	var commitErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer stop()
		t := time.Now()
		commitErr = b.g.commit(ctx, 0, repo, "main")
		commitTime = time.Since(t)
	}()
	// The load runs for as long as the commit does (up to an hour).
	recs, el = b.mixed(cctx, repo, time.Hour, 1)
	<-done
	if commitErr != nil {
		return fmt.Errorf("commit: %w", commitErr)
	}
	during := summarize(el, recs...)
	b.report(fmt.Sprintf("long-commit: during one commit of %d entries (commit took %s)", b.stage, commitTime.Round(time.Millisecond)), during)
	for _, op := range []string{"graveler.put", "graveler.get"} {
		x, ok1 := find(base, op)
		y, ok2 := find(during, op)
		if ok1 && ok2 {
			fmt.Fprintf(b.out, "RATIO long-commit %s during/without: p50=%.2fx p99=%.2fx throughput=%.3f samples=%d/%d\n", op,
				float64(y.P50)/float64(max(x.P50, 1)), float64(y.P99)/float64(max(x.P99, 1)), y.Throughput()/max(x.Throughput(), 1e-9), y.Count, x.Count)
		}
	}
	fmt.Fprintf(b.out, "COMMIT entries=%d time=%s\n", b.stage, commitTime.Round(time.Millisecond))
	return b.commitPacingCost(ctx, 2)
}

// smallCommits: committers each put one entry and commit, in a loop, on
// one shared branch or each on its own.
func (b *bench) smallCommits(ctx context.Context, manyBranches bool) error {
	if b.g == nil {
		return fmt.Errorf("small commits need gravelerd")
	}
	name := "commits1"
	if manyBranches {
		name = "commits-n"
	}
	repo := b.repo(name)
	if err := b.g.createRepository(ctx, repo); err != nil {
		return fmt.Errorf("create repository %s: %w", repo, err)
	}
	branch := func(w int) string {
		if manyBranches {
			return fmt.Sprintf("c%d", w)
		}
		return "main"
	}
	if manyBranches {
		for w := range b.committers {
			if err := b.g.createBranch(ctx, repo, branch(w)); err != nil {
				return fmt.Errorf("create branch: %w", err)
			}
		}
	}
	data := b.w.data()
	recs, el := runWorkers(ctx, b.committers, b.duration, func(ctx context.Context, rec *recorder, w, seq int) error {
		k := b.w.key("c", w, seq)
		if err := timed(ctx, rec, "graveler.put", func() error { return b.g.put(ctx, w, repo, branch(w), k, identity(w, seq), data) }); err != nil {
			return err
		}
		return timed(ctx, rec, "graveler.commit", func() error { return b.g.commit(ctx, w, repo, branch(w)) })
	})
	where := "one branch"
	if manyBranches {
		where = fmt.Sprintf("%d branches", b.committers)
	}
	b.report(fmt.Sprintf("small commits on %s: %d committers, %s", where, b.committers, b.duration), summarize(el, recs...))
	return nil
}

// commitSizes times one commit of each staged size, on its own branch.
func (b *bench) commitSizes(ctx context.Context) error {
	if b.g == nil {
		return fmt.Errorf("commit-sizes needs gravelerd")
	}
	repo := b.repo("sizes")
	if err := b.g.createRepository(ctx, repo); err != nil {
		return fmt.Errorf("create repository %s: %w", repo, err)
	}
	fmt.Fprintln(b.out)
	for _, n := range b.sizes {
		br := fmt.Sprintf("size-%d", n)
		if err := b.g.createBranch(ctx, repo, br); err != nil {
			return fmt.Errorf("create branch: %w", err)
		}
		t := time.Now()
		if err := b.g.stage(ctx, b.w, repo, br, n, 4); err != nil {
			return fmt.Errorf("stage %d: %w", n, err)
		}
		staged := time.Since(t)
		t = time.Now()
		if err := b.g.commit(ctx, 0, repo, br); err != nil {
			return fmt.Errorf("commit %d: %w", n, err)
		}
		fmt.Fprintf(b.out, "COMMIT entries=%d stage=%s commit=%s\n", n, staged.Round(time.Millisecond), time.Since(t).Round(time.Millisecond))
	}
	return nil
}
