//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	pb "graveler/api/graveler/v1"
	"graveler/client"
	"graveler/graveler"
	"graveler/graveler/ref"
	"graveler/keys"
	"graveler/server/daemon"
)

// TestFeedMemberFaults follows one gravelerd's change feed while the etcd
// member its watch is connected to is killed with SIGKILL and restarted,
// then, wherever the watch went, frozen with SIGSTOP for a few seconds;
// then gravelerd itself is restarted (the watcher resumes with its token
// on the new process, which catches up from etcd's history); then the
// two other members are frozen together, so that the watch's member
// loses its leader and etcd ends the watch (the hub must re-establish
// it); then both single-member faults again. etcd's client moves a watch
// whose member dies to another member by itself, so only the lost leader
// makes the hub's own re-watch run; the test checks that it did. A client creates, commits on, tags and deletes
// branches meanwhile. An independent etcd watch of the repository
// partitions, on one member through a client of its own, says what the
// feed must have delivered: the branch and tag events of its revisions,
// read by the feed's documented rules. Every one must come once, at its
// revision, and nothing else; and the initial state plus the changes
// must give the refs the service lists at the end.
//
// etcd's etcd_debugging_mvcc_watcher_total gauge, read from each member's
// /metrics, says where the feed's watch is: gravelerd holds one etcd
// watch (the feed's hub) besides short-lived ones, and the raw watch is
// the only other.
func TestFeedMemberFaults(t *testing.T) {
	const repo = "feed-a"
	rng := rand.New(rand.NewPCG(*seed, 93))
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	base := map[*member]int{}
	for _, m := range c.members {
		n, err := c.watchers(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		base[m] = n
	}
	rawMember := c.members[0]
	rawCli, err := clientv3.New(clientv3.Config{Endpoints: []string{rawMember.clientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer rawCli.Close()

	g := newGravelerd(t, c.endpoints(), zap.NewNop(), "g0")
	if err := g.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.stop() })
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	cl, err := client.Dial(dctx, g.addr)
	dcancel()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ensureRepository(t, cl, repo)

	fw := startFeedWatcher(t, []*client.Client{cl}, rng)
	var start int64
	for start == 0 {
		fw.mu.Lock()
		start = fw.initialRev
		fw.mu.Unlock()
		if ctx.Err() != nil {
			t.Fatalf("no initial state: %v", ctx.Err())
		}
		time.Sleep(50 * time.Millisecond)
	}
	raw := startRawWatch(ctx, rawCli, daemon.DefaultEtcdPrefix, start)
	defer raw.stop()

	load, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	w := &worker{id: 0, c: cl, l: newLedger(), rng: rand.New(rand.NewPCG(*seed, 94))}
	wg.Go(func() { feedLoad(load, w, repo) })

	// hostOf finds the member holding gravelerd's feed watch: the one
	// with a watcher besides the raw watch, the same in three readings in
	// a row (a catch-up or a write's settling watch is short-lived).
	hostOf := func() *member {
		var last *member
		seen := 0
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
			var hosts []*member
			for _, m := range c.running() {
				n, err := c.watchers(ctx, m)
				if err != nil {
					continue
				}
				if m == rawMember {
					n--
				}
				if n-base[m] >= 1 {
					hosts = append(hosts, m)
				}
			}
			if len(hosts) != 1 || hosts[0] != last {
				last, seen = nil, 0
				if len(hosts) == 1 {
					last, seen = hosts[0], 1
				}
				continue
			}
			if seen++; seen == 3 {
				return last
			}
		}
		t.Fatalf("no etcd member is seen to hold the feed's watch (watchers besides the raw watch, over a baseline of %v)", base)
		return nil
	}
	var killed, stopped, leaderless []string
	restarts0, catchUps0 := feedMetric("graveler_feed_watch_restarts_total"), feedMetric("graveler_feed_catchups_total")
	for _, f := range []string{"kill", "stop", "gravelerd", "quorum", "kill", "stop"} {
		time.Sleep(2 * time.Second)
		switch f {
		case "gravelerd":
			t.Logf("fault: restart gravelerd")
			if err := g.stop(); err != nil {
				t.Logf("gravelerd stopped with %v", err)
			}
			if err := g.start(); err != nil {
				t.Fatal(err)
			}
		case "quorum":
			// The feed's member loses its leader: etcd ends every watch
			// that requires one, so the hub's own watch breaks and is
			// re-established from its last revision.
			m := hostOf()
			before := feedMetric("graveler_feed_watch_restarts_total")
			var others []*member
			for _, o := range c.members {
				if o != m {
					others = append(others, o)
				}
			}
			// etcd ends them once a member has had no leader for three
			// election timeouts in a row (about 2.5s here).
			t.Logf("fault: SIGSTOP etcd %s and %s for 5s: %s, which holds the feed's watch, has no leader", others[0].name, others[1].name, m.name)
			for _, o := range others {
				if err := c.pause(o); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(5 * time.Second)
			for _, o := range others {
				if err := c.resume(o); err != nil {
					t.Fatal(err)
				}
			}
			if n := feedMetric("graveler_feed_watch_restarts_total") - before; n < 1 {
				t.Errorf("the hub's etcd watch did not restart when its member %s lost its leader: the fault missed it", m.name)
			}
			leaderless = append(leaderless, m.name)
		case "kill":
			m := hostOf()
			t.Logf("fault: kill -9 etcd %s, which holds the feed's watch; restart after 2s", m.name)
			c.kill(m)
			time.Sleep(2 * time.Second)
			if err := c.restart(m); err != nil {
				t.Fatal(err)
			}
			killed = append(killed, m.name)
		case "stop":
			m := hostOf()
			t.Logf("fault: SIGSTOP etcd %s, which holds the feed's watch, for 4s", m.name)
			if err := c.pause(m); err != nil {
				t.Fatal(err)
			}
			time.Sleep(4 * time.Second)
			if err := c.resume(m); err != nil {
				t.Fatal(err)
			}
			stopped = append(stopped, m.name)
		}
	}
	time.Sleep(2 * time.Second)
	stopLoad()
	wg.Wait()

	final, err := readRefs(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	end, err := currentRevision(ctx, c.admin)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.waitFor(ctx, end); err != nil {
		t.Fatalf("raw watch: %v", err)
	}
	fw.finish(ctx, t, c.admin)

	fw.mu.Lock()
	initial, changes := fw.initial, fw.changes
	fw.mu.Unlock()
	var got []string
	for _, m := range changes {
		for _, e := range m.GetEvents() {
			if e.GetRevision() <= end {
				got = append(got, eventKey(e))
			}
		}
	}
	want, err := raw.expected(repo, end)
	if err != nil {
		t.Fatal(err)
	}
	missing, extra := diffSeq(want, got)
	for i, k := range missing {
		if i == maxProblems {
			t.Errorf("... and %d more", len(missing)-i)
			break
		}
		t.Errorf("FEED GAP: the raw etcd watch has %s; the feed does not", k)
	}
	for i, k := range extra {
		if i == maxProblems {
			t.Errorf("... and %d more", len(extra)-i)
			break
		}
		t.Errorf("FEED EXTRA: the feed has %s; the raw etcd watch does not", k)
	}
	replayed, chained, problems := replayFeed(initial, changes)
	for _, p := range problems {
		t.Errorf("%s", p)
	}
	for _, d := range diffRefs(final, replayed) {
		t.Errorf("FEED REPLAY DIFFERS: %s", d)
	}
	t.Logf("feed watcher: %s; raw watch: %d events in (%d, %d], %d ref events; feed: %d ref events, %d moves and deletions chained; etcd members killed while holding the feed's watch: %v, stopped: %v, left without a leader: %v; the hub's etcd watch restarted %.0f times, %.0f catch-ups; workload: %d calls, %d failed",
		fw.summary(), raw.count(), start, end, len(want), len(got), chained, killed, stopped, leaderless,
		feedMetric("graveler_feed_watch_restarts_total")-restarts0, feedMetric("graveler_feed_catchups_total")-catchUps0,
		w.l.ops.Load(), w.l.failed.Load())
	fmt.Printf("FEED-MEMBER-FAULTS raw-ref-events=%d feed-ref-events=%d missing=%d extra=%d killed=%v stopped=%v %s\n",
		len(want), len(got), len(missing), len(extra), killed, stopped, fw.summary())
	if len(want) == 0 || len(killed) == 0 || len(stopped) == 0 {
		t.Errorf("no ref events or no fault on the feed's member: the run proved nothing")
	}
}

// feedLoad makes ref changes in repo until ctx ends: each round creates
// a branch, commits on it and on main, tags the branch (every other tag
// is deleted again) and deletes the branch (every third one stays).
// Failures are ignored: the raw watch says what happened.
func feedLoad(ctx context.Context, w *worker, repo string) {
	main := branchRef{repo, "main"}
	for n := 0; ctx.Err() == nil; n++ {
		b := branchRef{repo, fmt.Sprintf("f%04d", n)}
		if w.createBranch(ctx, b) != nil {
			continue
		}
		_ = w.put(ctx, b, fmt.Sprintf("f/%d", n), 1)
		_ = w.commit(ctx, b)
		_ = w.put(ctx, main, fmt.Sprintf("m/%d", n), 1)
		_ = w.commit(ctx, main)
		tag := tagRef{repo, fmt.Sprintf("k%04d", n)}
		if w.createTag(ctx, tag, b.branch) == nil && n%2 == 1 {
			_ = w.deleteTag(ctx, tag)
		}
		if n%3 != 0 {
			_ = w.deleteBranch(ctx, b)
		}
	}
}

// eventKey names a branch or tag event for comparison.
func eventKey(e *pb.RefEvent) string {
	_, branch, tag := refNames(e)
	return fmt.Sprintf("%d %s %s%s %s->%s", e.GetRevision(), strings.TrimPrefix(e.GetType().String(), "TYPE_"), branch, tag, e.GetOldCommitId(), e.GetCommitId())
}

// diffSeq returns what is in want and not in got, and the reverse, as
// multisets (a duplicate in got is extra).
func diffSeq(want, got []string) (missing, extra []string) {
	n := map[string]int{}
	for _, k := range want {
		n[k]++
	}
	for _, k := range got {
		n[k]--
	}
	for _, k := range want {
		if n[k] > 0 {
			missing = append(missing, k)
			n[k]--
		}
	}
	for _, k := range got {
		if n[k] < 0 {
			extra = append(extra, k)
			n[k]++
		}
	}
	return missing, extra
}

// feedMetric sums the feed's counter name over its labels, from this
// process's registry (gravelerd runs in it).
func feedMetric(name string) float64 {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return -1
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// watchers reads m's etcd_debugging_mvcc_watcher_total gauge.
func (c *cluster) watchers(ctx context.Context, m *member) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.clientURL+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, "etcd_debugging_mvcc_watcher_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("etcd %s: no etcd_debugging_mvcc_watcher_total in /metrics", m.name)
}

// rawWatch is a plain etcd watch of every repository partition under
// root, with previous values: what the feed reads, without the feed.
type rawWatch struct {
	root   string
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	events []*clientv3.Event
	// covered: every event up to it has arrived (a response's header, or a
	// progress notification).
	covered int64
	err     error
}

func startRawWatch(ctx context.Context, cli *clientv3.Client, root string, after int64) *rawWatch {
	ctx, cancel := context.WithCancel(ctx)
	r := &rawWatch{root: root, cancel: cancel, done: make(chan struct{}), covered: after}
	w := clientv3.NewWatcher(cli)
	ch := w.Watch(ctx, root+"/repo:", clientv3.WithRange(root+"/repo;"), clientv3.WithRev(after+1), clientv3.WithPrevKV())
	go func() {
		defer close(r.done)
		defer w.Close()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_ = w.RequestProgress(ctx)
			case resp, ok := <-ch:
				r.mu.Lock()
				switch {
				case !ok:
					r.err = fmt.Errorf("raw watch closed")
				case resp.Err() != nil:
					r.err = resp.Err()
				default:
					r.events = append(r.events, resp.Events...)
					r.covered = max(r.covered, resp.Header.Revision)
				}
				failed := r.err != nil
				r.mu.Unlock()
				if failed {
					return
				}
			}
		}
	}()
	return r
}

func (r *rawWatch) stop() {
	r.cancel()
	<-r.done
}

func (r *rawWatch) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

func (r *rawWatch) waitFor(ctx context.Context, rev int64) error {
	for {
		r.mu.Lock()
		covered, err := r.covered, r.err
		r.mu.Unlock()
		switch {
		case err != nil:
			return err
		case covered >= rev:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("reached revision %d, not %d: %w", covered, rev, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// expected reads the raw events of repo's partitions up to rev into the
// branch and tag events the feed documents (feed's package doc): a
// record's first version is a creation, a deletion a deletion, a branch
// rewrite a move when it names a change or another head, and a tag
// rewrite to another commit a deletion and a creation.
func (r *rawWatch) expected(repo string, rev int64) ([]string, error) {
	r.mu.Lock()
	evs := slices.Clone(r.events)
	r.mu.Unlock()
	var out []string
	for _, ev := range evs {
		if ev.Kv.ModRevision > rev {
			continue
		}
		part, key, ok := strings.Cut(strings.TrimPrefix(string(ev.Kv.Key), r.root+"/"), "/")
		if !ok {
			continue
		}
		name, _, err := keys.ParseRepositoryPartition([]byte(strings.Replace(part, ":", "/", 1)))
		if err != nil || name != repo {
			continue
		}
		at := ev.Kv.ModRevision
		add := func(typ pb.RefEvent_Type, id, old, cur string) {
			out = append(out, eventKey(&pb.RefEvent{Type: typ, Revision: at, Branch: client.Branch(repo, id), OldCommitId: old, CommitId: cur}))
		}
		addTag := func(typ pb.RefEvent_Type, id, old, cur string) {
			out = append(out, eventKey(&pb.RefEvent{Type: typ, Revision: at, Tag: client.Tag(repo, id), OldCommitId: old, CommitId: cur}))
		}
		switch {
		case strings.HasPrefix(key, keys.BranchesPrefix):
			id := strings.TrimPrefix(key, keys.BranchesPrefix)
			var prev string
			if ev.PrevKv != nil {
				b, err := ref.DecodeBranch(ev.PrevKv.Value)
				if err != nil {
					return nil, fmt.Errorf("branch %s at revision %d: previous value: %w", id, at, err)
				}
				prev = string(b.CommitID)
			}
			if ev.Type == mvccpb.DELETE {
				add(pb.RefEvent_TYPE_BRANCH_DELETED, id, prev, "")
				continue
			}
			b, err := ref.DecodeBranch(ev.Kv.Value)
			if err != nil {
				return nil, fmt.Errorf("branch %s at revision %d: %w", id, at, err)
			}
			switch {
			case ev.IsCreate():
				add(pb.RefEvent_TYPE_BRANCH_CREATED, id, "", string(b.CommitID))
			case b.Change != graveler.ChangeNone || prev != string(b.CommitID):
				add(pb.RefEvent_TYPE_BRANCH_MOVED, id, prev, string(b.CommitID))
			}
		case strings.HasPrefix(key, keys.TagsPrefix):
			id := strings.TrimPrefix(key, keys.TagsPrefix)
			var prev string
			if ev.PrevKv != nil {
				c, err := ref.DecodeTag(ev.PrevKv.Value)
				if err != nil {
					return nil, fmt.Errorf("tag %s at revision %d: previous value: %w", id, at, err)
				}
				prev = string(c)
			}
			if ev.Type == mvccpb.DELETE {
				addTag(pb.RefEvent_TYPE_TAG_DELETED, id, prev, "")
				continue
			}
			c, err := ref.DecodeTag(ev.Kv.Value)
			if err != nil {
				return nil, fmt.Errorf("tag %s at revision %d: %w", id, at, err)
			}
			if !ev.IsCreate() {
				if prev == string(c) {
					continue
				}
				addTag(pb.RefEvent_TYPE_TAG_DELETED, id, prev, "")
			}
			addTag(pb.RefEvent_TYPE_TAG_CREATED, id, "", string(c))
		}
	}
	return out, nil
}
