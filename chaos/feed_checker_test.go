//go:build chaos

package chaos

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	pb "graveler/api/graveler/v1"
	"graveler/client"
)

// tagRef names a tag the workload created or deleted.
type tagRef struct{ repo, tag string }

func (l *ledger) tag(t tagRef) *lifecycle {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.tags[t]
	if s == nil {
		s = &lifecycle{}
		l.tags[t] = s
	}
	return s
}

// feedWatcher follows WatchRefs for every repository through a whole
// run, the way a consumer would: through the client helper (which resumes
// on the same replica after UNAVAILABLE, RESOURCE_EXHAUSTED or a broken
// connection), and, around it, moving to the next replica with the last
// token after a few seconds or when a watch ends with an error. The move
// between replicas happens whether or not a fault hit the stream, so
// resuming on another replica (from its ring or from etcd's history) is
// exercised in every run. It records every message and checks the
// protocol as messages arrive; checkFeed checks what they say.
type feedWatcher struct {
	clients []*client.Client
	rng     *rand.Rand // used by run only
	cancel  context.CancelFunc
	done    chan struct{}
	stopped sync.Once

	mu sync.Mutex
	// initial is the initial state's refs once INITIAL_END came (at
	// initialRev); partial collects the pages before it.
	initial, partial []*pb.RefEvent
	initialRev       int64
	// changes are the CHANGES messages, in the order received.
	changes []*pb.WatchRefsResponse
	// last is the last resume revision delivered: the token.
	last int64
	// Counts: messages of each kind, events, the helper's retries (by
	// code), moves to the next replica, initial states restarted.
	messages, bookmarks, initialPages, events int
	retries                                   map[string]int
	switches, initialRestarts                 int
	// problems are protocol violations and watch failures (the first
	// maxProblems of nProblems).
	problems  []string
	nProblems int
}

const maxProblems = 20

// startFeedWatcher starts watching every repository through clients,
// from the initial state. finish (or the end of the test) stops it.
func startFeedWatcher(t *testing.T, clients []*client.Client, rng *rand.Rand) *feedWatcher {
	ctx, cancel := context.WithCancel(context.Background())
	w := &feedWatcher{clients: clients, rng: rng, cancel: cancel, done: make(chan struct{}), retries: map[string]int{}}
	go w.run(ctx)
	t.Cleanup(w.stop)
	return w
}

func (w *feedWatcher) stop() {
	w.stopped.Do(func() {
		w.cancel()
		<-w.done
	})
}

func (w *feedWatcher) problem(format string, args ...any) {
	w.nProblems++
	if len(w.problems) < maxProblems {
		w.problems = append(w.problems, fmt.Sprintf(format, args...))
	}
}

func (w *feedWatcher) run(ctx context.Context) {
	defer close(w.done)
	for i := 0; ; i++ {
		cl := w.clients[i%len(w.clients)]
		// Not a deadline: gRPC would hand it to the server, whose
		// DEADLINE_EXCEEDED can reach the helper before its own context
		// ends, and the helper rightly does not resume from that.
		session, cancel := context.WithCancel(ctx)
		timer := time.AfterFunc(time.Duration(1000+w.rng.IntN(5000))*time.Millisecond, cancel)
		opts := client.WatchOptions{
			ProgressInterval: 500 * time.Millisecond,
			MinBackoff:       50 * time.Millisecond,
			MaxBackoff:       time.Second,
			OnRetry: func(err error, _ time.Duration) {
				w.mu.Lock()
				w.retries[code(err).String()]++
				w.mu.Unlock()
			},
		}
		w.mu.Lock()
		if w.initialRev == 0 {
			// A new watch sends the whole initial state again.
			opts.InitialState, w.partial = true, nil
		} else {
			opts.StartRevision = w.last
		}
		w.mu.Unlock()
		err := cl.Watch(session, opts, w.handle)
		sessionOver := session.Err() != nil
		timer.Stop()
		cancel()
		if ctx.Err() != nil {
			return
		}
		w.mu.Lock()
		w.switches++
		if !sessionOver {
			// Not one of the errors the helper resumes from: a consumer
			// would have to handle it, so it is a finding.
			w.problem("WATCH FAILED: the watch through replica %d ended with %v", i%len(w.clients), err)
		}
		w.mu.Unlock()
		if !sessionOver {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// handle records one message and checks its place in the stream:
// revisions strictly increase across CHANGES messages (a repeat or a
// step back is a duplicate), a bookmark never goes back, and the initial
// state comes first.
func (w *feedWatcher) handle(m *client.WatchMessage) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.messages++
	if m.InitialRestart {
		w.partial = nil
		w.initialRestarts++
	}
	rev, resume := m.GetRevision(), m.GetResumeRevision()
	switch m.GetKind() {
	case pb.WatchRefsResponse_KIND_INITIAL:
		w.initialPages++
		if w.initialRev != 0 {
			w.problem("PROTOCOL: an INITIAL page at revision %d after the initial state ended at %d", rev, w.initialRev)
		}
		if resume != 0 {
			w.problem("PROTOCOL: an INITIAL page with resume revision %d", resume)
		}
		w.partial = append(w.partial, m.GetEvents()...)
	case pb.WatchRefsResponse_KIND_INITIAL_END:
		if w.initialRev != 0 {
			w.problem("PROTOCOL: INITIAL_END at revision %d after the initial state ended at %d", rev, w.initialRev)
		}
		if resume != rev {
			w.problem("PROTOCOL: INITIAL_END at revision %d with resume revision %d", rev, resume)
		}
		w.initial, w.partial, w.initialRev, w.last = w.partial, nil, rev, rev
	case pb.WatchRefsResponse_KIND_CHANGES:
		switch {
		case w.initialRev == 0:
			w.problem("PROTOCOL: CHANGES at revision %d before the initial state ended", rev)
		case rev <= w.last:
			w.problem("DUPLICATE: CHANGES at revision %d after revision %d was delivered", rev, w.last)
		}
		if resume != rev || len(m.GetEvents()) == 0 {
			w.problem("PROTOCOL: CHANGES at revision %d with resume revision %d and %d events", rev, resume, len(m.GetEvents()))
		}
		for _, e := range m.GetEvents() {
			if e.GetRevision() != rev {
				w.problem("PROTOCOL: an event of revision %d in the CHANGES message of revision %d", e.GetRevision(), rev)
			}
		}
		w.events += len(m.GetEvents())
		w.changes = append(w.changes, m.WatchRefsResponse)
		w.last = max(w.last, rev)
	case pb.WatchRefsResponse_KIND_BOOKMARK:
		w.bookmarks++
		switch {
		case w.initialRev == 0:
			w.problem("PROTOCOL: BOOKMARK at revision %d before the initial state ended", rev)
		case rev < w.last:
			w.problem("PROTOCOL: BOOKMARK at revision %d after revision %d was delivered", rev, w.last)
		}
		if resume != rev {
			w.problem("PROTOCOL: BOOKMARK at revision %d with resume revision %d", rev, resume)
		}
		w.last = max(w.last, rev)
	default:
		w.problem("PROTOCOL: a message of kind %v at revision %d", m.GetKind(), rev)
	}
	return nil
}

// waitFor waits until the watcher has delivered every change up to rev
// (bookmarks move it on when nothing changes).
func (w *feedWatcher) waitFor(ctx context.Context, rev int64) error {
	for {
		w.mu.Lock()
		last := w.last
		w.mu.Unlock()
		if last >= rev {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the watcher reached revision %d, not %d: %w", last, rev, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// summary is the counts for the test log.
func (w *feedWatcher) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	retries := 0
	for _, n := range w.retries {
		retries += n
	}
	return fmt.Sprintf("messages=%d changes=%d bookmarks=%d initial-pages=%d initial-refs=%d events=%d resumes=%d (%v) replica-moves=%d initial-restarts=%d",
		w.messages, len(w.changes), w.bookmarks, w.initialPages, len(w.initial), w.events, retries, w.retries, w.switches, w.initialRestarts)
}

// refs is a set of refs: repository -> its branches' heads and tags'
// commits.
type refs map[string]*repoRefs

type repoRefs struct{ branches, tags map[string]string }

func (r refs) repo(name string) *repoRefs {
	if r[name] == nil {
		r[name] = &repoRefs{branches: map[string]string{}, tags: map[string]string{}}
	}
	return r[name]
}

func (r refs) count() (repos, branches, tags int) {
	for _, rr := range r {
		repos++
		branches += len(rr.branches)
		tags += len(rr.tags)
	}
	return
}

// refNames splits an event's names into ids.
func refNames(e *pb.RefEvent) (repo, branch, tag string) {
	repo = strings.TrimPrefix(e.GetRepository(), "repositories/")
	_, branch, _ = strings.Cut(e.GetBranch(), "/branches/")
	_, tag, _ = strings.Cut(e.GetTag(), "/tags/")
	return repo, branch, tag
}

func describe(e *pb.RefEvent) string {
	repo, branch, tag := refNames(e)
	name := repo
	switch {
	case branch != "":
		name += " branch " + branch
	case tag != "":
		name += " tag " + tag
	}
	return fmt.Sprintf("%s %s at revision %d (old %q, new %q, cause %s)",
		strings.TrimPrefix(e.GetType().String(), "TYPE_"), name, e.GetRevision(), e.GetOldCommitId(), e.GetCommitId(),
		strings.TrimPrefix(e.GetCause().String(), "CAUSE_"))
}

// replayFeed applies the initial state and then the changes, in order,
// and returns the refs they lead to. Every event must fit the refs before
// it: a creation finds nothing, a move or deletion finds the ref at its
// old commit (so each branch's moves chain), and nothing happens in a
// repository that does not exist. chained counts the moves and deletions
// whose old commit was checked.
func replayFeed(initial []*pb.RefEvent, changes []*pb.WatchRefsResponse) (st refs, chained int, problems []string) {
	st = refs{}
	bad := func(e *pb.RefEvent, format string, args ...any) {
		if len(problems) < maxProblems {
			problems = append(problems, fmt.Sprintf("FEED CHAIN: %s: %s", describe(e), fmt.Sprintf(format, args...)))
		}
	}
	for _, e := range initial {
		repo, branch, tag := refNames(e)
		switch e.GetType() {
		case pb.RefEvent_TYPE_REPOSITORY_EXISTS:
			st.repo(repo)
		case pb.RefEvent_TYPE_BRANCH_EXISTS:
			st.repo(repo).branches[branch] = e.GetCommitId()
		case pb.RefEvent_TYPE_TAG_EXISTS:
			st.repo(repo).tags[tag] = e.GetCommitId()
		default:
			bad(e, "not an event of an initial state")
		}
	}
	for _, m := range changes {
		for _, e := range m.GetEvents() {
			repo, branch, tag := refNames(e)
			r := st[repo]
			if r == nil && e.GetType() != pb.RefEvent_TYPE_REPOSITORY_CREATED {
				bad(e, "the repository does not exist")
				continue
			}
			switch e.GetType() {
			case pb.RefEvent_TYPE_REPOSITORY_CREATED:
				if r != nil {
					bad(e, "the repository exists already")
				}
				delete(st, repo)
				r = st.repo(repo)
				if e.GetCommitId() != "" {
					r.branches[e.GetRepositoryInfo().GetDefaultBranch()] = e.GetCommitId()
				}
			case pb.RefEvent_TYPE_REPOSITORY_DELETED:
				delete(st, repo)
			case pb.RefEvent_TYPE_BRANCH_CREATED:
				if head, ok := r.branches[branch]; ok {
					bad(e, "the branch exists already at %s", head)
				}
				r.branches[branch] = e.GetCommitId()
			case pb.RefEvent_TYPE_BRANCH_MOVED, pb.RefEvent_TYPE_BRANCH_DELETED:
				head, ok := r.branches[branch]
				switch {
				case !ok:
					bad(e, "the branch does not exist")
				case head != e.GetOldCommitId():
					bad(e, "the branch's head was %s", head)
				default:
					chained++
				}
				if e.GetType() == pb.RefEvent_TYPE_BRANCH_DELETED {
					delete(r.branches, branch)
				} else {
					r.branches[branch] = e.GetCommitId()
				}
			case pb.RefEvent_TYPE_TAG_CREATED:
				if c, ok := r.tags[tag]; ok {
					bad(e, "the tag exists already at %s", c)
				}
				r.tags[tag] = e.GetCommitId()
			case pb.RefEvent_TYPE_TAG_DELETED:
				c, ok := r.tags[tag]
				switch {
				case !ok:
					bad(e, "the tag does not exist")
				case c != e.GetOldCommitId():
					bad(e, "the tag was at %s", c)
				default:
					chained++
				}
				delete(r.tags, tag)
			default:
				bad(e, "not a change")
			}
		}
	}
	return st, chained, problems
}

// readRefs lists every repository, branch and tag through cl.
func readRefs(ctx context.Context, cl *client.Client) (refs, error) {
	st := refs{}
	var names []string
	token := ""
	for {
		resp, err := retry(ctx, func(ctx context.Context) (*pb.ListRepositoriesResponse, error) {
			return cl.ListRepositories(ctx, &pb.ListRepositoriesRequest{PageSize: 1000, PageToken: token})
		})
		if err != nil {
			return nil, fmt.Errorf("list repositories: %w", err)
		}
		for _, r := range resp.GetRepositories() {
			names = append(names, strings.TrimPrefix(r.GetName(), "repositories/"))
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	for _, repo := range names {
		r := st.repo(repo)
		for token := ""; ; {
			resp, err := retry(ctx, func(ctx context.Context) (*pb.ListBranchesResponse, error) {
				return cl.ListBranches(ctx, &pb.ListBranchesRequest{Parent: client.Repository(repo), PageSize: 1000, PageToken: token})
			})
			if err != nil {
				return nil, fmt.Errorf("list the branches of %s: %w", repo, err)
			}
			for _, b := range resp.GetBranches() {
				_, id, _ := strings.Cut(b.GetName(), "/branches/")
				r.branches[id] = b.GetCommitId()
			}
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
		for token := ""; ; {
			resp, err := retry(ctx, func(ctx context.Context) (*pb.ListTagsResponse, error) {
				return cl.ListTags(ctx, &pb.ListTagsRequest{Parent: client.Repository(repo), PageSize: 1000, PageToken: token})
			})
			if err != nil {
				return nil, fmt.Errorf("list the tags of %s: %w", repo, err)
			}
			for _, tg := range resp.GetTags() {
				_, id, _ := strings.Cut(tg.GetName(), "/tags/")
				r.tags[id] = tg.GetCommitId()
			}
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
	}
	return st, nil
}

// diffRefs lists how got (the feed's replay) differs from want (what the
// service lists).
func diffRefs(want, got refs) []string {
	var out []string
	names := map[string]bool{}
	for k := range want {
		names[k] = true
	}
	for k := range got {
		names[k] = true
	}
	for _, repo := range slices.Sorted(maps.Keys(names)) {
		w, g := want[repo], got[repo]
		switch {
		case w == nil:
			out = append(out, fmt.Sprintf("repository %s: in the feed's replay, not listed", repo))
			continue
		case g == nil:
			out = append(out, fmt.Sprintf("repository %s: listed, not in the feed's replay", repo))
			continue
		}
		for _, d := range []struct {
			kind      string
			want, got map[string]string
		}{{"branch", w.branches, g.branches}, {"tag", w.tags, g.tags}} {
			for name, c := range d.want {
				if gc, ok := d.got[name]; !ok {
					out = append(out, fmt.Sprintf("%s %s %s at %s: listed, not in the feed's replay", repo, d.kind, name, c))
				} else if gc != c {
					out = append(out, fmt.Sprintf("%s %s %s: listed at %s, the feed's replay says %s", repo, d.kind, name, c, gc))
				}
			}
			for name, gc := range d.got {
				if _, ok := d.want[name]; !ok {
					out = append(out, fmt.Sprintf("%s %s %s at %s: in the feed's replay, not listed", repo, d.kind, name, gc))
				}
			}
		}
	}
	return out
}

// currentRevision asks etcd for its current revision, retrying while the
// cluster does not answer.
func currentRevision(ctx context.Context, cli *clientv3.Client) (int64, error) {
	var rev int64
	err := until(ctx, func(ctx context.Context) error {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		resp, err := cli.Get(cctx, "/", clientv3.WithCountOnly())
		if err == nil {
			rev = resp.Header.Revision
		}
		return err
	})
	return rev, err
}

// finish waits until the watcher has delivered every change up to etcd's
// current revision, stops it, and reports what it saw wrong on the way.
func (w *feedWatcher) finish(ctx context.Context, t *testing.T, cli *clientv3.Client) {
	t.Helper()
	// Bookmarks come every half second: a watcher still short of etcd's
	// revision after two minutes is stuck.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rev, err := currentRevision(ctx, cli)
	if err != nil {
		t.Errorf("feed: etcd's revision: %v", err)
	} else if err := w.waitFor(ctx, rev); err != nil {
		t.Errorf("FEED STALLED: %v", err)
	}
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.problems {
		t.Errorf("%s", p)
	}
	if w.nProblems > len(w.problems) {
		t.Errorf("... and %d more feed problems", w.nProblems-len(w.problems))
	}
}

// checkFeed ends the watcher of a chaos run and checks its events against
// the final refs read through cl, and against the ledger: no duplicate
// (revisions strictly increase, checked as messages came) and no gap (the
// replay of every event gives exactly the refs the service lists, each
// branch's moves chain, and every acknowledged ref mutation is an event
// at the revision its response reported). A mutation that failed may or
// may not be there, but every event must be one the workload attempted.
// Run it once nothing mutates refs any more.
func checkFeed(ctx context.Context, t *testing.T, w *feedWatcher, cli *clientv3.Client, cl *client.Client, l *ledger) {
	final, err := readRefs(ctx, cl)
	if err != nil {
		t.Errorf("feed check: %v", err)
		return
	}
	// The refs were read before etcd's revision is taken, so the watcher
	// has delivered everything they show once it reaches that revision.
	w.finish(ctx, t, cli)
	w.mu.Lock()
	initial, initialRev, changes := w.initial, w.initialRev, w.changes
	w.mu.Unlock()
	if initialRev == 0 {
		t.Errorf("FEED: the initial state never ended")
		return
	}
	replayed, chained, problems := replayFeed(initial, changes)
	for _, p := range problems {
		t.Errorf("%s", p)
	}
	diff := diffRefs(final, replayed)
	for i, d := range diff {
		if i == maxProblems {
			t.Errorf("... and %d more differences", len(diff)-i)
			break
		}
		t.Errorf("FEED REPLAY DIFFERS: %s", d)
	}

	byRev := map[int64][]*pb.RefEvent{}
	for _, m := range changes {
		byRev[m.GetRevision()] = append(byRev[m.GetRevision()], m.GetEvents()...)
	}
	acked, before := checkAcked(t, l, byRev, initialRev)
	explained := checkExplained(t, l, changes)

	repos, branches, tags := final.count()
	t.Logf("feed watcher: %s; %d moves and deletions chained, %d acknowledged mutations found at their revision (%d before the watch began), %d events explained; final refs: %d repositories, %d branches, %d tags",
		w.summary(), chained, acked, before, explained, repos, branches, tags)
	fmt.Printf("CHAOS-FEED %s chained=%d acked-at-revision=%d explained=%d repositories=%d branches=%d tags=%d\n",
		w.summary(), chained, acked, explained, repos, branches, tags)
	if acked == 0 {
		t.Errorf("FEED: no acknowledged mutation was checked against the feed: the check proved nothing")
	}
}

// checkAcked: every acknowledged mutation that reported a revision after
// initialRev is an event of its kind on its ref at exactly that revision.
func checkAcked(t *testing.T, l *ledger, byRev map[int64][]*pb.RefEvent, initialRev int64) (found, before int) {
	type want struct {
		typ          pb.RefEvent_Type
		repo, branch string
		tag, commit  string
		rev          int64
	}
	var wants []want
	l.mu.Lock()
	for b, as := range l.commits {
		for _, a := range as {
			if a.acked && a.rev > 0 {
				wants = append(wants, want{typ: pb.RefEvent_TYPE_BRANCH_MOVED, repo: b.repo, branch: b.branch, commit: a.id, rev: a.rev})
			}
		}
	}
	add := func(s *lifecycle, created, deleted want) {
		if s.createRev > 0 {
			created.rev = s.createRev
			wants = append(wants, created)
		}
		if s.deleteRev > 0 {
			deleted.rev = s.deleteRev
			wants = append(wants, deleted)
		}
	}
	for r, s := range l.repos {
		add(s, want{typ: pb.RefEvent_TYPE_REPOSITORY_CREATED, repo: r}, want{typ: pb.RefEvent_TYPE_REPOSITORY_DELETED, repo: r})
	}
	for b, s := range l.branches {
		add(s, want{typ: pb.RefEvent_TYPE_BRANCH_CREATED, repo: b.repo, branch: b.branch}, want{typ: pb.RefEvent_TYPE_BRANCH_DELETED, repo: b.repo, branch: b.branch})
	}
	for tg, s := range l.tags {
		add(s, want{typ: pb.RefEvent_TYPE_TAG_CREATED, repo: tg.repo, tag: tg.tag}, want{typ: pb.RefEvent_TYPE_TAG_DELETED, repo: tg.repo, tag: tg.tag})
	}
	l.mu.Unlock()
	slices.SortFunc(wants, func(a, b want) int { return cmp.Compare(a.rev, b.rev) })
	missing := 0
	for _, w := range wants {
		if w.rev <= initialRev {
			before++
			continue
		}
		ok := false
		for _, e := range byRev[w.rev] {
			repo, branch, tag := refNames(e)
			if e.GetType() == w.typ && repo == w.repo && branch == w.branch && tag == w.tag && (w.commit == "" || e.GetCommitId() == w.commit) {
				ok = true
				break
			}
		}
		if ok {
			found++
			continue
		}
		if missing++; missing <= maxProblems {
			var there []string
			for _, e := range byRev[w.rev] {
				there = append(there, describe(e))
			}
			t.Errorf("FEED GAP: acknowledged %s of %s %s%s (commit %q) reported revision %d; the feed has there: %v",
				strings.TrimPrefix(w.typ.String(), "TYPE_"), w.repo, w.branch, w.tag, w.commit, w.rev, there)
		}
	}
	if missing > maxProblems {
		t.Errorf("... and %d more acknowledged mutations missing from the feed", missing-maxProblems)
	}
	return found, before
}

// checkExplained: every event is of a mutation the workload attempted (or
// of the checker's final commits), with the cause that mutation gives.
func checkExplained(t *testing.T, l *ledger, changes []*pb.WatchRefsResponse) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	attempted := map[branchRef]map[string]bool{}
	for b, as := range l.commits {
		attempted[b] = map[string]bool{}
		for _, a := range as {
			attempted[b][a.message] = true
		}
	}
	explained, bad := 0, 0
	for _, m := range changes {
		for _, e := range m.GetEvents() {
			repo, branch, tag := refNames(e)
			b := branchRef{repo, branch}
			var why string
			switch e.GetType() {
			case pb.RefEvent_TYPE_REPOSITORY_CREATED:
				if l.repos[repo] == nil {
					why = "no such repository was created"
				}
			case pb.RefEvent_TYPE_REPOSITORY_DELETED:
				if s := l.repos[repo]; s == nil || !s.deleteAttempted {
					why = "no such repository was deleted"
				}
			case pb.RefEvent_TYPE_BRANCH_CREATED:
				if l.branches[b] == nil || e.GetCause() != pb.RefEvent_CAUSE_CREATE {
					why = "no such branch was created"
				}
			case pb.RefEvent_TYPE_BRANCH_DELETED:
				if s := l.branches[b]; s == nil || !s.deleteAttempted {
					why = "no such branch was deleted"
				}
			case pb.RefEvent_TYPE_BRANCH_MOVED:
				c := e.GetCommit()
				switch {
				case e.GetCause() != pb.RefEvent_CAUSE_COMMIT || c.GetId() != e.GetCommitId():
					why = fmt.Sprintf("only commits move branches, and this event's commit is %q", c.GetId())
				case c.GetCommitter() == "checker" && c.GetMessage() == "chaos final":
				case !attempted[b][c.GetMessage()]:
					why = fmt.Sprintf("commit %q was not attempted on this branch", c.GetMessage())
				}
			case pb.RefEvent_TYPE_TAG_CREATED:
				if l.tags[tagRef{repo, tag}] == nil {
					why = "no such tag was created"
				}
			case pb.RefEvent_TYPE_TAG_DELETED:
				if s := l.tags[tagRef{repo, tag}]; s == nil || !s.deleteAttempted {
					why = "no such tag was deleted"
				}
			default:
				why = "not a change"
			}
			if why == "" {
				explained++
				continue
			}
			if bad++; bad <= maxProblems {
				t.Errorf("FEED UNEXPLAINED: %s: %s", describe(e), why)
			}
		}
	}
	if bad > maxProblems {
		t.Errorf("... and %d more unexplained events", bad-maxProblems)
	}
	return explained
}
