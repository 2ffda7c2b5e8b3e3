package feed_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"graveler/feed"
	"graveler/graveler"
)

// A subscription from any revision delivers exactly what a subscription
// from an earlier one delivered after it: no gap, no duplicate, whether it
// starts in the hub's memory or before it (a catch-up that pauses for its
// slow buffer and then joins the hub). The full recording itself matches
// etcd's history read with a raw watch.
func TestWatchResumeFromAnyRevision(t *testing.T) {
	e := newEnv(t, feed.Config{RingSize: 8, CatchUpBuffer: 2})
	e.createRepo("repo1")
	e.createRepo("repo2")
	from := e.rev()
	full := e.subscribe(feed.Request{StartRevision: from})
	c1, c2 := e.churner("repo1", 1), e.churner("repo2", 2)
	var all []*feed.Message
	for range 15 {
		c1.steps(1)
		c2.steps(1)
		all = append(all, e.until(full, e.rev())...)
	}
	to := e.rev()
	sameLines(t, project(all), e.rawChanges(from, to))
	last := all[len(all)-1].Revision
	for r := from; r < last; r++ {
		s := e.subscribe(feed.Request{StartRevision: r})
		got := e.until(s, last)
		want := slices.DeleteFunc(slices.Clone(all), func(m *feed.Message) bool { return m.Revision <= r })
		if g, w := lines(got), lines(want); !slices.Equal(g, w) {
			t.Fatalf("from revision %d:\n%v\nwant\n%v", r, g, w)
		}
		s.Close()
	}
}

// A subscription that starts before the hub's memory catches up from
// etcd's history while changes go on, then continues in the hub with no
// gap and no duplicate.
func TestWatchCatchUpJoinsHub(t *testing.T) {
	e := newEnv(t, feed.Config{RingSize: 8, CatchUpBuffer: 2})
	e.createRepo("rep")
	from := e.rev()
	c := e.churner("rep", 3)
	c.steps(30)
	e.waitHub(e.rev())
	before := testutil.ToFloat64(catchUpsMetric())
	s := e.subscribe(feed.Request{StartRevision: from})
	if !s.CatchingUp() {
		t.Fatalf("revision %d is before the hub's memory (from %d) but the subscription did not catch up", from, e.feed.RingStart())
	}
	if got := testutil.ToFloat64(catchUpsMetric()); got != before+1 {
		t.Fatalf("catch-ups metric %v, want %v", got, before+1)
	}
	done := make(chan error, 1)
	go func() {
		for range 20 {
			if err := c.step(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var got []*feed.Message
	var last int64
	for writing := true; writing || s.CatchingUp(); {
		ms := e.until(s, e.rev())
		got = append(got, ms...)
		if len(ms) > 0 {
			last = ms[len(ms)-1].Revision
		}
		if writing {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				writing = false
			default:
			}
		} else {
			c.steps(1)
		}
	}
	c.steps(3)
	to := e.rev()
	got = append(got, e.until(s, to)...)
	if len(got) == 0 || got[len(got)-1].Revision <= last {
		t.Fatal("nothing delivered after joining the hub")
	}
	sameLines(t, project(got), e.rawChanges(from, to))
}

// A subscriber that stops reading falls out of the hub's memory and is
// told where to resume; resuming there loses and repeats nothing.
func TestWatchSlowConsumerResumes(t *testing.T) {
	e := newEnv(t, feed.Config{RingSize: 4})
	e.createRepo("rep")
	from := e.rev()
	s := e.subscribe(feed.Request{StartRevision: from})
	c := e.churner("rep", 4)
	c.steps(3)
	read := e.until(s, e.rev())
	resume := read[len(read)-1].ResumeRevision
	for i := range 12 {
		e.commit("rep", "main", fmt.Sprintf("unread%d", i), "unread")
	}
	e.waitHub(e.rev())
	before := testutil.ToFloat64(slowMetric())
	_, err := s.Next(e.ctx)
	var slow *feed.TooSlowError
	// Revisions with nothing in scope may follow the last message.
	if !errors.As(err, &slow) || !errors.Is(err, feed.ErrTooSlow) || slow.ResumeRevision < resume {
		t.Fatalf("got %v, want a *TooSlowError resuming at %d or later", err, resume)
	}
	if _, again := s.Next(e.ctx); again != err {
		t.Fatalf("the error did not stick: %v", again)
	}
	if got := testutil.ToFloat64(slowMetric()); got != before+1 {
		t.Fatalf("slow consumer metric %v, want %v", got, before+1)
	}
	r := e.subscribe(feed.Request{StartRevision: slow.ResumeRevision})
	c.steps(2)
	to := e.rev()
	got := append(read, e.until(r, to)...)
	sameLines(t, project(got), e.rawChanges(from, to))
}

// A start revision older than etcd's compaction (and than the hub's
// memory) is refused with the compaction revision; the compaction
// revision itself can still be served.
func TestWatchCompactedStart(t *testing.T) {
	srv := newServer(t)
	for i := range 5 {
		if _, err := srv.Client.Put(t.Context(), fmt.Sprintf("/elsewhere/%d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := srv.Client.Get(t.Context(), "/elsewhere/0")
	if err != nil {
		t.Fatal(err)
	}
	compact := resp.Header.Revision - 1
	if _, err := srv.Client.Compact(t.Context(), compact); err != nil {
		t.Fatal(err)
	}
	e := newEnvOn(t, srv, feed.Config{})
	e.waitHub(compact + 1)
	_, err = e.feed.Subscribe(e.ctx, feed.Request{StartRevision: compact - 1})
	var ce *feed.CompactedError
	if !errors.As(err, &ce) || !errors.Is(err, feed.ErrCompacted) || ce.CompactRevision != compact || ce.Revision != compact-1 {
		t.Fatalf("got %v, want a *CompactedError at %d", err, compact)
	}
	s := e.subscribe(feed.Request{StartRevision: compact})
	e.createRepo("rep")
	got := shows(events(e.until(s, e.rev())))
	sameLines(t, got, []string{fmt.Sprintf("REPOSITORY_CREATED rep new=%s default=main", short(e.head("rep", "main")))})

	_, err = e.feed.Subscribe(e.ctx, feed.Request{StartRevision: e.rev() + 1000})
	var fe *feed.FutureRevisionError
	if !errors.As(err, &fe) || !errors.Is(err, feed.ErrFutureRevision) {
		t.Fatalf("a start revision in the future: %v", err)
	}
}

// When the hub itself falls behind etcd's compaction (its watch broke and
// could not resume in time), its subscribers end with the compaction and
// the hub starts afresh for new ones.
func TestWatchHubFallsBehindCompaction(t *testing.T) {
	e := newEnv(t, feed.Config{})
	s := e.subscribe(feed.Request{})
	entered, release := make(chan struct{}), make(chan struct{})
	e.feed.SetRewatchHook(func() {
		close(entered)
		<-release
	})
	before := testutil.ToFloat64(restartsMetric("compacted"))
	e.feed.BreakWatch()
	<-entered
	e.feed.SetRewatchHook(nil)
	e.createRepo("missed")
	compact := e.rev()
	if _, err := e.srv.Client.Compact(e.ctx, compact); err != nil {
		t.Fatal(err)
	}
	close(release)
	for {
		m, err := s.Next(e.ctx)
		if err != nil {
			var ce *feed.CompactedError
			if !errors.As(err, &ce) || ce.CompactRevision != compact {
				t.Fatalf("got %v, want a *CompactedError at %d", err, compact)
			}
			break
		}
		if m.Kind != feed.KindBookmark {
			t.Fatalf("the hub delivered %+v across the compaction", m)
		}
	}
	if got := testutil.ToFloat64(restartsMetric("compacted")); got != before+1 {
		t.Fatalf("compacted restarts %v, want %v", got, before+1)
	}
	n := e.subscribe(feed.Request{})
	e.createRepo("seen")
	got := shows(events(e.until(n, e.rev())))
	sameLines(t, got, []string{fmt.Sprintf("REPOSITORY_CREATED seen new=%s default=main", short(e.head("seen", "main")))})
}

// A broken hub watch (a lost leader, a broken connection) is resumed
// after the last revision it saw: subscribers see nothing of it.
func TestWatchHubWatchBrokenIsInvisible(t *testing.T) {
	e := newEnv(t, feed.Config{})
	e.createRepo("rep")
	from := e.rev()
	s := e.subscribe(feed.Request{StartRevision: from})
	before := testutil.ToFloat64(restartsMetric("error"))
	c := e.churner("rep", 5)
	for range 10 {
		c.steps(2)
		e.feed.BreakWatch()
	}
	to := e.rev()
	got := e.until(s, to)
	sameLines(t, project(got), e.rawChanges(from, to))
	if testutil.ToFloat64(restartsMetric("error")) <= before {
		t.Fatal("the hub's watch was never restarted")
	}
}

// An initial state read while changes go on, followed by the changes
// after it, explains every ref of the final state: each change applies to
// the state before it (a move or deletion starts from the head the state
// has), and the result is what the service lists.
func TestWatchInitialStateUnderWrites(t *testing.T) {
	for _, scope := range []graveler.RepositoryID{"", "repo1"} {
		t.Run("scope="+string(scope), func(t *testing.T) {
			e := newEnv(t, feed.Config{PageSize: 3})
			c1, c2 := e.churner("repo1", 6), e.churner("repo2", 7)
			e.createRepo("repo1")
			e.createRepo("repo2")
			c1.steps(10)
			c2.steps(10)
			done := make(chan error, 1)
			go func() {
				for i := range 30 {
					if err := c1.step(); err != nil {
						done <- err
						return
					}
					if err := c2.step(); err != nil {
						done <- err
						return
					}
					if i == 10 {
						if _, err := e.svc.CreateRepository(e.ctx, "repo3", "mem://repo3", "main"); err != nil {
							done <- err
							return
						}
					}
				}
				done <- e.svc.DeleteRepository(e.ctx, "repo2")
			}()
			s := e.subscribe(feed.Request{InitialState: true, Repository: scope})
			state := map[string]string{} // "repo kind/name" -> commit; "repo" -> "" for a repository
			var snap int64
			pages := 0
			for {
				m := e.next(s)
				if m.Kind == feed.KindInitialEnd {
					if m.Revision != snap && pages > 0 || m.ResumeRevision != m.Revision || len(m.Events) != 0 {
						t.Fatalf("initial end %+v after pages at revision %d", m, snap)
					}
					snap = m.Revision
					break
				}
				if m.Kind != feed.KindInitial || m.ResumeRevision != 0 || len(m.Events) == 0 || len(m.Events) > 3 || (pages > 0 && m.Revision != snap) {
					t.Fatalf("initial page %d: %+v", pages, m)
				}
				snap = m.Revision
				pages++
				for _, ev := range m.Events {
					if ev.Revision != snap {
						t.Fatalf("%s at revision %d in a snapshot at %d", show(ev), ev.Revision, snap)
					}
					apply(t, state, ev)
				}
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			for _, ev := range events(e.until(s, e.rev())) {
				apply(t, state, ev)
			}
			want := e.listState(scope)
			if g, w := dump(state), dump(want); !slices.Equal(g, w) {
				t.Fatalf("state from the feed:\n%v\nlisted:\n%v", g, w)
			}
		})
	}
}

// apply folds one event into state, checking it applies to it.
func apply(t *testing.T, state map[string]string, ev feed.Event) {
	t.Helper()
	repo := string(ev.Repository)
	key := repo + " " + string(ev.Branch)
	if ev.Tag != "" {
		key = repo + " tags/" + string(ev.Tag)
	} else {
		key = repo + " branches/" + string(ev.Branch)
	}
	_, repoKnown := state[repo]
	cur, known := state[key]
	switch ev.Type {
	case feed.RepositoryExists, feed.RepositoryCreated:
		if repoKnown {
			t.Fatalf("%s: the repository is known", show(ev))
		}
		state[repo] = ""
		if ev.Type == feed.RepositoryCreated {
			state[repo+" branches/"+string(ev.RepositoryInfo.DefaultBranchID)] = string(ev.CommitID)
		}
		return
	case feed.RepositoryDeleted:
		for k := range state {
			if k == repo || len(k) > len(repo) && k[:len(repo)+1] == repo+" " {
				delete(state, k)
			}
		}
		return
	}
	if !repoKnown {
		t.Fatalf("%s: unknown repository", show(ev))
	}
	switch ev.Type {
	case feed.BranchExists, feed.BranchCreated, feed.TagExists, feed.TagCreated:
		if known {
			t.Fatalf("%s: exists already at %s", show(ev), cur)
		}
		state[key] = string(ev.CommitID)
	case feed.BranchMoved:
		if !known || cur != string(ev.OldCommitID) {
			t.Fatalf("%s: the state has %q (%v)", show(ev), cur, known)
		}
		state[key] = string(ev.CommitID)
	case feed.BranchDeleted, feed.TagDeleted:
		if !known || cur != string(ev.OldCommitID) {
			t.Fatalf("%s: the state has %q (%v)", show(ev), cur, known)
		}
		delete(state, key)
	default:
		t.Fatalf("unexpected %s", show(ev))
	}
}

func dump(m map[string]string) []string {
	var out []string
	for k, v := range m {
		out = append(out, k+" = "+v)
	}
	slices.Sort(out)
	return out
}

// listState is the refs the service lists, as apply builds them.
func (e *env) listState(scope graveler.RepositoryID) map[string]string {
	e.t.Helper()
	out := map[string]string{}
	for r, err := range e.svc.ListRepositories(e.ctx, graveler.ListOptions{}) {
		if err != nil {
			e.t.Fatal(err)
		}
		if scope != "" && r.RepositoryID != scope {
			continue
		}
		repo := string(r.RepositoryID)
		out[repo] = ""
		for b, err := range e.svc.ListBranches(e.ctx, r.RepositoryID, graveler.ListBranchesOptions{}) {
			if err != nil {
				e.t.Fatal(err)
			}
			out[repo+" branches/"+string(b.BranchID)] = string(b.CommitID)
		}
		for tg, err := range e.svc.ListTags(e.ctx, r.RepositoryID, graveler.ListOptions{}) {
			if err != nil {
				e.t.Fatal(err)
			}
			out[repo+" tags/"+string(tg.TagID)] = string(tg.CommitID)
		}
	}
	return out
}

// With nothing to deliver, bookmarks come, and their revision moves on
// with changes out of scope (etcd's progress notifications vouch for it).
func TestWatchBookmarks(t *testing.T) {
	e := newEnv(t, feed.Config{})
	start := e.rev()
	s := e.subscribe(feed.Request{Repository: "quiet"})
	m := e.next(s)
	if m.Kind != feed.KindBookmark || m.Revision < start || m.ResumeRevision != m.Revision {
		t.Fatalf("first message %+v, want a bookmark at %d or later", m, start)
	}
	e.createRepo("busy")
	e.commit("busy", "main", "k", "v")
	busy := e.rev()
	for m.Revision < busy {
		m = e.next(s)
		if m.Kind != feed.KindBookmark {
			t.Fatalf("%+v: only bookmarks were due", m)
		}
	}
	e.createRepo("quiet")
	got := shows(events(e.until(s, e.rev())))
	sameLines(t, got, []string{fmt.Sprintf("REPOSITORY_CREATED quiet new=%s default=main", short(e.head("quiet", "main")))})
}

func TestWatchInvalidRequests(t *testing.T) {
	e := newEnv(t, feed.Config{})
	for _, req := range []feed.Request{
		{InitialState: true, StartRevision: 3},
		{StartRevision: -1},
		{ProgressInterval: feed.MinProgressInterval / 2},
		{ProgressInterval: feed.MaxProgressInterval + 1},
		{Repository: "Not Valid"},
	} {
		_, err := e.feed.Subscribe(e.ctx, req)
		if !errors.Is(err, feed.ErrInvalidRequest) || !errors.Is(err, graveler.ErrInvalidArgument) {
			t.Errorf("%+v: %v", req, err)
		}
	}
}

// Close ends every subscription, live, catching up or reading its initial
// state, with ErrClosed, and no subscription starts after it.
func TestWatchClose(t *testing.T) {
	e := newEnv(t, feed.Config{RingSize: 1})
	e.createRepo("rep")
	from := e.rev()
	e.churner("rep", 8).steps(6)
	e.waitHub(e.rev())
	live := e.subscribe(feed.Request{})
	catching := e.subscribe(feed.Request{StartRevision: from})
	if !catching.CatchingUp() {
		t.Fatal("not catching up")
	}
	initial := e.subscribe(feed.Request{InitialState: true})
	e.next(initial)
	if err := e.feed.Close(); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*feed.Subscription{"live": live, "catching up": catching, "initial": initial} {
		var err error
		for err == nil {
			_, err = s.Next(e.ctx)
		}
		if !errors.Is(err, feed.ErrClosed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := e.feed.Subscribe(e.ctx, feed.Request{}); !errors.Is(err, feed.ErrClosed) {
		t.Errorf("subscribe after close: %v", err)
	}
}
