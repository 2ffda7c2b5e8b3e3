package cleaner_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"graveler/cleaner"
	"graveler/graveler"
	"graveler/graveler/gravelertest"
	"graveler/graveler/ref"
	"graveler/keys"
	"graveler/kv"
)

// writer stages entries on one branch with the writer's fence (write, then
// re-read the branch and write again if its token changed) and commits
// like a committer: seal the token under a fresh one, copy the sealed
// entries into its committed model, trim them and queue them.
type writer struct {
	m         *ref.Manager
	store     kv.Store
	repo      *graveler.RepositoryRecord
	acked     []string
	committed map[string]bool
}

func (w *writer) put(ctx context.Context, key string) error {
	b, err := w.m.GetBranch(ctx, w.repo, "main")
	if err != nil {
		return err
	}
	for range 100 {
		if err := w.store.Set(ctx, keys.StagingPartition(string(b.StagingToken)), keys.Entry([]byte(key)), []byte("v")); err != nil {
			return err
		}
		again, err := w.m.GetBranch(ctx, w.repo, "main")
		if err != nil {
			return err
		}
		if again.StagingToken == b.StagingToken {
			w.acked = append(w.acked, key)
			return nil
		}
		b = again
	}
	return errors.New("branch token kept changing")
}

func (w *writer) commit(ctx context.Context) error {
	fresh := w.m.NewStagingToken(w.repo.RepositoryID)
	var sealed []graveler.StagingToken
	if err := w.m.BranchUpdate(ctx, w.repo, "main", func(cur *graveler.Branch) (*graveler.Branch, error) {
		sealed = append([]graveler.StagingToken{cur.StagingToken}, cur.SealedTokens...)
		return &graveler.Branch{CommitID: cur.CommitID, StagingToken: fresh, SealedTokens: sealed}, nil
	}); err != nil {
		return err
	}
	for _, tok := range sealed {
		for e, err := range w.store.Scan(ctx, keys.StagingPartition(string(tok)), kv.ScanOptions{}) {
			if err != nil {
				return err
			}
			if !strings.HasPrefix(string(e.Key), keys.EntryPrefix) {
				continue // the token's seal marker
			}
			k, err := keys.ParseEntry(e.Key)
			if err != nil {
				return err
			}
			w.committed[string(k)] = true
		}
	}
	if err := w.m.BranchUpdate(ctx, w.repo, "main", func(cur *graveler.Branch) (*graveler.Branch, error) {
		keep := slices.DeleteFunc(slices.Clone(cur.SealedTokens), func(t graveler.StagingToken) bool { return slices.Contains(sealed, t) })
		return &graveler.Branch{CommitID: cur.CommitID, StagingToken: cur.StagingToken, SealedTokens: keep}, nil
	}); err != nil {
		return err
	}
	return w.m.DeleteStagingTokens(ctx, sealed)
}

// visible is what the branch holds now: committed, staged or sealed.
func (w *writer) visible(t *testing.T, ctx context.Context) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for k := range w.committed {
		out[k] = true
	}
	b, err := w.m.GetBranch(ctx, w.repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range append([]graveler.StagingToken{b.StagingToken}, b.SealedTokens...) {
		for e, err := range w.store.Scan(ctx, keys.StagingPartition(string(tok)), kv.ScanOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			k, _ := keys.ParseEntry(e.Key)
			out[string(k)] = true
		}
	}
	return out
}

// TestRaceWithWriters runs two cleaners (sweep on, no grace: the most
// aggressive setting) in a loop while writers stage and commit, and one
// repository name is deleted and re-created over and over. No
// acknowledged write is lost, and at the end etcd holds only what live
// repositories reach.
func TestRaceWithWriters(t *testing.T) {
	store, cli, lister := newEtcd(t)
	ctx := t.Context()
	m := ref.New(store, ref.Config{})
	const writers, puts = 3, 60

	ws := make([]*writer, writers)
	for i := range ws {
		rec, err := m.CreateRepository(ctx, graveler.RepositoryID(fmt.Sprintf("busy-%d", i)), repoParams(), initialCommit())
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = &writer{m: m, store: store, repo: rec, committed: map[string]bool{}}
	}

	stop := make(chan struct{})
	var cleaners sync.WaitGroup
	passes := make([]int, 2)
	for i := range passes {
		cleaners.Go(func() {
			c := cleaner.New(store, cleaner.Config{Sweep: true, SweepGrace: -1, Lister: lister})
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.RunOnce(ctx); err != nil {
					t.Errorf("cleaner %d: %v", i, err)
					return
				}
				passes[i]++
			}
		})
	}

	var work sync.WaitGroup
	for i, w := range ws {
		work.Go(func() {
			for n := range puts {
				if err := w.put(ctx, fmt.Sprintf("w%d/%03d", i, n)); err != nil {
					t.Errorf("writer %d put: %v", i, err)
					return
				}
				if n%7 == 6 {
					if err := w.commit(ctx); err != nil {
						t.Errorf("writer %d commit: %v", i, err)
						return
					}
				}
			}
		})
	}
	// One name, deleted and re-created; each incarnation gets staged entries.
	var phoenix *writer
	work.Go(func() {
		for round := range 8 {
			if round > 0 {
				if err := m.DeleteRepository(ctx, "phoenix"); err != nil {
					t.Errorf("delete phoenix: %v", err)
					return
				}
			}
			rec, err := m.CreateRepository(ctx, "phoenix", repoParams(), initialCommit())
			if err != nil {
				t.Errorf("create phoenix: %v", err)
				return
			}
			phoenix = &writer{m: m, store: store, repo: rec, committed: map[string]bool{}}
			for n := range 5 {
				if err := phoenix.put(ctx, fmt.Sprintf("p%d/%d", round, n)); err != nil {
					t.Errorf("phoenix put: %v", err)
					return
				}
			}
		}
	})
	work.Wait()
	close(stop)
	cleaners.Wait()
	if t.Failed() {
		return
	}
	t.Logf("cleaner passes during the run: %v", passes)

	check := func(when string) {
		for i, w := range append(slices.Clone(ws), phoenix) {
			vis := w.visible(t, ctx)
			for _, k := range w.acked {
				if !vis[k] {
					t.Errorf("%s: writer %d lost acknowledged %s", when, i, k)
				}
			}
		}
	}
	check("after the run")
	// A last pass, then only live data remains.
	if _, err := cleaner.New(store, cleaner.Config{Sweep: true, SweepGrace: -1, Lister: lister}).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	check("after a final pass")
	live := map[string]bool{}
	tokens := map[string]bool{}
	for _, w := range append(slices.Clone(ws), phoenix) {
		live[string(keys.RepositoryPartition(string(w.repo.RepositoryID), string(w.repo.UniqueID)))] = true
		b, err := m.GetBranch(ctx, w.repo, "main")
		if err != nil {
			t.Fatal(err)
		}
		tokens[string(b.StagingToken)] = true
		for _, tok := range b.SealedTokens {
			tokens[string(tok)] = true
		}
	}
	for _, k := range etcdKeys(t, cli, store.Prefix()) {
		part, _, _ := strings.Cut(k, "/")
		switch part {
		case keys.PartitionGraveler:
		case "repo":
			p, _, _ := strings.Cut(strings.TrimPrefix(k, "repo/"), "/")
			if !live["repo/"+p] {
				t.Errorf("unreachable key %s", k)
			}
		case "staging":
			tok, _, _ := strings.Cut(strings.TrimPrefix(k, "staging/"), "/")
			if !tokens[tok] {
				t.Errorf("unreachable key %s", k)
			}
		default:
			t.Errorf("unexpected key %s", k)
		}
	}
}

// branchLedger is what writers of one branch attempted and had
// acknowledged: versions increase per key; the last acknowledged one must
// survive, and a later attempted one may have landed.
type branchLedger struct {
	repo   graveler.RepositoryID
	branch graveler.BranchID
	mu     sync.Mutex
	// acked and attempted: key -> version.
	acked, attempted map[string]int
	commits          []graveler.CommitID
}

func newBranchLedger(repo graveler.RepositoryID, branch graveler.BranchID) *branchLedger {
	return &branchLedger{repo: repo, branch: branch, acked: map[string]int{}, attempted: map[string]int{}}
}

// put stages key at version v through g and records the outcome.
func (l *branchLedger) put(ctx context.Context, g *graveler.Graveler, key string, v int) error {
	l.mu.Lock()
	l.attempted[key] = max(l.attempted[key], v)
	l.mu.Unlock()
	err := g.Set(ctx, l.repo, l.branch, graveler.Key(key), version(v), graveler.SetOptions{})
	if err == nil {
		l.mu.Lock()
		l.acked[key] = max(l.acked[key], v)
		l.mu.Unlock()
	}
	return err
}

// commit commits through g; a concurrent commit that took every staged
// write first leaves nothing to commit, which is no failure.
func (l *branchLedger) commit(ctx context.Context, g *graveler.Graveler, msg string) error {
	id, err := g.Commit(ctx, l.repo, l.branch, graveler.CommitParams{Committer: "racer", Message: msg})
	switch {
	case err == nil:
		l.mu.Lock()
		l.commits = append(l.commits, id)
		l.mu.Unlock()
		return nil
	case errors.Is(err, graveler.ErrNoChanges):
		return nil
	}
	return err
}

// check: every acknowledged write is visible at ref with its last
// acknowledged version or a later attempted one; with commits, every
// acknowledged commit is in ref's history.
func (l *branchLedger) check(t *testing.T, g *graveler.Graveler, ref graveler.Ref, when string, commits bool) int {
	t.Helper()
	got, err := listAll(t.Context(), g, l.repo, ref)
	if err != nil {
		t.Errorf("%s: %v", when, err)
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	verified := 0
	for key, v := range l.acked {
		id, ok := got[key]
		if !ok {
			t.Errorf("%s: %s/%s at %s lost acknowledged %s (version %d)", when, l.repo, l.branch, ref, key, v)
			continue
		}
		n, err := entryVersion(id)
		if err != nil || n < v || n > l.attempted[key] {
			t.Errorf("%s: %s/%s at %s: %s has %q, acknowledged version %d, attempted up to %d", when, l.repo, l.branch, ref, key, id, v, l.attempted[key])
			continue
		}
		verified++
	}
	if commits {
		log, err := logOf(t.Context(), g, l.repo, ref)
		if err != nil {
			t.Errorf("%s: %v", when, err)
			return verified
		}
		for _, c := range l.commits {
			if !slices.Contains(log, c) {
				t.Errorf("%s: acknowledged commit %s of %s/%s is not in its history", when, c, l.repo, l.branch)
				continue
			}
			verified++
		}
	}
	return verified
}

// TestRaceWithService runs the real Graveler service (two replicas on one
// embedded etcd and one blob store) against two cleaners looping with the
// sweep on and no grace, the most aggressive setting: writers stage unique
// keys (and rewrite some) and commit, two of them racing on one branch;
// branches are created, written, committed and deleted; one repository
// name is deleted and re-created over and over while another client keeps
// writing to it. Afterwards no acknowledged write or commit is lost
// (staged view, then committed data after a final commit), and after a
// final pass a scan of etcd finds only what live repositories reach.
func TestRaceWithService(t *testing.T) {
	store, cli, lister := newEtcd(t)
	ctx := t.Context()
	blobs := newBlobs(t)
	gs := []*graveler.Graveler{
		gravelertest.New(t, store, gravelertest.Options{Blobs: blobs}),
		gravelertest.New(t, store, gravelertest.Options{Blobs: blobs}),
	}
	const puts = 80
	for _, r := range []graveler.RepositoryID{"busy-0", "busy-1"} {
		if _, err := gs[0].CreateRepository(ctx, r, gravelertest.Namespace(), "main"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := gs[0].CreateBranch(ctx, "busy-1", "dev", "main"); err != nil {
		t.Fatal(err)
	}
	shared, dev := newBranchLedger("busy-0", "main"), newBranchLedger("busy-1", "dev")

	stop := make(chan struct{})
	var cleaners sync.WaitGroup
	passes, failedSteps := make([]int, 2), make([]int, 2)
	for i := range passes {
		cleaners.Go(func() {
			c := cleaner.New(store, cleaner.Config{Sweep: true, SweepGrace: -1, Lister: lister})
			for {
				select {
				case <-stop:
					return
				default:
				}
				sum, err := c.RunOnce(ctx)
				if err != nil {
					t.Errorf("cleaner %d: %v", i, err)
					return
				}
				passes[i]++
				failedSteps[i] += sum.Errors
			}
		})
	}

	var work sync.WaitGroup
	// Writers: 0 and 1 race on busy-0/main through different replicas;
	// 2 has busy-1/dev to itself.
	for i, l := range []*branchLedger{shared, shared, dev} {
		g := gs[i%2]
		work.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			versions := map[string]int{}
			var mine []string
			for n := range puts {
				key := fmt.Sprintf("w%d/%03d", i, n)
				if len(mine) > 0 && rng.IntN(5) == 0 {
					key = mine[rng.IntN(len(mine))]
				} else {
					mine = append(mine, key)
				}
				versions[key]++
				if err := l.put(ctx, g, key, versions[key]); err != nil {
					t.Errorf("writer %d: put %s: %v", i, key, err)
					return
				}
				if n%8 == 7 {
					if err := l.commit(ctx, g, fmt.Sprintf("w%d c%d", i, n)); err != nil {
						t.Errorf("writer %d: commit: %v", i, err)
						return
					}
				}
			}
		})
	}
	// Branch churn on busy-1.
	work.Go(func() {
		g := gs[0]
		for n := range 6 {
			b := graveler.BranchID(fmt.Sprintf("t%d", n))
			if _, err := g.CreateBranch(ctx, "busy-1", b, "main"); err != nil {
				t.Errorf("create branch %s: %v", b, err)
				return
			}
			l := newBranchLedger("busy-1", b)
			for k := range 3 {
				if err := l.put(ctx, g, fmt.Sprintf("t/%d", k), 1); err != nil {
					t.Errorf("branch %s: %v", b, err)
					return
				}
			}
			if err := l.commit(ctx, g, "churn"); err != nil {
				t.Errorf("branch %s: %v", b, err)
				return
			}
			if n%2 == 0 {
				if err := l.put(ctx, g, "t/staged", 1); err != nil {
					t.Errorf("branch %s: %v", b, err)
					return
				}
			}
			if err := g.DeleteBranch(ctx, "busy-1", b); err != nil {
				t.Errorf("delete branch %s: %v", b, err)
				return
			}
		}
	})
	// One name, deleted and re-created; each incarnation gets staged and
	// committed entries, while a second client writes to whatever
	// incarnation there is (its failures are expected: not found between
	// a delete and the next create).
	var phoenix *branchLedger
	phoenixDone := make(chan struct{})
	work.Go(func() {
		defer close(phoenixDone)
		g := gs[1]
		for round := range 6 {
			if round > 0 {
				if err := g.DeleteRepository(ctx, "phoenix"); err != nil {
					t.Errorf("delete phoenix: %v", err)
					return
				}
			}
			if _, err := g.CreateRepository(ctx, "phoenix", gravelertest.Namespace(), "main"); err != nil {
				t.Errorf("create phoenix: %v", err)
				return
			}
			l := newBranchLedger("phoenix", "main")
			for n := range 8 {
				if err := l.put(ctx, g, fmt.Sprintf("p%d/%d", round, n), 1); err != nil {
					t.Errorf("phoenix put: %v", err)
					return
				}
				if n == 4 {
					if err := l.commit(ctx, g, fmt.Sprintf("phoenix %d", round)); err != nil {
						t.Errorf("phoenix commit: %v", err)
						return
					}
				}
			}
			phoenix = l
		}
	})
	var intruderOps, intruderFailed int
	work.Go(func() {
		g := gs[0]
		for n := 0; ; n++ {
			select {
			case <-phoenixDone:
				return
			default:
			}
			intruderOps++
			if err := g.Set(ctx, "phoenix", "main", graveler.Key(fmt.Sprintf("x/%d", n)), version(1), graveler.SetOptions{}); err != nil {
				intruderFailed++
			}
			if n%10 == 9 {
				_, _ = g.Commit(ctx, "phoenix", "main", graveler.CommitParams{Committer: "intruder", Message: "x"})
			}
		}
	})
	work.Wait()
	close(stop)
	cleaners.Wait()
	if t.Failed() {
		return
	}
	t.Logf("cleaner passes during the run: %v (failed steps %v); intruder writes to phoenix: %d, %d failed",
		passes, failedSteps, intruderOps, intruderFailed)

	ledgers := []*branchLedger{shared, dev, phoenix}
	verified := 0
	for _, l := range ledgers {
		verified += l.check(t, gs[1], graveler.Ref(l.branch), "staged, after the run", true)
	}
	// A final commit: every acknowledged write is committed data.
	for _, l := range ledgers {
		if err := l.commit(ctx, gs[0], "final"); err != nil {
			t.Fatalf("final commit on %s/%s: %v", l.repo, l.branch, err)
		}
		verified += l.check(t, gs[0], graveler.Ref(string(l.branch)+"@"), "committed, after a final commit", true)
	}
	// A last pass, then only live data remains.
	sum, err := cleaner.New(store, cleaner.Config{Sweep: true, SweepGrace: -1, Lister: lister}).RunOnce(ctx)
	if err != nil || sum.Errors != 0 {
		t.Fatalf("final pass: %+v, %v", sum, err)
	}
	for _, l := range ledgers {
		verified += l.check(t, gs[1], graveler.Ref(l.branch), "after a final pass", true)
	}
	ids := liveIDs(t, gs[0], map[graveler.RepositoryID]bool{"busy-0": true, "busy-1": true, "phoenix": true})
	stray, _ := unreachableInEtcd(t, cli, store.Prefix(), ids)
	if len(stray) > 0 {
		slices.Sort(stray)
		t.Errorf("%d keys no live repository reaches remain, e.g. %v", len(stray), stray[:min(len(stray), 10)])
	}
	t.Logf("verified %d acknowledged writes and commits; final pass: %+v", verified, sum)
}
