package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"go.uber.org/zap"

	"graveler/graveler"
	"graveler/server/daemon"
)

// commitPacingCost is long-commit's second half, with --embedded only: the
// cost of the default (adaptive) commit pacing when nobody writes. It
// starts two more in-process gravelerds on the same etcd, alike but for
// the pacing (default, off), so that neither has caches or connections the
// other lacks, and commits --stage entries through each in turn, in the
// order paced, unpaced, unpaced, paced, ... so that a change of load
// during the run favours neither side; then it prints the median of the
// paced/unpaced commit time ratios.
func (b *bench) commitPacingCost(ctx context.Context, rounds int) error {
	if !b.embedded {
		fmt.Fprintln(b.out, "\nlong-commit: the unpaced commit time is measured with --embedded only")
		return nil
	}
	var sides [2]*grav // paced (the default), unpaced
	for i, off := range []bool{false, true} {
		addr, stop, err := startPacingGravelerd(ctx, b.endpoints, off)
		if err != nil {
			return err
		}
		defer stop()
		g, err := dialGraveler(ctx, addr, 1)
		if err != nil {
			return err
		}
		defer g.Close()
		sides[i] = g
	}
	// A repository of its own: every commit is of --stage new entries.
	repo := b.repo("pacing")
	if err := b.g.createRepository(ctx, repo); err != nil {
		return fmt.Errorf("create repository %s: %w", repo, err)
	}
	var ratios []float64
	for r := range rounds {
		var took [2]time.Duration
		for _, i := range [][]int{{0, 1}, {1, 0}}[r%2] {
			g := sides[i]
			br := fmt.Sprintf("idle-%d-%d", r, i)
			if err := b.g.createBranch(ctx, repo, br); err != nil {
				return fmt.Errorf("create branch %s: %w", br, err)
			}
			if err := b.g.stage(ctx, b.w, repo, br, b.stage, 4); err != nil {
				return fmt.Errorf("stage %s: %w", br, err)
			}
			t := time.Now()
			if err := g.commit(ctx, 0, repo, br); err != nil {
				return fmt.Errorf("commit %s: %w", br, err)
			}
			took[i] = time.Since(t)
		}
		ratios = append(ratios, took[0].Seconds()/took[1].Seconds())
		fmt.Fprintf(b.out, "COMMIT nobody writing, round %d: entries=%d paced (default)=%s unpaced=%s ratio=%.2fx\n",
			r+1, b.stage, took[0].Round(time.Millisecond), took[1].Round(time.Millisecond), ratios[r])
	}
	slices.Sort(ratios)
	fmt.Fprintf(b.out, "RATIO long-commit nobody writing: commit time paced (default)/unpaced median=%.2fx of %d rounds %v\n",
		ratios[len(ratios)/2], len(ratios), fmtRatios(ratios))
	return nil
}

func fmtRatios(rs []float64) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("%.2f", r)
	}
	return out
}

// startPacingGravelerd starts an in-process gravelerd on the etcd at
// endpoints, with the default commit pacing or, off, none at all (as
// before adaptive pacing).
func startPacingGravelerd(ctx context.Context, endpoints []string, off bool) (string, func(), error) {
	dir, err := os.MkdirTemp("", "gravelerbench-pacing-")
	if err != nil {
		return "", nil, err
	}
	ready := make(chan string, 1)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	cfg := daemon.Config{
		ListenAddr:   "127.0.0.1:0",
		DataDir:      dir,
		Etcd:         daemon.EtcdConfig{Endpoints: endpoints},
		CommitPacing: graveler.CommitPacing{Off: off},
		Logger:       zap.NewNop(),
		Ready:        func(addr string) { ready <- addr },
	}
	go func() { done <- daemon.Run(rctx, cfg) }()
	stop := func() {
		cancel()
		<-done
		os.RemoveAll(dir)
	}
	select {
	case addr := <-ready:
		return addr, stop, nil
	case err := <-done:
		cancel()
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("gravelerbench: in-process gravelerd (commit pacing off: %v): %w", off, err)
	}
}
