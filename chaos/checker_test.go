//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pb "graveler/api/graveler/v1"
	"graveler/client"
)

type checker struct {
	t *testing.T
	c *client.Client
	l *ledger
}

// retry calls f until it succeeds, fails with a definite answer
// (NOT_FOUND, INVALID_ARGUMENT, FAILED_PRECONDITION), or ctx ends.
func retry[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	for {
		out, err := call(ctx, f)
		switch code(err) {
		case codes.OK, codes.NotFound, codes.InvalidArgument, codes.FailedPrecondition:
			return out, err
		}
		if ctx.Err() != nil {
			return out, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// entries lists every entry visible at ref as key -> version.
func (k *checker) entries(ctx context.Context, repo, ref string) (map[string]int, error) {
	out := map[string]int{}
	token := ""
	for {
		resp, err := retry(ctx, func(ctx context.Context) (*pb.ListEntriesResponse, error) {
			return k.c.ListEntries(ctx, &pb.ListEntriesRequest{Repository: client.Repository(repo), Ref: ref, PageSize: 1000, PageToken: token})
		})
		if err != nil {
			return nil, fmt.Errorf("list %s@%s: %w", repo, ref, err)
		}
		for _, e := range resp.GetEntries() {
			v, err := strconv.Atoi(strings.TrimPrefix(string(e.GetValue().GetIdentity()), "v"))
			if err != nil {
				return nil, fmt.Errorf("entry %q has identity %q", e.GetKey(), e.GetValue().GetIdentity())
			}
			out[string(e.GetKey())] = v
		}
		if token = resp.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
}

// history returns the commits reachable from ref, newest first.
func (k *checker) history(ctx context.Context, repo, ref string) ([]*pb.Commit, error) {
	var out []*pb.Commit
	token := ""
	for {
		resp, err := retry(ctx, func(ctx context.Context) (*pb.LogResponse, error) {
			return k.c.Log(ctx, &pb.LogRequest{Repository: client.Repository(repo), Ref: ref, PageSize: 1000, PageToken: token})
		})
		if err != nil {
			return nil, fmt.Errorf("log %s@%s: %w", repo, ref, err)
		}
		out = append(out, resp.GetCommits()...)
		if token = resp.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
}

// checkEntries: every acknowledged write is visible at ref with its last
// acknowledged version or a later attempted one.
func (k *checker) checkEntries(ctx context.Context, b branchRef, ref string) {
	got, err := k.entries(ctx, b.repo, ref)
	if err != nil {
		k.t.Errorf("%v", err)
		return
	}
	k.l.mu.Lock()
	defer k.l.mu.Unlock()
	for key, s := range k.l.entries[b] {
		v, ok := got[key]
		switch {
		case s.lastAcked > 0 && !ok:
			k.t.Errorf("LOST WRITE: %s/%s at %s: key %q acknowledged at version %d is missing", b.repo, b.branch, ref, key, s.lastAcked)
		case ok && (v < s.lastAcked || v > s.maxAttempted):
			k.t.Errorf("WRONG VALUE: %s/%s at %s: key %q has version %d, acknowledged %d, attempted up to %d", b.repo, b.branch, ref, key, v, s.lastAcked, s.maxAttempted)
		case s.lastAcked > 0:
			k.l.verified.Add(1)
		}
		delete(got, key)
	}
	// What remains was not written on this branch; it may only have been
	// inherited from another branch of the repository (a branch starts
	// from main's head).
	for key := range got {
		written := false
		for other, m := range k.l.entries {
			if other.repo == b.repo && m[key] != nil {
				written = true
				break
			}
		}
		if !written {
			k.t.Errorf("PHANTOM: %s/%s at %s: key %q was never written in this repository", b.repo, b.branch, ref, key)
		}
	}
}

// checkHistory: every acknowledged commit on b is in its history, and the
// head is a commit some commit call on b produced.
func (k *checker) checkHistory(ctx context.Context, b branchRef) {
	hist, err := k.history(ctx, b.repo, b.branch)
	if err != nil {
		k.t.Errorf("%v", err)
		return
	}
	inHistory := map[string]bool{}
	for _, c := range hist {
		inHistory[c.GetId()] = true
	}
	k.l.mu.Lock()
	defer k.l.mu.Unlock()
	attempted := map[string]bool{}
	anyAcked := false
	for _, a := range k.l.commits[b] {
		attempted[a.message] = true
		if !a.acked {
			continue
		}
		anyAcked = true
		if !inHistory[a.id] {
			k.t.Errorf("LOST COMMIT: %s/%s: acknowledged commit %s (%q) is not in the branch's history", b.repo, b.branch, a.id, a.message)
		} else {
			k.l.verified.Add(1)
		}
	}
	if anyAcked && len(hist) > 0 {
		if head := hist[0]; !attempted[head.GetMessage()] {
			k.t.Errorf("FOREIGN HEAD: %s/%s: head %s (%q) was not produced by a commit on this branch", b.repo, b.branch, head.GetId(), head.GetMessage())
		} else {
			k.l.verified.Add(1)
		}
	}
	// Every chaos commit in the history was attempted on this branch or on
	// main (the source of every other branch).
	main := map[string]bool{}
	for _, a := range k.l.commits[branchRef{b.repo, "main"}] {
		main[a.message] = true
	}
	for _, c := range hist {
		if c.GetCommitter() == "chaos" && !attempted[c.GetMessage()] && !main[c.GetMessage()] {
			k.t.Errorf("FOREIGN COMMIT: %s/%s: %s (%q) in history was never attempted here", b.repo, b.branch, c.GetId(), c.GetMessage())
		}
	}
}

// finalCommit commits b's remaining staged entries, retrying until the
// commit succeeds or there is nothing to commit.
func (k *checker) finalCommit(ctx context.Context, b branchRef) error {
	return until(ctx, func(ctx context.Context) error {
		_, err := call(ctx, func(ctx context.Context) (*pb.CommitResponse, error) {
			return k.c.Commit(ctx, &pb.CommitRequest{Branch: client.Branch(b.repo, b.branch), Options: &pb.CommitOptions{Message: "chaos final", Committer: "checker"}})
		})
		return err
	}, codes.FailedPrecondition)
}

func (k *checker) checkDeleted(ctx context.Context) {
	listed := map[string]bool{}
	token := ""
	for {
		resp, err := retry(ctx, func(ctx context.Context) (*pb.ListRepositoriesResponse, error) {
			return k.c.ListRepositories(ctx, &pb.ListRepositoriesRequest{PageSize: 1000, PageToken: token})
		})
		if err != nil {
			k.t.Errorf("list repositories: %v", err)
			return
		}
		for _, r := range resp.GetRepositories() {
			listed[strings.TrimPrefix(r.GetName(), "repositories/")] = true
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	k.l.mu.Lock()
	repos := map[string]lifecycle{}
	for r, s := range k.l.repos {
		repos[r] = *s
	}
	branches := map[branchRef]lifecycle{}
	for b, s := range k.l.branches {
		branches[b] = *s
	}
	k.l.mu.Unlock()
	for r, s := range repos {
		if !s.deleted {
			continue
		}
		_, err := retry(ctx, func(ctx context.Context) (*pb.GetRepositoryResponse, error) {
			return k.c.GetRepository(ctx, &pb.GetRepositoryRequest{Name: client.Repository(r)})
		})
		if code(err) != codes.NotFound || listed[r] {
			k.t.Errorf("DELETED REPOSITORY VISIBLE: %s: get: %v, listed: %v", r, err, listed[r])
		} else {
			k.l.verified.Add(1)
		}
	}
	for b, s := range branches {
		if !s.deleted {
			continue
		}
		_, err := retry(ctx, func(ctx context.Context) (*pb.GetBranchResponse, error) {
			return k.c.GetBranch(ctx, &pb.GetBranchRequest{Name: client.Branch(b.repo, b.branch)})
		})
		if code(err) != codes.NotFound {
			k.t.Errorf("DELETED BRANCH VISIBLE: %s/%s: %v", b.repo, b.branch, err)
		} else {
			k.l.verified.Add(1)
		}
	}
}
