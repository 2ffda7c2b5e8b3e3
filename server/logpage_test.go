package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pb "graveler/api/graveler/v1"
	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/gravelertest"
	"graveler/graveler/ref"
	"graveler/keys"
	"graveler/kv"
)

// commitReadStore counts the commit records read through it.
type commitReadStore struct {
	kv.Store
	reads atomic.Int64
}

func (s *commitReadStore) Get(ctx context.Context, partition, key []byte) ([]byte, kv.Predicate, error) {
	if bytes.HasPrefix(key, []byte(keys.CommitsPrefix)) {
		s.reads.Add(1)
	}
	return s.Store.Get(ctx, partition, key)
}

type logFixture struct {
	h     *harness
	store *commitReadStore
	m     *ref.Manager
	repo  *graveler.RepositoryRecord
	date  time.Time
}

// newLogFixture serves a real service on etcd with no commit cache, so
// every commit a Log request needs is a counted read, and returns a ref
// manager on the same store to write history with.
func newLogFixture(t *testing.T) *logFixture {
	store := &commitReadStore{Store: etcdkvtest.NewStore(t)}
	svc := gravelertest.New(t, store, gravelertest.Options{Ref: ref.Config{CommitCacheSize: -1}})
	m := ref.New(store, ref.Config{})
	repo, err := m.CreateBareRepository(t.Context(), "logs", graveler.Repository{StorageNamespace: gravelertest.Namespace(), DefaultBranchID: "main"})
	if err != nil {
		t.Fatal(err)
	}
	return &logFixture{h: start(t, svc, GRPCOptions{}), store: store, m: m, repo: repo, date: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (f *logFixture) add(t *testing.T, msg string, parents ...graveler.CommitID) graveler.CommitID {
	t.Helper()
	f.date = f.date.Add(time.Second)
	id, err := f.m.AddCommit(t.Context(), f.repo, graveler.Commit{Committer: "log", Message: msg, MetaRangeID: "mr", CreationDate: f.date, Parents: parents})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// streamed is the whole log as StreamLog sends it.
func (f *logFixture) streamed(t *testing.T, head graveler.CommitID) []string {
	t.Helper()
	s, err := f.h.client.StreamLog(t.Context(), &pb.StreamLogRequest{Repository: "repositories/logs", Ref: string(head)})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for {
		r, err := s.Recv()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range r.GetCommits() {
			out = append(out, c.GetId())
		}
	}
}

// paged is the whole log through Log pages of size n, with the commit
// reads of each page.
func (f *logFixture) paged(t *testing.T, head graveler.CommitID, n int32) (ids []string, reads []int64) {
	t.Helper()
	req := &pb.LogRequest{Repository: "repositories/logs", Ref: string(head), PageSize: n}
	for {
		before := f.store.reads.Load()
		r, err := f.h.client.Log(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		reads = append(reads, f.store.reads.Load()-before)
		for _, c := range r.GetCommits() {
			ids = append(ids, c.GetId())
		}
		if req.PageToken = r.GetNextPageToken(); req.PageToken == "" {
			return ids, reads
		}
	}
}

// TestLogPagesResumeFromFrontier: pages of the full log of a merge history
// are the streamed log, and page 100 reads as many commit records as page
// 2 give or take the width of history (at most 5 lines here), where
// walking again from the head would read about a thousand.
func TestLogPagesResumeFromFrontier(t *testing.T) {
	f := newLogFixture(t)
	rng := rand.New(rand.NewPCG(18, 4))
	head := f.add(t, "root")
	var sides []graveler.CommitID
	for i := range 1200 {
		msg := fmt.Sprint(i)
		switch x := rng.IntN(10); {
		case x < 2 && len(sides) < 4:
			sides = append(sides, f.add(t, "fork "+msg, head))
		case x < 5 && len(sides) > 0:
			j := rng.IntN(len(sides))
			sides[j] = f.add(t, "side "+msg, sides[j])
		case x < 6 && len(sides) > 0:
			j := rng.IntN(len(sides))
			head = f.add(t, "merge "+msg, head, sides[j])
			sides = slices.Delete(sides, j, j+1)
		default:
			head = f.add(t, "main "+msg, head)
		}
	}
	want := f.streamed(t, head)
	got, reads := f.paged(t, head, 10)
	if !slices.Equal(got, want) {
		t.Fatalf("%d commits paged, %d streamed", len(got), len(want))
	}
	if len(reads) < 100 {
		t.Fatalf("only %d pages", len(reads))
	}
	t.Logf("commit reads: page 2 %d, page 50 %d, page 100 %d", reads[1], reads[49], reads[99])
	if reads[99] > reads[1]+5 {
		t.Fatalf("page 100 read %d commits, page 2 %d: a page's work grows with its depth", reads[99], reads[1])
	}
}

// TestLogPagesWiderThanCursor: a merge of more lines than a page token
// holds (maxLogPending) makes the next pages walk again from the head and
// skip; the pages still are the streamed log, and once the frontier
// narrows again the cursor carries it again.
func TestLogPagesWiderThanCursor(t *testing.T) {
	f := newLogFixture(t)
	base := f.add(t, "root")
	for i := range 20 {
		base = f.add(t, fmt.Sprint("old ", i), base)
	}
	parents := []graveler.CommitID{base}
	for i := range maxLogPending + 25 {
		parents = append(parents, f.add(t, fmt.Sprint("line ", i), base))
	}
	head := f.add(t, "octopus", parents...)
	for i := range 30 {
		head = f.add(t, fmt.Sprint("new ", i), head)
	}
	want := f.streamed(t, head)
	got, reads := f.paged(t, head, 10)
	if !slices.Equal(got, want) {
		t.Fatalf("%d commits paged, %d streamed; differ at %d", len(got), len(want), firstDiffString(got, want))
	}
	// Page 4 ends among the octopus's lines with a frontier too wide for
	// a token, so pages 5 and 6 walk again from the head (over a hundred
	// reads); the last page resumes from a one-commit frontier again.
	t.Logf("commit reads per page: %v", reads)
	if slices.Max(reads) < 100 || reads[len(reads)-1] > 12 {
		t.Fatalf("commit reads per page %v: want a re-walk past the octopus and a resumed last page", reads)
	}
}

func firstDiffString(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestLogTokenNamingUnknownCommitsIsInvalid: the commits a Log page token
// resumes from existed when it was issued and commits are never removed,
// so a token naming one the repository does not have (forged, or issued
// before the repository was deleted and created again) is INVALID_ARGUMENT
// / INVALID_PAGE_TOKEN, in every cursor form, not NOT_FOUND for a commit
// the client never sent. A token naming commits that exist still resumes.
func TestLogTokenNamingUnknownCommitsIsInvalid(t *testing.T) {
	f := newLogFixture(t)
	root := f.add(t, "root")
	head := f.add(t, "head", root)
	unknown := graveler.CommitID(strings.Repeat("cd", 32))
	p := pager{key: defaultPageTokenKey}
	for name, c := range map[string]struct {
		firstParent bool
		cur         logCursor
	}{
		"frontier":               {cur: logCursor{skip: 1, start: head, pending: []graveler.CommitID{unknown}}},
		"frontier, first parent": {firstParent: true, cur: logCursor{skip: 1, start: head, pending: []graveler.CommitID{unknown}}},
		"skip":                   {cur: logCursor{skip: 1, start: unknown, last: unknown}},
		"skip, first parent":     {firstParent: true, cur: logCursor{skip: 1, start: unknown, last: unknown}},
		"frontier, one of two":   {cur: logCursor{skip: 1, start: head, pending: []graveler.CommitID{root, unknown}}},
	} {
		req := &pb.LogRequest{Repository: "repositories/logs", Ref: string(head), FirstParent: c.firstParent, PageSize: 1}
		req.PageToken = p.encode("Log", req, c.cur.encode())
		_, err := f.h.client.Log(t.Context(), req)
		if code, reason := codeAndReason(t, err); code != codes.InvalidArgument || reason != "INVALID_PAGE_TOKEN" {
			t.Errorf("%s token naming an unknown commit: %v", name, err)
		}
	}
	req := &pb.LogRequest{Repository: "repositories/logs", Ref: string(head), PageSize: 1}
	req.PageToken = p.encode("Log", req, logCursor{skip: 1, start: head, pending: []graveler.CommitID{root}}.encode())
	r, err := f.h.client.Log(t.Context(), req)
	if err != nil || len(r.GetCommits()) != 1 || r.GetCommits()[0].GetId() != string(root) {
		t.Errorf("a token naming the root: %v, %v", r, err)
	}
}
