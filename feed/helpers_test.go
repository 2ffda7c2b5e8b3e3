package feed_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"graveler/cleaner"
	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/feed"
	"graveler/graveler"
	"graveler/graveler/gravelertest"
	"graveler/graveler/ref/refpb"
	"graveler/keys"
)

// waitBound only keeps a broken test from hanging: nothing is asserted on
// how long anything takes.
const waitBound = 60 * time.Second

type env struct {
	t     testing.TB
	ctx   context.Context
	srv   *etcdkvtest.Server
	store *etcdkv.Store
	feed  *feed.Feed
	svc   *graveler.Graveler
}

func newEnv(t testing.TB, cfg feed.Config) *env {
	t.Helper()
	srv := etcdkvtest.NewServer(t)
	return newEnvOn(t, srv, cfg)
}

func newEnvOn(t testing.TB, srv *etcdkvtest.Server, cfg feed.Config) *env {
	t.Helper()
	store := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(t)
	}
	f := feed.New(store, cfg)
	t.Cleanup(func() { f.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*waitBound)
	t.Cleanup(cancel)
	return &env{t: t, ctx: ctx, srv: srv, store: store, feed: f, svc: gravelertest.New(t, store, gravelertest.Options{})}
}

// rev is etcd's current revision.
func (e *env) rev() int64 {
	e.t.Helper()
	resp, err := e.srv.Client.Get(e.ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.Header.Revision
}

func (e *env) subscribe(req feed.Request) *feed.Subscription {
	e.t.Helper()
	if req.ProgressInterval == 0 {
		req.ProgressInterval = feed.MinProgressInterval
	}
	s, err := e.feed.Subscribe(e.ctx, req)
	if err != nil {
		e.t.Fatalf("subscribe %+v: %v", req, err)
	}
	e.t.Cleanup(s.Close)
	return s
}

func (e *env) next(s *feed.Subscription) *feed.Message {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, waitBound)
	defer cancel()
	m, err := s.Next(ctx)
	if err != nil {
		e.t.Fatalf("next: %v", err)
	}
	return m
}

// until reads s until a message resumes at rev or later and returns the
// CHANGES messages read, checking that revisions only grow.
func (e *env) until(s *feed.Subscription, rev int64) []*feed.Message {
	e.t.Helper()
	var out []*feed.Message
	last := int64(-1)
	for {
		m := e.next(s)
		if m.Kind != feed.KindChanges && m.Kind != feed.KindBookmark {
			e.t.Fatalf("unexpected %s message: %+v", m.Kind, m)
		}
		if m.Revision < last || (m.Kind == feed.KindChanges && m.Revision == last) {
			e.t.Fatalf("revision %d after %d", m.Revision, last)
		}
		if m.ResumeRevision != m.Revision {
			e.t.Fatalf("%s message at revision %d resumes at %d", m.Kind, m.Revision, m.ResumeRevision)
		}
		last = m.Revision
		if m.Kind == feed.KindChanges {
			for _, ev := range m.Events {
				if ev.Revision != m.Revision {
					e.t.Fatalf("event %s at revision %d in a message of revision %d", show(ev), ev.Revision, m.Revision)
				}
			}
			out = append(out, m)
		}
		if m.ResumeRevision >= rev {
			return out
		}
	}
}

// events flattens messages into their events.
func events(ms []*feed.Message) []feed.Event {
	var out []feed.Event
	for _, m := range ms {
		out = append(out, m.Events...)
	}
	return out
}

// show is an event as the tests compare it.
func show(e feed.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", e.Type, e.Repository)
	if e.Branch != "" {
		fmt.Fprintf(&b, " branch=%s", e.Branch)
	}
	if e.Tag != "" {
		fmt.Fprintf(&b, " tag=%s", e.Tag)
	}
	if e.OldCommitID != "" {
		fmt.Fprintf(&b, " old=%s", short(e.OldCommitID))
	}
	if e.CommitID != "" {
		fmt.Fprintf(&b, " new=%s", short(e.CommitID))
	}
	if e.Cause != graveler.ChangeNone {
		fmt.Fprintf(&b, " cause=%s", causeNames[e.Cause])
	}
	if e.Commit != nil {
		fmt.Fprintf(&b, " commit=%q", e.Commit.Message)
	}
	if e.RepositoryInfo != nil {
		fmt.Fprintf(&b, " default=%s", e.RepositoryInfo.DefaultBranchID)
	}
	return b.String()
}

var causeNames = map[graveler.BranchChange]string{
	graveler.ChangeCreate: "CREATE", graveler.ChangeCommit: "COMMIT", graveler.ChangeMerge: "MERGE",
	graveler.ChangeRevert: "REVERT", graveler.ChangeCherryPick: "CHERRY_PICK", graveler.ChangeReset: "RESET",
	graveler.ChangeResetHard: "RESET_HARD", graveler.ChangeRestore: "RESTORE",
}

func short(id graveler.CommitID) string {
	if len(id) > 8 {
		return string(id[:8])
	}
	return string(id)
}

func shows(evs []feed.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = show(e)
	}
	return out
}

func sameLines(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// head is a branch's head commit.
func (e *env) head(repo graveler.RepositoryID, branch graveler.BranchID) graveler.CommitID {
	e.t.Helper()
	b, err := e.svc.GetBranch(e.ctx, repo, branch)
	if err != nil {
		e.t.Fatal(err)
	}
	return b.CommitID
}

func (e *env) createRepo(id graveler.RepositoryID) {
	e.t.Helper()
	if _, err := e.svc.CreateRepository(e.ctx, id, gravelertest.Namespace(), "main"); err != nil {
		e.t.Fatal(err)
	}
}

// commit stages one entry on branch and commits it.
func (e *env) commit(repo graveler.RepositoryID, branch graveler.BranchID, key, msg string) graveler.CommitID {
	e.t.Helper()
	if err := e.svc.Set(e.ctx, repo, branch, graveler.Key(key), graveler.Value{Identity: []byte(key + msg), Data: []byte(msg)}, graveler.SetOptions{}); err != nil {
		e.t.Fatal(err)
	}
	id, err := e.svc.Commit(e.ctx, repo, branch, graveler.CommitParams{Committer: "tester", Message: msg})
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

// clean runs the cleaner once, with a clock past every creation timeout.
func (e *env) clean() {
	e.t.Helper()
	c := cleaner.New(e.store, cleaner.Config{Now: func() time.Time { return time.Now().Add(24 * time.Hour) }})
	if _, err := c.RunOnce(e.ctx); err != nil {
		e.t.Fatal(err)
	}
}

// rawChanges reads etcd's history of (from, to] with a raw watch of its
// own: every head of a branch or tag that was created, changed or deleted
// in a repository partition, as "revision repo kind/name commit" ("" for a
// deletion). It is the feed's independent referee in tests whose
// repositories all exist before from.
func (e *env) rawChanges(from, to int64) []string {
	e.t.Helper()
	w := clientv3.NewWatcher(e.srv.Client)
	defer w.Close()
	ctx, cancel := context.WithTimeout(e.ctx, waitBound)
	defer cancel()
	ch := w.Watch(ctx, e.store.Prefix()+"/repo:", clientv3.WithPrefix(), clientv3.WithRev(from+1), clientv3.WithPrevKV())
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var out []string
	for {
		select {
		case <-tick.C:
			_ = w.RequestProgress(ctx)
		case resp, ok := <-ch:
			if !ok || resp.Err() != nil {
				e.t.Fatalf("raw watch: %v %v", resp.Err(), ctx.Err())
			}
			if resp.IsProgressNotify() && resp.Header.Revision >= to {
				return out
			}
			for _, ev := range resp.Events {
				if ev.Kv.ModRevision > to {
					return out
				}
				part, key, ok := e.store.ParseRawKey(ev.Kv.Key)
				if !ok {
					continue
				}
				repo, _, err := keys.ParseRepositoryPartition(part)
				if err != nil {
					continue
				}
				head := func(data []byte) string {
					if data == nil {
						return ""
					}
					if strings.HasPrefix(string(key), keys.BranchesPrefix) {
						var b refpb.Branch
						if err := proto.Unmarshal(data, &b); err != nil {
							e.t.Fatal(err)
						}
						return b.GetCommitId()
					}
					var tg refpb.Tag
					if err := proto.Unmarshal(data, &tg); err != nil {
						e.t.Fatal(err)
					}
					return tg.GetCommitId()
				}
				if !strings.HasPrefix(string(key), keys.BranchesPrefix) && !strings.HasPrefix(string(key), keys.TagsPrefix) {
					continue
				}
				var now, prev []byte
				if ev.Type == mvccpb.PUT {
					now = ev.Kv.Value
				}
				if ev.PrevKv != nil {
					prev = ev.PrevKv.Value
				}
				if ev.Type == mvccpb.PUT && !ev.IsCreate() && head(now) == head(prev) {
					continue
				}
				out = append(out, fmt.Sprintf("%d %s %s %s", ev.Kv.ModRevision, repo, key, head(now)))
			}
		}
	}
}

// project is the feed's messages as rawChanges shows etcd's history.
func project(ms []*feed.Message) []string {
	var out []string
	for _, m := range ms {
		for _, ev := range m.Events {
			var key string
			switch ev.Type {
			case feed.BranchCreated, feed.BranchMoved, feed.BranchDeleted:
				if ev.Type == feed.BranchMoved && ev.OldCommitID == ev.CommitID {
					continue
				}
				key = keys.BranchesPrefix + string(ev.Branch)
			case feed.TagCreated, feed.TagDeleted:
				key = keys.TagsPrefix + string(ev.Tag)
			default:
				continue
			}
			out = append(out, fmt.Sprintf("%d %s %s %s", ev.Revision, ev.Repository, key, ev.CommitID))
		}
	}
	return out
}

// lines is messages as the tests compare them: revision and events.
func lines(ms []*feed.Message) []string {
	var out []string
	for _, m := range ms {
		for _, ev := range m.Events {
			out = append(out, fmt.Sprintf("%d %s", m.Revision, show(ev)))
		}
	}
	return out
}

// churner makes random ref changes in one repository.
type churner struct {
	e        *env
	rnd      *rand.Rand
	repo     graveler.RepositoryID
	branches []graveler.BranchID
	tags     []graveler.TagID
	n        int
}

func (e *env) churner(repo graveler.RepositoryID, seed uint64) *churner {
	return &churner{e: e, rnd: rand.New(rand.NewPCG(seed, 1)), repo: repo, branches: []graveler.BranchID{"main"}}
}

// step makes one random change.
func (c *churner) step() error {
	ctx, svc := c.e.ctx, c.e.svc
	c.n++
	pick := func() graveler.BranchID { return c.branches[c.rnd.IntN(len(c.branches))] }
	switch op := c.rnd.IntN(7); {
	case op == 0:
		b := graveler.BranchID(fmt.Sprintf("b%d", c.n))
		if _, err := svc.CreateBranch(ctx, c.repo, b, graveler.Ref(pick())); err != nil {
			return fmt.Errorf("create branch: %w", err)
		}
		c.branches = append(c.branches, b)
	case op == 1 && len(c.branches) > 1:
		i := 1 + c.rnd.IntN(len(c.branches)-1)
		if err := svc.DeleteBranch(ctx, c.repo, c.branches[i]); err != nil {
			return fmt.Errorf("delete branch: %w", err)
		}
		c.branches = append(c.branches[:i], c.branches[i+1:]...)
	case op == 2:
		tg := graveler.TagID(fmt.Sprintf("t%d", c.n))
		if _, err := svc.CreateTag(ctx, c.repo, tg, graveler.Ref(pick())); err != nil {
			return fmt.Errorf("create tag: %w", err)
		}
		c.tags = append(c.tags, tg)
	case op == 3 && len(c.tags) > 0:
		i := c.rnd.IntN(len(c.tags))
		if err := svc.DeleteTag(ctx, c.repo, c.tags[i]); err != nil {
			return fmt.Errorf("delete tag: %w", err)
		}
		c.tags = append(c.tags[:i], c.tags[i+1:]...)
	default:
		b := pick()
		k := graveler.Key(fmt.Sprintf("k%d", c.n))
		if err := svc.Set(ctx, c.repo, b, k, graveler.Value{Identity: k, Data: k}, graveler.SetOptions{}); err != nil {
			return fmt.Errorf("set: %w", err)
		}
		if _, err := svc.Commit(ctx, c.repo, b, graveler.CommitParams{Committer: "churn", Message: string(k)}); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
	}
	return nil
}

func (c *churner) steps(n int) {
	c.e.t.Helper()
	for range n {
		if err := c.step(); err != nil {
			c.e.t.Fatal(err)
		}
	}
}

// waitHub waits until the hub has every change up to rev.
func (e *env) waitHub(rev int64) {
	e.t.Helper()
	deadline := time.Now().Add(waitBound)
	for e.feed.HubRevision() < rev {
		if time.Now().After(deadline) {
			e.t.Fatalf("the hub did not reach revision %d (at %d)", rev, e.feed.HubRevision())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newServer(t *testing.T) *etcdkvtest.Server { return etcdkvtest.NewServer(t) }

func catchUpsMetric() prometheus.Collector { return feed.CatchUpsMetric }
func slowMetric() prometheus.Collector     { return feed.SlowMetric }
func restartsMetric(reason string) prometheus.Collector {
	return feed.RestartsMetric.WithLabelValues(reason)
}
