package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	pb "graveler/api/graveler/v1"
	"graveler/client"
	"graveler/etcdkv/etcdkvtest"
	"graveler/server/daemon"
	"graveler/server/daemon/daemontest"
)

// The change feed end to end: e2eOps ref operations from e2eWorkers
// goroutines through one gravelerd replica (B), watched through another
// (A) that is restarted part-way, and through B. Every watcher must get
// exactly the changes the acknowledged operations imply, and replaying
// them must give the refs listed at the end.
const (
	e2eOps     = 1000
	e2eWorkers = 8
)

var e2eRepos = []string{"feed-a", "feed-b", "feed-c"}

// refChange is one ref change as a mutation's response tells it, or as an
// event carries it.
type refChange struct {
	rev    int64
	typ    pb.RefEvent_Type
	repo   string // "repositories/x"
	ref    string // the branch's or tag's name, "" for repository events
	commit string
	old    string // "" when the response does not tell it
	cause  pb.RefEvent_Cause
	record *pb.Commit     // the commit of COMMIT and MERGE moves
	info   *pb.Repository // REPOSITORY_CREATED
}

func (c refChange) String() string {
	return fmt.Sprintf("rev %d %v %s%s %s->%s %v", c.rev, c.typ, c.repo, strings.TrimPrefix(c.ref, c.repo), c.old, c.commit, c.cause)
}

func changeOf(e *pb.RefEvent) refChange {
	c := refChange{rev: e.GetRevision(), typ: e.GetType(), repo: e.GetRepository(), ref: e.GetBranch() + e.GetTag(),
		commit: e.GetCommitId(), old: e.GetOldCommitId(), cause: e.GetCause(), record: e.GetCommit(), info: e.GetRepositoryInfo()}
	return c
}

// oracle records what the acknowledged mutations imply, by revision.
type oracle struct {
	t        *testing.T
	mu       sync.Mutex
	changes  map[int64][]refChange
	lastRev  int64
	rejected map[string]int // by operation and reason
	attempts atomic.Int64
	done     atomic.Int64 // attempts finished, acknowledged or not
}

// add records the changes of one mutation, all at one revision.
func (o *oracle) add(cs ...refChange) {
	o.mu.Lock()
	defer o.mu.Unlock()
	rev := cs[0].rev
	if prev, ok := o.changes[rev]; ok {
		o.t.Errorf("two acknowledged mutations answered revision %d: %v and %v", rev, prev, cs)
	}
	o.changes[rev] = cs
	o.lastRev = max(o.lastRev, rev)
}

// reject counts an operation the server refused for a reason the
// concurrent workload makes expected (the test fails on any other).
func (o *oracle) reject(op string, err error) {
	switch client.Reason(err) {
	case "DIRTY_BRANCH", "BRANCH_HEAD_MOVED", "NO_CHANGES", "CONCURRENT_UPDATE", "TOO_MANY_RETRIES":
		o.mu.Lock()
		o.rejected[op+"/"+client.Reason(err)]++
		o.mu.Unlock()
	default:
		o.t.Errorf("%s: %v", op, err)
	}
}

// e2eWorker runs operations on one repository: on its own branches and
// tags (no one else writes them) and on the shared main branch.
type e2eWorker struct {
	id       int
	cl       *client.Client
	etcd     *clientv3.Client
	tagsKey  string // the etcd key prefix of the repository's tags
	o        *oracle
	rng      *rand.Rand
	repo     string
	branches []string
	tags     map[string]string // own tag -> commit
	seq      int
}

func (w *e2eWorker) next() int { w.seq++; return w.seq }

func (w *e2eWorker) put(ctx context.Context, branch, key string) error {
	_, err := w.cl.PutEntry(ctx, &pb.PutEntryRequest{Branch: client.Branch(w.repo, branch),
		Entry: &pb.Entry{Key: []byte(key), Value: &pb.Value{Identity: []byte("id-" + key), Data: []byte(key)}}})
	return err
}

func (w *e2eWorker) ownBranch() string { return w.branches[w.rng.IntN(len(w.branches))] }

func (w *e2eWorker) step(ctx context.Context) {
	r := w.rng.IntN(100)
	switch {
	case len(w.branches) == 0 && r < 70:
		r = 55 // a branch first
	case len(w.branches) >= 4 && r >= 55 && r < 65:
		r = 65 // a branch less
	}
	var op string
	var err error
	switch {
	case r < 25:
		op, err = "commit", w.commit(ctx, w.ownBranch(), 1+w.rng.IntN(3), false)
	case r < 33:
		op, err = "commit-main", w.commit(ctx, "main", 1, true)
	case r < 43:
		op, err = "merge-into-main", w.merge(ctx, "main", w.ownBranch(), w.rng.IntN(2) == 0)
	case r < 50:
		op, err = "merge-main", w.merge(ctx, w.ownBranch(), "main", false)
	case r < 55:
		op, err = "reset-hard", w.resetHard(ctx)
	case r < 65:
		op, err = "create-branch", w.createBranch(ctx)
	case r < 70:
		op, err = "delete-branch", w.deleteBranch(ctx)
	case r < 85:
		op, err = "create-tag", w.createTag(ctx)
	case r < 95:
		op, err = "delete-tag", w.deleteTag(ctx)
	case r < 98:
		op, err = "tag-pair", w.tagPair(ctx)
	default:
		op, err = "scratch-repository", w.scratchRepository(ctx)
	}
	if err != nil {
		w.o.reject(op, err)
	}
}

func (w *e2eWorker) commit(ctx context.Context, branch string, puts int, allowEmpty bool) error {
	for range puts {
		if err := w.put(ctx, branch, fmt.Sprintf("w%d/%s/%d", w.id, branch, w.next())); err != nil {
			return err
		}
	}
	r, err := w.cl.Commit(ctx, &pb.CommitRequest{Branch: client.Branch(w.repo, branch),
		Options: &pb.CommitOptions{Message: fmt.Sprintf("w%d commit %d", w.id, w.next()), Committer: "e2e", AllowEmpty: allowEmpty}})
	if err != nil {
		return err
	}
	w.o.add(refChange{rev: r.GetRevision(), typ: pb.RefEvent_TYPE_BRANCH_MOVED, repo: client.Repository(w.repo),
		ref: client.Branch(w.repo, branch), commit: r.GetCommit().GetId(), old: r.GetCommit().GetParents()[0],
		cause: pb.RefEvent_CAUSE_COMMIT, record: r.GetCommit()})
	return nil
}

func (w *e2eWorker) merge(ctx context.Context, dest, src string, noFF bool) error {
	r, err := w.cl.Merge(ctx, &pb.MergeRequest{Destination: client.Branch(w.repo, dest), SourceRef: src, NoFf: noFF,
		Strategy: pb.MergeStrategy_MERGE_STRATEGY_SOURCE_WINS,
		Options:  &pb.CommitOptions{Message: fmt.Sprintf("w%d merge %s into %s", w.id, src, dest), Committer: "e2e"}})
	if err != nil {
		return err
	}
	c := refChange{rev: r.GetRevision(), typ: pb.RefEvent_TYPE_BRANCH_MOVED, repo: client.Repository(w.repo),
		ref: client.Branch(w.repo, dest), commit: r.GetCommit().GetId(), cause: pb.RefEvent_CAUSE_MERGE, record: r.GetCommit()}
	if !r.GetFastForward() {
		c.old = r.GetCommit().GetParents()[0]
	}
	w.o.add(c)
	return nil
}

func (w *e2eWorker) resetHard(ctx context.Context) error {
	if len(w.branches) == 0 {
		return nil
	}
	ref := "main"
	if len(w.tags) > 0 && w.rng.IntN(2) == 0 {
		for t := range w.tags {
			ref = t
			break
		}
	}
	branch := w.ownBranch()
	r, err := w.cl.ResetHard(ctx, &pb.ResetHardRequest{Name: client.Branch(w.repo, branch), Ref: ref, Force: true})
	if err != nil {
		return err
	}
	w.o.add(refChange{rev: r.GetRevision(), typ: pb.RefEvent_TYPE_BRANCH_MOVED, repo: client.Repository(w.repo),
		ref: client.Branch(w.repo, branch), commit: r.GetBranch().GetCommitId(), cause: pb.RefEvent_CAUSE_RESET_HARD})
	return nil
}

func (w *e2eWorker) createBranch(ctx context.Context) error {
	name := fmt.Sprintf("w%d-b%d", w.id, w.next())
	src := "main"
	if len(w.branches) > 0 && w.rng.IntN(3) == 0 {
		src = w.ownBranch()
	}
	r, err := w.cl.CreateBranch(ctx, &pb.CreateBranchRequest{Parent: client.Repository(w.repo), BranchId: name, SourceRef: src})
	if err != nil {
		return err
	}
	w.branches = append(w.branches, name)
	w.o.add(refChange{rev: r.GetRevision(), typ: pb.RefEvent_TYPE_BRANCH_CREATED, repo: client.Repository(w.repo),
		ref: client.Branch(w.repo, name), commit: r.GetBranch().GetCommitId(), cause: pb.RefEvent_CAUSE_CREATE})
	return nil
}

func (w *e2eWorker) deleteBranch(ctx context.Context) error {
	if len(w.branches) == 0 {
		return nil
	}
	i := w.rng.IntN(len(w.branches))
	name := w.branches[i]
	r, err := w.cl.DeleteBranch(ctx, &pb.DeleteBranchRequest{Name: client.Branch(w.repo, name)})
	if err != nil {
		return err
	}
	w.branches = slices.Delete(w.branches, i, i+1)
	w.o.add(refChange{rev: r.GetRevision(), typ: pb.RefEvent_TYPE_BRANCH_DELETED, repo: client.Repository(w.repo),
		ref: client.Branch(w.repo, name)})
	return nil
}

func (w *e2eWorker) createTag(ctx context.Context) error {
	name := fmt.Sprintf("w%d-t%d", w.id, w.next())
	ref := "main"
	if len(w.branches) > 0 && w.rng.IntN(2) == 0 {
		ref = w.ownBranch()
	}
	r, err := w.cl.CreateTag(ctx, &pb.CreateTagRequest{Parent: client.Repository(w.repo), TagId: name, Ref: ref})
	if err != nil {
		return err
	}
	w.tags[name] = r.GetTag().GetCommitId()
	w.o.add(refChange{rev: r.GetRevision(), typ: pb.RefEvent_TYPE_TAG_CREATED, repo: client.Repository(w.repo),
		ref: client.Tag(w.repo, name), commit: r.GetTag().GetCommitId()})
	return nil
}

func (w *e2eWorker) deleteTag(ctx context.Context) error {
	for name, commit := range w.tags {
		r, err := w.cl.DeleteTag(ctx, &pb.DeleteTagRequest{Name: client.Tag(w.repo, name)})
		if err != nil {
			return err
		}
		delete(w.tags, name)
		w.o.add(refChange{rev: r.GetRevision(), typ: pb.RefEvent_TYPE_TAG_DELETED, repo: client.Repository(w.repo),
			ref: client.Tag(w.repo, name), old: commit})
		return nil
	}
	return nil
}

// tagPair copies one of the worker's tags to two new ones in one etcd
// transaction, behind the server's back (no operation of the API writes
// two refs at once), so that one revision holds two ref changes.
func (w *e2eWorker) tagPair(ctx context.Context) error {
	for tag, commit := range w.tags {
		if w.tagsKey == "" {
			// The repository's partition: its only incarnation's.
			r, err := w.etcd.Get(ctx, "/graveler/repo:"+w.repo+"-", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
			if err != nil || len(r.Kvs) != 1 {
				return fmt.Errorf("partition of %s: %d keys, %v", w.repo, len(r.Kvs), err)
			}
			part, _, _ := strings.Cut(strings.TrimPrefix(string(r.Kvs[0].Key), "/graveler/"), "/")
			w.tagsKey = "/graveler/" + part + "/tags/"
		}
		r, err := w.etcd.Get(ctx, w.tagsKey+tag)
		if err != nil || len(r.Kvs) != 1 {
			return fmt.Errorf("tag %s of %s: %d keys, %v", tag, w.repo, len(r.Kvs), err)
		}
		n := w.next()
		a, b := fmt.Sprintf("w%d-p%da", w.id, n), fmt.Sprintf("w%d-p%db", w.id, n)
		tr, err := w.etcd.Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(w.tagsKey+a), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(w.tagsKey+b), "=", 0),
		).Then(clientv3.OpPut(w.tagsKey+a, string(r.Kvs[0].Value)), clientv3.OpPut(w.tagsKey+b, string(r.Kvs[0].Value))).Commit()
		if err != nil || !tr.Succeeded {
			return fmt.Errorf("tag pair in %s: %v (succeeded %v)", w.repo, err, err == nil && tr.Succeeded)
		}
		w.tags[a], w.tags[b] = commit, commit
		w.o.add(
			refChange{rev: tr.Header.Revision, typ: pb.RefEvent_TYPE_TAG_CREATED, repo: client.Repository(w.repo), ref: client.Tag(w.repo, a), commit: commit},
			refChange{rev: tr.Header.Revision, typ: pb.RefEvent_TYPE_TAG_CREATED, repo: client.Repository(w.repo), ref: client.Tag(w.repo, b), commit: commit})
		return nil
	}
	return nil
}

// scratchRepository creates a repository of this worker's, commits to
// it, and deletes it half of the time.
func (w *e2eWorker) scratchRepository(ctx context.Context) error {
	id := fmt.Sprintf("scratch-w%d-%d", w.id, w.next())
	if err := createRepository(ctx, w.cl, w.o, id); err != nil {
		return err
	}
	sw := &e2eWorker{id: w.id, cl: w.cl, etcd: w.etcd, o: w.o, rng: w.rng, repo: id, tags: map[string]string{}}
	if err := sw.commit(ctx, "main", 1, false); err != nil {
		return err
	}
	if w.rng.IntN(2) == 0 {
		return nil
	}
	r, err := w.cl.DeleteRepository(ctx, &pb.DeleteRepositoryRequest{Name: client.Repository(id)})
	if err != nil {
		return err
	}
	w.o.add(refChange{rev: r.GetRevision(), typ: pb.RefEvent_TYPE_REPOSITORY_DELETED, repo: client.Repository(id)})
	return nil
}

// createRepository creates a repository no one else writes yet, so its
// main branch read afterwards is the head its creation announced.
func createRepository(ctx context.Context, cl *client.Client, o *oracle, id string) error {
	r, err := cl.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: id})
	if err != nil {
		return err
	}
	b, err := cl.GetBranch(ctx, &pb.GetBranchRequest{Name: client.Branch(id, "main")})
	if err != nil {
		return err
	}
	o.add(refChange{rev: r.GetRevision(), typ: pb.RefEvent_TYPE_REPOSITORY_CREATED, repo: client.Repository(id),
		commit: b.GetBranch().GetCommitId(), info: r.GetRepository()})
	return nil
}

// recorder keeps what a client.Watch delivered.
type recorder struct {
	name  string
	opts  client.WatchOptions
	mu    sync.Mutex
	msgs  []*pb.WatchRefsResponse // CHANGES, BOOKMARK and INITIAL_END messages
	init  []*pb.RefEvent          // the initial state's events
	last  int64                   // every change up to it was delivered
	cuts  int                     // streams that broke and were resumed
	bad   []string                // order violations, found as messages arrive
	err   chan error
	cutCh chan struct{}
}

func (r *recorder) handle(m *client.WatchMessage) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m.InitialRestart {
		r.init = nil
	}
	switch m.GetKind() {
	case pb.WatchRefsResponse_KIND_INITIAL:
		r.init = append(r.init, m.GetEvents()...)
		return nil
	case pb.WatchRefsResponse_KIND_CHANGES:
		if m.GetRevision() <= r.last {
			r.bad = append(r.bad, fmt.Sprintf("changes at revision %d after revision %d", m.GetRevision(), r.last))
		}
		if len(m.GetEvents()) == 0 {
			r.bad = append(r.bad, fmt.Sprintf("changes at revision %d with no event", m.GetRevision()))
		}
		for _, e := range m.GetEvents() {
			if e.GetRevision() != m.GetRevision() {
				r.bad = append(r.bad, fmt.Sprintf("event of revision %d in the message of revision %d", e.GetRevision(), m.GetRevision()))
			}
		}
	case pb.WatchRefsResponse_KIND_BOOKMARK, pb.WatchRefsResponse_KIND_INITIAL_END:
		if m.GetRevision() < r.last {
			r.bad = append(r.bad, fmt.Sprintf("%v at revision %d after revision %d", m.GetKind(), m.GetRevision(), r.last))
		}
	default:
		r.bad = append(r.bad, fmt.Sprintf("message of kind %v", m.GetKind()))
	}
	if m.GetKind() != pb.WatchRefsResponse_KIND_INITIAL_END && m.GetResumeRevision() != m.GetRevision() {
		r.bad = append(r.bad, fmt.Sprintf("%v at revision %d resumes from %d", m.GetKind(), m.GetRevision(), m.GetResumeRevision()))
	}
	r.last = max(r.last, m.GetRevision())
	r.msgs = append(r.msgs, m.WatchRefsResponse)
	return nil
}

func (r *recorder) delivered() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// watch runs a client.Watch of cl into a new recorder until ctx ends.
func watch(ctx context.Context, cl *client.Client, name string, opts client.WatchOptions) *recorder {
	r := &recorder{name: name, opts: opts, err: make(chan error, 1)}
	opts.ProgressInterval = 200 * time.Millisecond
	opts.MinBackoff, opts.MaxBackoff = 20*time.Millisecond, 500*time.Millisecond
	opts.OnRetry = func(error, time.Duration) {
		r.mu.Lock()
		r.cuts++
		r.mu.Unlock()
	}
	go func() { r.err <- cl.Watch(ctx, opts, r.handle) }()
	return r
}

// changes returns the CHANGES messages, restricted to one repository
// (all for "").
func (r *recorder) changes(repo string) []*pb.WatchRefsResponse {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*pb.WatchRefsResponse
	for _, m := range r.msgs {
		if m.GetKind() != pb.WatchRefsResponse_KIND_CHANGES {
			continue
		}
		if repo == "" {
			out = append(out, m)
			continue
		}
		f := &pb.WatchRefsResponse{Kind: m.GetKind(), Revision: m.GetRevision(), ResumeRevision: m.GetResumeRevision()}
		for _, e := range m.GetEvents() {
			if e.GetRepository() == client.Repository(repo) {
				f.Events = append(f.Events, e)
			}
		}
		if len(f.Events) > 0 {
			out = append(out, f)
		}
	}
	return out
}

func after(msgs []*pb.WatchRefsResponse, rev int64) []*pb.WatchRefsResponse {
	i, _ := slices.BinarySearchFunc(msgs, rev+1, func(m *pb.WatchRefsResponse, rev int64) int { return int(m.GetRevision() - rev) })
	return msgs[i:]
}

// refState is the refs of every repository: repository name -> branch or
// tag name -> commit.
type refState map[string]map[string]string

// apply replays one event, checking that it fits the state: a move or a
// deletion names the commit the ref had, a creation a ref that did not
// exist.
func (s refState) apply(e *pb.RefEvent) error {
	repo, ref := e.GetRepository(), e.GetBranch()+e.GetTag()
	refs, exists := s[repo]
	switch e.GetType() {
	case pb.RefEvent_TYPE_REPOSITORY_CREATED, pb.RefEvent_TYPE_REPOSITORY_EXISTS:
		if exists {
			return fmt.Errorf("%v of %s, which exists", e.GetType(), repo)
		}
		s[repo] = map[string]string{}
		if e.GetType() == pb.RefEvent_TYPE_REPOSITORY_CREATED && e.GetCommitId() != "" {
			s[repo][repo+"/branches/"+e.GetRepositoryInfo().GetDefaultBranch()] = e.GetCommitId()
		}
		return nil
	case pb.RefEvent_TYPE_REPOSITORY_DELETED:
		if !exists {
			return fmt.Errorf("%v of %s, which does not exist", e.GetType(), repo)
		}
		delete(s, repo)
		return nil
	}
	if !exists {
		return fmt.Errorf("%v of %s in %s, which does not exist", e.GetType(), ref, repo)
	}
	cur, has := refs[ref]
	switch e.GetType() {
	case pb.RefEvent_TYPE_BRANCH_CREATED, pb.RefEvent_TYPE_TAG_CREATED, pb.RefEvent_TYPE_BRANCH_EXISTS, pb.RefEvent_TYPE_TAG_EXISTS:
		if has {
			return fmt.Errorf("%v of %s, which exists at %s", e.GetType(), ref, cur)
		}
		refs[ref] = e.GetCommitId()
	case pb.RefEvent_TYPE_BRANCH_MOVED:
		if !has || cur != e.GetOldCommitId() {
			return fmt.Errorf("%v of %s from %s, but it is at %q", e.GetType(), ref, e.GetOldCommitId(), cur)
		}
		refs[ref] = e.GetCommitId()
	case pb.RefEvent_TYPE_BRANCH_DELETED, pb.RefEvent_TYPE_TAG_DELETED:
		if !has || cur != e.GetOldCommitId() {
			return fmt.Errorf("%v of %s at %s, but it is at %q", e.GetType(), ref, e.GetOldCommitId(), cur)
		}
		delete(refs, ref)
	default:
		return fmt.Errorf("unexpected event %v", e)
	}
	return nil
}

func replay(t *testing.T, who string, s refState, msgs []*pb.WatchRefsResponse) refState {
	t.Helper()
	for _, m := range msgs {
		for _, e := range m.GetEvents() {
			if err := s.apply(e); err != nil {
				t.Errorf("%s: replaying revision %d: %v", who, m.GetRevision(), err)
			}
		}
	}
	return s
}

// listing reads every repository's branches and tags.
func listing(t *testing.T, ctx context.Context, cl *client.Client) refState {
	t.Helper()
	s := refState{}
	for tok := ""; ; {
		r := must[*pb.ListRepositoriesResponse](t)(cl.ListRepositories(ctx, &pb.ListRepositoriesRequest{PageToken: tok}))
		for _, repo := range r.GetRepositories() {
			s[repo.GetName()] = map[string]string{}
		}
		if tok = r.GetNextPageToken(); tok == "" {
			break
		}
	}
	for repo, refs := range s {
		for tok := ""; ; {
			r := must[*pb.ListBranchesResponse](t)(cl.ListBranches(ctx, &pb.ListBranchesRequest{Parent: repo, PageToken: tok}))
			for _, b := range r.GetBranches() {
				refs[b.GetName()] = b.GetCommitId()
			}
			if tok = r.GetNextPageToken(); tok == "" {
				break
			}
		}
		for tok := ""; ; {
			r := must[*pb.ListTagsResponse](t)(cl.ListTags(ctx, &pb.ListTagsRequest{Parent: repo, PageToken: tok}))
			for _, tg := range r.GetTags() {
				refs[tg.GetName()] = tg.GetCommitId()
			}
			if tok = r.GetNextPageToken(); tok == "" {
				break
			}
		}
	}
	return s
}

func diffStates(want, got refState) []string {
	var out []string
	for repo, refs := range want {
		g, ok := got[repo]
		if !ok {
			out = append(out, "missing repository "+repo)
			continue
		}
		for ref, c := range refs {
			if g[ref] != c {
				out = append(out, fmt.Sprintf("%s: want %s, got %q", ref, c, g[ref]))
			}
		}
		for ref, c := range g {
			if _, ok := refs[ref]; !ok {
				out = append(out, fmt.Sprintf("%s: unexpected, at %s", ref, c))
			}
		}
	}
	for repo := range got {
		if _, ok := want[repo]; !ok {
			out = append(out, "unexpected repository "+repo)
		}
	}
	slices.Sort(out)
	return out
}

func sameMessages(t *testing.T, who string, want, got []*pb.WatchRefsResponse) {
	t.Helper()
	for i := range max(len(want), len(got)) {
		switch {
		case i >= len(got):
			t.Errorf("%s: missing revision %d (and %d more)", who, want[i].GetRevision(), len(want)-i-1)
			return
		case i >= len(want):
			t.Errorf("%s: unexpected revision %d (and %d more)", who, got[i].GetRevision(), len(got)-i-1)
			return
		case !proto.Equal(want[i], got[i]):
			t.Errorf("%s: message %d: want\n%v\ngot\n%v", who, i, want[i], got[i])
			return
		}
	}
}

// firstParents reads the first-parent history of ref, newest first, up to
// n commits.
func firstParents(t *testing.T, ctx context.Context, cl *client.Client, repo, ref string, n int) []string {
	t.Helper()
	var ids []string
	for tok := ""; len(ids) < n; {
		r := must[*pb.LogResponse](t)(cl.Log(ctx, &pb.LogRequest{Repository: repo, Ref: ref, FirstParent: true, PageToken: tok, PageSize: 1000}))
		for _, c := range r.GetCommits() {
			ids = append(ids, c.GetId())
		}
		if tok = r.GetNextPageToken(); tok == "" {
			break
		}
	}
	return ids
}

// TestWatchRefsEndToEnd: two replicas on one etcd; the workers write
// through B; watchers on A (all repositories, each repository, one with the
// initial state and one from a response's revision, both started
// part-way) live through A's restart, and one on B is the reference. Each
// must deliver exactly the acknowledged changes, once, in revision order,
// and its replay must give the final listing; each branch's COMMIT moves
// must be its first-parent history.
func TestWatchRefsEndToEnd(t *testing.T) {
	etcd := etcdkvtest.NewServer(t)
	quiet := func(c *daemon.Config) {
		c.Etcd.Endpoints = etcd.Endpoints()
		c.Logger = zaptest.NewLogger(t, zaptest.Level(zapcore.WarnLevel))
	}
	srvA := daemontest.Start(t, quiet)
	srvB := daemontest.Start(t, quiet)
	clA, clB := dial(t, srvA.Addr), dial(t, srvB.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	wctx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()

	head, err := etcd.Client.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	base := head.Header.Revision
	// The reference: all repositories through B, which is not restarted.
	ref := watch(wctx, clB, "all@B", client.WatchOptions{StartRevision: base})
	recs := []*recorder{watch(wctx, clA, "all@A", client.WatchOptions{StartRevision: base})}
	for _, repo := range e2eRepos {
		recs = append(recs, watch(wctx, clA, repo+"@A", client.WatchOptions{Repository: repo, StartRevision: base}))
	}

	o := &oracle{t: t, changes: map[int64][]refChange{}, rejected: map[string]int{}}
	for _, repo := range e2eRepos {
		if err := createRepository(ctx, clB, o, repo); err != nil {
			t.Fatal(err)
		}
	}

	// Part-way: a watcher with the initial state, one from a response's
	// revision, then a restart of A (the watchers on it resume from their
	// tokens, on the replica that replaces it).
	var initial, fromRev *recorder
	var fromRevStart int64
	restarted := make(chan *daemontest.Server, 1)
	go func() {
		defer close(restarted)
		waitDone := func(n int64) bool {
			for o.done.Load() < n {
				select {
				case <-ctx.Done():
					return false
				case <-time.After(2 * time.Millisecond):
				}
			}
			return true
		}
		if !waitDone(e2eOps / 4) {
			return
		}
		initial = watch(wctx, clA, "initial@A", client.WatchOptions{InitialState: true})
		if !waitDone(e2eOps * 35 / 100) {
			return
		}
		o.mu.Lock()
		fromRevStart = o.lastRev
		o.mu.Unlock()
		fromRev = watch(wctx, clA, "from-revision@A", client.WatchOptions{StartRevision: fromRevStart})
		if !waitDone(e2eOps / 2) {
			return
		}
		if err := srvA.Stop(); err != nil {
			t.Errorf("stop A: %v", err)
		}
		if !waitDone(e2eOps * 6 / 10) {
			return
		}
		restarted <- daemontest.Start(t, func(c *daemon.Config) { quiet(c); c.ListenAddr = srvA.Addr })
	}()

	var wg sync.WaitGroup
	for i := range e2eWorkers {
		w := &e2eWorker{id: i, cl: clB, etcd: etcd.Client, o: o, rng: rand.New(rand.NewPCG(uint64(i), 7)), repo: e2eRepos[i%len(e2eRepos)], tags: map[string]string{}}
		wg.Go(func() {
			for o.attempts.Add(1) <= e2eOps && ctx.Err() == nil {
				w.step(ctx)
				o.done.Add(1)
			}
		})
	}
	wg.Wait()
	if <-restarted == nil {
		t.Fatal("replica A was not restarted")
	}
	recs = append(recs, initial, fromRev)

	// No ref changes after the workers: the listing is the state at end.
	head, err = etcd.Client.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	end := head.Header.Revision
	final := listing(t, ctx, clB)
	for _, r := range append([]*recorder{ref}, recs...) {
		for r.delivered() < end {
			select {
			case err := <-r.err:
				t.Fatalf("%s: watch ended: %v", r.name, err)
			case <-ctx.Done():
				t.Fatalf("%s: delivered up to %d, not %d", r.name, r.delivered(), end)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	stopWatches()
	for _, r := range append([]*recorder{ref}, recs...) {
		if err := <-r.err; !errors.Is(err, context.Canceled) {
			t.Errorf("%s: watch ended with %v", r.name, err)
		}
		for _, b := range r.bad {
			t.Errorf("%s: %s", r.name, b)
		}
	}
	kinds := map[string]int{}
	for _, cs := range o.changes {
		c := cs[0]
		k := strings.TrimPrefix(c.typ.String(), "TYPE_")
		if c.cause != pb.RefEvent_CAUSE_UNSPECIFIED {
			k += "/" + strings.TrimPrefix(c.cause.String(), "CAUSE_")
		}
		if c.cause == pb.RefEvent_CAUSE_MERGE && c.old == "" {
			k += "/FAST_FORWARD"
		}
		if len(cs) > 1 {
			k = fmt.Sprintf("%dx%s", len(cs), k)
		}
		kinds[k]++
	}
	t.Logf("%d acknowledged mutations %v, %d revisions %d..%d, rejected %v", len(o.changes), kinds, end-base, base, end, o.rejected)
	for _, r := range recs {
		t.Logf("%s: %d messages, %d changes, resumed %d times", r.name, len(r.msgs), len(r.changes("")), r.cuts)
	}

	// The reference against the oracle: each acknowledged mutation's change
	// exactly once, at the revision its response reported, and nothing else.
	want := o.changes
	all := ref.changes("")
	pairs := 0
	for _, m := range all {
		ws, ok := want[m.GetRevision()]
		if !ok {
			t.Errorf("revision %d: events of no acknowledged mutation: %v", m.GetRevision(), m.GetEvents())
			continue
		}
		delete(want, m.GetRevision())
		if len(ws) > 1 {
			pairs++
		}
		if len(m.GetEvents()) != len(ws) {
			t.Errorf("revision %d: %d events, want %d: %v", m.GetRevision(), len(m.GetEvents()), len(ws), m.GetEvents())
			continue
		}
		for _, e := range m.GetEvents() {
			got := changeOf(e)
			i := slices.IndexFunc(ws, func(w refChange) bool { return w.ref == got.ref && w.repo == got.repo })
			if i < 0 {
				t.Errorf("revision %d: event %v of no acknowledged mutation (want %v)", got.rev, got, ws)
				continue
			}
			w := ws[i]
			if w.old == "" {
				w.old = got.old
			}
			if w.typ != got.typ || w.commit != got.commit || w.old != got.old || w.cause != got.cause ||
				!proto.Equal(w.record, got.record) || !proto.Equal(w.info, got.info) {
				t.Errorf("revision %d: event %v (%v %v), want %v (%v %v)", got.rev, got, got.record, got.info, w, w.record, w.info)
			}
		}
	}
	if pairs == 0 {
		t.Error("no revision with two ref changes was watched")
	}
	for _, w := range want {
		t.Errorf("acknowledged mutation with no event: %v", w)
	}
	if d := diffStates(final, replay(t, ref.name, refState{}, all)); len(d) > 0 {
		t.Errorf("%s: replay differs from the listing: %v", ref.name, d)
	}
	if ref.cuts != 0 {
		t.Errorf("%s: the stream on the replica that kept running broke %d times", ref.name, ref.cuts)
	}

	// Every watcher against the reference.
	for _, r := range recs {
		if r.cuts == 0 {
			t.Errorf("%s: never cut off by the restart", r.name)
		}
		got := r.changes("")
		switch {
		case r.opts.InitialState:
			end := slices.IndexFunc(r.msgs, func(m *pb.WatchRefsResponse) bool { return m.GetKind() == pb.WatchRefsResponse_KIND_INITIAL_END })
			if end < 0 {
				t.Errorf("%s: no INITIAL_END", r.name)
				continue
			}
			at := r.msgs[end].GetRevision()
			s := refState{}
			for _, e := range r.init {
				if e.GetRevision() != at {
					t.Errorf("%s: initial event of revision %d in the state at %d", r.name, e.GetRevision(), at)
				}
				if err := s.apply(e); err != nil {
					t.Errorf("%s: initial state: %v", r.name, err)
				}
			}
			if d := diffStates(replay(t, ref.name, refState{}, all[:len(all)-len(after(all, at))]), s); len(d) > 0 {
				t.Errorf("%s: the initial state at %d differs from the reference's replay: %v", r.name, at, d)
			}
			sameMessages(t, r.name, after(all, at), got)
			if d := diffStates(final, replay(t, r.name, s, got)); len(d) > 0 {
				t.Errorf("%s: replay differs from the listing: %v", r.name, d)
			}
		case r == fromRev:
			sameMessages(t, r.name, after(all, fromRevStart), got)
			s := replay(t, ref.name, refState{}, all[:len(all)-len(after(all, fromRevStart))])
			if d := diffStates(final, replay(t, r.name, s, got)); len(d) > 0 {
				t.Errorf("%s: replay differs from the listing: %v", r.name, d)
			}
		default:
			repo := r.opts.Repository
			sameMessages(t, r.name, ref.changes(repo), r.changes(""))
			want := final
			if repo != "" {
				want = refState{client.Repository(repo): final[client.Repository(repo)]}
			}
			if d := diffStates(want, replay(t, r.name, refState{}, got)); len(d) > 0 {
				t.Errorf("%s: replay differs from the listing: %v", r.name, d)
			}
		}
	}

	// Each branch's moves chain (the replay checked old = previous new);
	// walking back from its head, its COMMIT and merge-commit moves are its
	// first-parent history.
	type hop struct{ old, new string }
	history := map[string][]*pb.RefEvent{}
	for _, m := range all {
		for _, e := range m.GetEvents() {
			switch e.GetType() {
			case pb.RefEvent_TYPE_BRANCH_CREATED:
				history[e.GetBranch()] = []*pb.RefEvent{e}
			case pb.RefEvent_TYPE_BRANCH_MOVED:
				history[e.GetBranch()] = append(history[e.GetBranch()], e)
			case pb.RefEvent_TYPE_REPOSITORY_CREATED:
				b := e.GetRepository() + "/branches/" + e.GetRepositoryInfo().GetDefaultBranch()
				history[b] = []*pb.RefEvent{e}
			}
		}
	}
	checked := 0
	for repo, refs := range final {
		for name, head := range refs {
			if !strings.Contains(name, "/branches/") {
				continue
			}
			h := history[name]
			var walk []hop
			for i := len(h) - 1; i > 0; i-- {
				e := h[i]
				first := e.GetCommit().GetParents()
				isCommit := e.GetCause() == pb.RefEvent_CAUSE_COMMIT ||
					e.GetCause() == pb.RefEvent_CAUSE_MERGE && len(first) == 2 && first[0] == e.GetOldCommitId()
				if !isCommit {
					break
				}
				walk = append(walk, hop{e.GetOldCommitId(), e.GetCommitId()})
			}
			if len(h) == 0 || h[len(h)-1].GetCommitId() != head {
				t.Errorf("%s: at %s, but its events %v end elsewhere", name, head, h)
				continue
			}
			log := firstParents(t, ctx, clB, repo, strings.TrimPrefix(name, repo+"/branches/"), len(walk)+1)
			if len(log) < len(walk)+1 || log[0] != head {
				t.Errorf("%s: at %s, but its first-parent log is %v (%d moves to match)", name, head, log[:min(len(log), 3)], len(walk))
				continue
			}
			for i, mv := range walk {
				if log[i] != mv.new || log[i+1] != mv.old {
					t.Errorf("%s: move %d back from the head, %s->%s, is not in the first-parent log (%s, %s)", name, i, mv.old, mv.new, log[i], log[i+1])
					break
				}
				checked++
			}
		}
	}
	for _, m := range all {
		for _, e := range m.GetEvents() {
			if c := e.GetCommit(); e.GetCause() == pb.RefEvent_CAUSE_COMMIT && (c.GetId() != e.GetCommitId() || len(c.GetParents()) != 1 || c.GetParents()[0] != e.GetOldCommitId()) {
				t.Errorf("revision %d: COMMIT move %s->%s carries commit %s with parents %v", e.GetRevision(), e.GetOldCommitId(), e.GetCommitId(), c.GetId(), c.GetParents())
			}
		}
	}
	t.Logf("%d moves matched against first-parent logs", checked)
}
