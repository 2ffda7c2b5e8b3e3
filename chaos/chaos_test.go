//go:build chaos

package chaos

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	pb "graveler/api/graveler/v1"
	"graveler/etcdkv"
	"graveler/server/daemon"
)

var (
	duration = flag.Duration("chaos.duration", 2*time.Minute, "how long clients run while faults are injected")
	writers  = flag.Int("chaos.writers", 6, "clients staging and committing")
	seed     = flag.Uint64("chaos.seed", 0, "fault schedule seed (0: time-based; printed)")
	faultGap = flag.Duration("chaos.fault-interval", 4*time.Second, "pause between faults")
	cleaners = flag.Int("chaos.cleaners", 2, "cleaner replicas (daemon mode, leader election, sweep without grace) running during the load and the checks (0: none)")
	cleanGap = flag.Duration("chaos.cleaner-interval", 2*time.Second, "pause between the leading cleaner's passes")
)

// faults injects one fault at a time, keeping an etcd quorum: freeze the
// leader or a follower with SIGSTOP for a while and resume it, kill -9
// the leader or a follower and restart it on its data, or restart a
// gravelerd.
type faults struct {
	leaderPauses, followerPauses, leaderKills, followerKills, gravelerds atomic.Int64
}

func (f *faults) total() int64 {
	return f.leaderPauses.Load() + f.followerPauses.Load() + f.leaderKills.Load() + f.followerKills.Load() + f.gravelerds.Load()
}

func (f *faults) String() string {
	return fmt.Sprintf("%d leader pauses, %d follower pauses, %d leader kills, %d follower kills, %d gravelerd restarts",
		f.leaderPauses.Load(), f.followerPauses.Load(), f.leaderKills.Load(), f.followerKills.Load(), f.gravelerds.Load())
}

// memberFault applies one etcd fault to the leader or a follower, holds
// it for down, and undoes it, waiting until the member serves again.
// It reports false (after logging why) when no suitable member was found
// and nothing was done.
func memberFault(t *testing.T, c *cluster, rng *rand.Rand, leader, kill bool, down time.Duration, f *faults, note string) bool {
	var m *member
	if leader {
		m = c.leader()
	} else {
		m = c.follower(rng.IntN)
	}
	if m == nil {
		t.Logf("fault skipped: no leader found %s", note)
		return false
	}
	role := map[bool]string{true: "leader", false: "follower"}[leader]
	if kill {
		t.Logf("fault: kill -9 etcd %s %s, restart after %s %s", role, m.name, down, note)
		c.kill(m)
		time.Sleep(down)
		if err := c.restart(m); err != nil {
			t.Errorf("restart %s: %v", m.name, err)
			return false
		}
		if leader {
			f.leaderKills.Add(1)
		} else {
			f.followerKills.Add(1)
		}
		return true
	}
	t.Logf("fault: SIGSTOP etcd %s %s for %s %s", role, m.name, down, note)
	if err := c.pause(m); err != nil {
		t.Errorf("pause %s: %v", m.name, err)
		return false
	}
	time.Sleep(down)
	if err := c.resume(m); err != nil {
		t.Errorf("resume %s: %v", m.name, err)
		return false
	}
	if leader {
		f.leaderPauses.Add(1)
	} else {
		f.followerPauses.Add(1)
	}
	return true
}

// Each fault's log line carries the calls made and failed since the
// previous one, so failures can be told apart by the fault that caused them.
func injectFaults(ctx context.Context, t *testing.T, rng *rand.Rand, c *cluster, gs []*gravelerd, f *faults, l *ledger) {
	var ops, failed int64
	began := time.Now()
	since := func() string {
		o, fl := l.ops.Load(), l.failed.Load()
		s := fmt.Sprintf("at %.1fs (calls since the previous fault: %d, failed %d)", time.Since(began).Seconds(), o-ops, fl-failed)
		ops, failed = o, fl
		return s
	}
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(*faultGap):
		}
		down := time.Duration(500+rng.IntN(2500)) * time.Millisecond
		faultStart := time.Now()
		switch n % 5 {
		case 0:
			memberFault(t, c, rng, true, false, down, f, since())
		case 1:
			memberFault(t, c, rng, false, false, down, f, since())
		case 2:
			memberFault(t, c, rng, true, true, down, f, since())
		case 3:
			memberFault(t, c, rng, false, true, down, f, since())
		case 4:
			g := gs[rng.IntN(len(gs))]
			t.Logf("fault: restart gravelerd %s %s", g.addr, since())
			if err := g.stop(); err != nil {
				t.Logf("gravelerd %s stopped with %v", g.addr, err)
			}
			time.Sleep(down / 4)
			if err := g.start(); err != nil {
				t.Errorf("gravelerd restart: %v", err)
				return
			}
			f.gravelerds.Add(1)
		}
		if t.Failed() {
			return
		}
		t.Logf("fault %d: everything back after %.1fs", n, time.Since(faultStart).Seconds())
	}
}

func TestChaos(t *testing.T) {
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("chaos: duration %s, %d writers, seed %d", *duration, *writers, s)
	rng := rand.New(rand.NewPCG(s, 0))
	log := zap.NewNop()

	c := startCluster(t, 3)
	gs, clients := startGravelerds(t, c, log)

	l := newLedger()
	setup, cancelSetup := context.WithTimeout(context.Background(), time.Minute)
	defer cancelSetup()
	repos := []string{"chaos-a", "chaos-b"}
	for _, r := range repos {
		if err := until(setup, func(ctx context.Context) error {
			_, err := call(ctx, func(ctx context.Context) (*pb.CreateRepositoryResponse, error) {
				return clients[0].CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: r, Repository: &pb.Repository{DefaultBranch: "main"}})
			})
			return err
		}); err != nil {
			t.Fatalf("create %s: %v", r, err)
		}
		l.repo(r).created = true
	}

	// Writers alternate gravelerd instances; even ones share main, odd ones
	// own a branch, so commits race on one branch and run apart on others.
	work := []func(ctx context.Context){}
	for i := range *writers {
		w := &worker{id: i, c: clients[i%len(clients)], l: l, rng: rand.New(rand.NewPCG(s, uint64(i)+1))}
		b := branchRef{repos[i%len(repos)], "main"}
		if i%2 == 1 {
			b.branch = fmt.Sprintf("w%02d", i)
			if err := until(setup, func(ctx context.Context) error { return w.createBranch(ctx, b) }, codes.AlreadyExists); err != nil {
				t.Fatalf("create branch %v: %v", b, err)
			}
			l.branch(b).created = true
		}
		work = append(work, func(ctx context.Context) { w.writer(ctx, b) })
	}
	churn := &worker{id: 90, c: clients[1%len(clients)], l: l, rng: rand.New(rand.NewPCG(s, 90))}
	work = append(work, func(ctx context.Context) { churn.branchChurn(ctx, repos[0]) })
	repoChurn := &worker{id: 91, c: clients[0], l: l, rng: rand.New(rand.NewPCG(s, 91))}
	work = append(work, repoChurn.repoChurn)

	// A consumer of the change feed follows it from here to the end of the
	// checks.
	fw := startFeedWatcher(t, clients, rand.New(rand.NewPCG(s, 92)))

	var daemons *cleanerDaemons
	if *cleaners > 0 {
		daemons = startCleanerDaemons(t, c.endpoints(), daemon.DefaultEtcdPrefix, *cleaners, *cleanGap)
		defer daemons.stop(t)
	}

	runCtx, stopRun := context.WithTimeout(context.Background(), *duration)
	defer stopRun()
	var wg sync.WaitGroup
	for _, f := range work {
		wg.Go(func() { f(runCtx) })
	}
	var fs faults
	wg.Go(func() { injectFaults(runCtx, t, rng, c, gs, &fs, l) })
	wg.Wait()
	stopRun()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("load done: %d operations, %d acknowledged, %d failed; faults: %s",
		l.ops.Load(), l.acked.Load(), l.failed.Load(), &fs)
	t.Logf("failed calls by operation and code: %s", l.failureSummary())

	// Check, with every member and both gravelerds up.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	k := &checker{t: t, c: clients[1%len(clients)], l: l}
	l.mu.Lock()
	var live []branchRef
	for b := range l.entries {
		if rs := l.repos[b.repo]; rs != nil && rs.deleteAttempted {
			continue
		}
		if bs := l.branches[b]; bs != nil && bs.deleteAttempted {
			continue
		}
		live = append(live, b)
	}
	l.mu.Unlock()
	for _, b := range live {
		k.checkEntries(ctx, b, b.branch)
		k.checkHistory(ctx, b)
	}
	// After a final commit, every acknowledged write must be committed data.
	for _, b := range live {
		if err := k.finalCommit(ctx, b); err != nil {
			t.Errorf("final commit %v: %v", b, err)
			continue
		}
		k.checkEntries(ctx, b, b.branch+"@")
	}
	k.checkDeleted(ctx)
	checkFeed(ctx, t, fw, c.admin, clients[0], l)
	var during cleanerMetrics
	if daemons != nil {
		during = daemons.stop(t)
		t.Logf("cleaner daemons during the load and the checks: %.0f passes (%.0f with failed steps), %.0f partitions and %.0f keys reclaimed",
			during.passes, during.failedPasses, during.partitions, during.keys)
	}

	// Reclaim what deleted repositories and branches left, then nothing
	// unreferenced may remain.
	if err := runCleaner(ctx, t, c.endpoints(), daemon.DefaultEtcdPrefix); err != nil {
		t.Fatalf("cleaner: %v", err)
	}
	raw, err := etcdkv.New(ctx, etcdkv.Config{Endpoints: c.endpoints(), Prefix: daemon.DefaultEtcdPrefix, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	repoParts, stagingParts, err := orphans(ctx, raw)
	if err != nil {
		t.Fatalf("orphan scan: %v", err)
	}
	if len(repoParts) > 0 || len(stagingParts) > 0 {
		t.Errorf("ORPHANS after the cleaner: %d repository partitions %v, %d staging partitions %v",
			len(repoParts), head(repoParts), len(stagingParts), head(stagingParts))
	}
	// What the checker did not look at: every commit a ref reaches, its
	// objects read and verified, and the members' hashes compared.
	checkFsck(ctx, t, raw, len(c.members))

	fmt.Printf("CHAOS duration=%s seed=%d operations=%d acknowledged=%d failed=%d verified=%d faults=%d (%s) cleaner-passes-during-load=%.0f keys-reclaimed-during-load=%.0f orphans=%d\n",
		*duration, s, l.ops.Load(), l.acked.Load(), l.failed.Load(), l.verified.Load(),
		fs.total(), &fs, during.passes, during.keys, len(repoParts)+len(stagingParts))
	if l.acked.Load() == 0 || l.verified.Load() == 0 {
		t.Errorf("nothing acknowledged or verified: the run proved nothing")
	}
}

func head(s []string) []string {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}
