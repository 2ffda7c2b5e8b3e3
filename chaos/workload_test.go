//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/zap"

	"google.golang.org/grpc/codes"

	pb "graveler/api/graveler/v1"
	"graveler/client"
)

const callTimeout = 5 * time.Second

func call[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return f(ctx)
}

func value(key string, version int) *pb.Value {
	return &pb.Value{Identity: fmt.Appendf(nil, "v%d", version), Data: fmt.Appendf(nil, "%s@%d", key, version)}
}

// startGravelerds starts two gravelerd replicas on c, g0 and g1, and
// dials each; they are stopped and the clients closed at the end of the
// test.
func startGravelerds(t *testing.T, c *cluster, log *zap.Logger) ([]*gravelerd, []*client.Client) {
	t.Helper()
	gs := []*gravelerd{newGravelerd(t, c.endpoints(), log, "g0"), newGravelerd(t, c.endpoints(), log, "g1")}
	for _, g := range gs {
		if err := g.start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.stop() })
	}
	conns := make([]*client.Client, len(gs))
	for i, g := range gs {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cl, err := client.Dial(ctx, g.addr)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		conns[i] = cl
	}
	return gs, conns
}

// ensureRepository creates repo (default branch main) through cl, retrying
// through transient failures for a minute; one that already exists (an
// earlier attempt landed) will do.
func ensureRepository(t *testing.T, cl *client.Client, repo string) {
	t.Helper()
	setup, cancelSetup := context.WithTimeout(context.Background(), time.Minute)
	defer cancelSetup()
	if err := until(setup, func(ctx context.Context) error {
		_, err := call(ctx, func(ctx context.Context) (*pb.CreateRepositoryResponse, error) {
			return cl.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: repo, Repository: &pb.Repository{DefaultBranch: "main"}})
		})
		return err
	}, codes.AlreadyExists); err != nil {
		t.Fatalf("create repository: %v", err)
	}
}

// until retries f until it succeeds, its error is one of ok, or ctx ends.
func until(ctx context.Context, f func(context.Context) error, ok ...codes.Code) error {
	for {
		err := f(ctx)
		if err == nil {
			return nil
		}
		for _, c := range ok {
			if code(err) == c {
				return nil
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type worker struct {
	id  int
	c   *client.Client
	l   *ledger
	rng *rand.Rand
	seq int
}

// done records the outcome of one call of op and, after a failure, backs
// off briefly (20-100ms) as a real client would: without it a client whose
// gravelerd is restarting spins on fail-fast UNAVAILABLE errors, which
// burns the CPU the faulty cluster needs and inflates the failure count.
// A call cut short by the end of the run (ctx) is not counted.
func (w *worker) done(ctx context.Context, op string, err error) {
	if err != nil && ctx.Err() != nil {
		return
	}
	w.l.result(op, err)
	if err != nil {
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(20+w.rng.IntN(80)) * time.Millisecond):
		}
	}
}

func (w *worker) put(ctx context.Context, b branchRef, key string, version int) error {
	w.l.attemptPut(b, key, version)
	_, err := call(ctx, func(ctx context.Context) (*pb.PutEntryResponse, error) {
		return w.c.PutEntry(ctx, &pb.PutEntryRequest{Branch: client.Branch(b.repo, b.branch), Entry: &pb.Entry{Key: []byte(key), Value: value(key, version)}})
	})
	w.done(ctx, "put", err)
	if err == nil {
		w.l.ackPut(b, key, version)
	}
	return err
}

func (w *worker) commit(ctx context.Context, b branchRef) error {
	w.seq++
	a := &commitAttempt{message: fmt.Sprintf("chaos w%d c%d", w.id, w.seq)}
	w.l.commit(b, a)
	resp, err := call(ctx, func(ctx context.Context) (*pb.CommitResponse, error) {
		return w.c.Commit(ctx, &pb.CommitRequest{Branch: client.Branch(b.repo, b.branch), Options: &pb.CommitOptions{Message: a.message, Committer: "chaos"}})
	})
	w.done(ctx, "commit", err)
	if err == nil {
		w.l.mu.Lock()
		a.acked, a.id, a.rev = true, resp.GetCommit().GetId(), resp.GetRevision()
		w.l.mu.Unlock()
	}
	return err
}

// writer stages unique keys on one branch, sometimes rewrites one of its
// own keys with a new version, and commits every few writes.
func (w *worker) writer(ctx context.Context, b branchRef) {
	versions := map[string]int{}
	var keys []string
	for n := 0; ctx.Err() == nil; n++ {
		key := fmt.Sprintf("w%02d/%06d", w.id, n)
		if len(keys) > 0 && w.rng.IntN(5) == 0 {
			key = keys[w.rng.IntN(len(keys))]
		} else {
			keys = append(keys, key)
		}
		versions[key]++
		_ = w.put(ctx, b, key, versions[key])
		if n%25 == 24 {
			_ = w.commit(ctx, b)
		}
	}
}

func (w *worker) createBranch(ctx context.Context, b branchRef) error {
	s := w.l.branch(b)
	resp, err := call(ctx, func(ctx context.Context) (*pb.CreateBranchResponse, error) {
		return w.c.CreateBranch(ctx, &pb.CreateBranchRequest{Parent: client.Repository(b.repo), BranchId: b.branch, SourceRef: "main"})
	})
	w.done(ctx, "create-branch", err)
	if err == nil {
		w.l.mu.Lock()
		s.created, s.createRev = true, resp.GetRevision()
		w.l.mu.Unlock()
	}
	return err
}

func (w *worker) deleteBranch(ctx context.Context, b branchRef) error {
	s := w.l.branch(b)
	w.l.mu.Lock()
	s.deleteAttempted = true
	w.l.mu.Unlock()
	resp, err := call(ctx, func(ctx context.Context) (*pb.DeleteBranchResponse, error) {
		return w.c.DeleteBranch(ctx, &pb.DeleteBranchRequest{Name: client.Branch(b.repo, b.branch)})
	})
	w.done(ctx, "delete-branch", err)
	if err == nil {
		w.l.mu.Lock()
		s.deleted, s.deleteRev = true, resp.GetRevision()
		w.l.mu.Unlock()
	}
	return err
}

// branchChurn creates a branch, writes and commits on it, tags it, and
// deletes it; every other tag is deleted again, so tags come and go and
// some remain.
func (w *worker) branchChurn(ctx context.Context, repo string) {
	for n := 0; ctx.Err() == nil; n++ {
		b := branchRef{repo, fmt.Sprintf("t%02d-%04d", w.id, n)}
		if w.createBranch(ctx, b) != nil {
			continue
		}
		for i := range 3 {
			_ = w.put(ctx, b, fmt.Sprintf("t/%d", i), 1)
		}
		_ = w.commit(ctx, b)
		tag := tagRef{repo, fmt.Sprintf("k%02d-%04d", w.id, n)}
		if w.createTag(ctx, tag, b.branch) == nil && n%2 == 1 {
			_ = w.deleteTag(ctx, tag)
		}
		_ = w.deleteBranch(ctx, b)
	}
}

func (w *worker) createTag(ctx context.Context, tag tagRef, ref string) error {
	s := w.l.tag(tag)
	resp, err := call(ctx, func(ctx context.Context) (*pb.CreateTagResponse, error) {
		return w.c.CreateTag(ctx, &pb.CreateTagRequest{Parent: client.Repository(tag.repo), TagId: tag.tag, Ref: ref})
	})
	w.done(ctx, "create-tag", err)
	if err == nil {
		w.l.mu.Lock()
		s.created, s.createRev = true, resp.GetRevision()
		w.l.mu.Unlock()
	}
	return err
}

func (w *worker) deleteTag(ctx context.Context, tag tagRef) error {
	s := w.l.tag(tag)
	w.l.mu.Lock()
	s.deleteAttempted = true
	w.l.mu.Unlock()
	resp, err := call(ctx, func(ctx context.Context) (*pb.DeleteTagResponse, error) {
		return w.c.DeleteTag(ctx, &pb.DeleteTagRequest{Name: client.Tag(tag.repo, tag.tag)})
	})
	w.done(ctx, "delete-tag", err)
	if err == nil {
		w.l.mu.Lock()
		s.deleted, s.deleteRev = true, resp.GetRevision()
		w.l.mu.Unlock()
	}
	return err
}

// repoChurn creates a repository, writes and commits in it, and deletes it.
func (w *worker) repoChurn(ctx context.Context) {
	for n := 0; ctx.Err() == nil; n++ {
		repo := fmt.Sprintf("chaos-tmp-%02d-%04d", w.id, n)
		s := w.l.repo(repo)
		resp, err := call(ctx, func(ctx context.Context) (*pb.CreateRepositoryResponse, error) {
			return w.c.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: repo, Repository: &pb.Repository{DefaultBranch: "main"}})
		})
		w.done(ctx, "create-repository", err)
		if err != nil {
			// The create may have applied: delete it anyway so it is
			// either reclaimed or never existed.
			w.deleteRepo(ctx, repo, s)
			continue
		}
		w.l.mu.Lock()
		s.created, s.createRev = true, resp.GetRevision()
		w.l.mu.Unlock()
		b := branchRef{repo, "main"}
		for i := range 5 {
			_ = w.put(ctx, b, fmt.Sprintf("r/%d", i), 1)
		}
		_ = w.commit(ctx, b)
		w.deleteRepo(ctx, repo, s)
	}
}

func (w *worker) deleteRepo(ctx context.Context, repo string, s *lifecycle) {
	w.l.mu.Lock()
	s.deleteAttempted = true
	w.l.mu.Unlock()
	resp, err := call(ctx, func(ctx context.Context) (*pb.DeleteRepositoryResponse, error) {
		return w.c.DeleteRepository(ctx, &pb.DeleteRepositoryRequest{Name: client.Repository(repo)})
	})
	w.done(ctx, "delete-repository", err)
	if err == nil || code(err) == codes.NotFound {
		w.l.mu.Lock()
		s.deleted = err == nil || s.created
		s.deleteRev = resp.GetRevision()
		w.l.mu.Unlock()
	}
}
