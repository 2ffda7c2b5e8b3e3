package cleaner_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/cleaner"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/gravelertest"
	"graveler/graveler/ref"
	"graveler/keys"
	"graveler/kv"
	"graveler/kv/kvtest"
)

// svcWorld is a fixture built through the real Graveler service
// (graveler/gravelertest), the way gravelerd's clients build state:
// entries staged through the writer's fence, commits that seal, apply and
// queue their consumed tokens, a commit that crashed after sealing (its
// tokens stay sealed on the branch), a reset and a branch delete that
// queue tokens, repository deletes, a name deleted and re-created,
// creates that crashed after every one of their kv operations, and
// hand-made orphans (a late writer's keys in a token nothing references,
// a repository partition no record names).
type svcWorld struct {
	t     testing.TB
	ctx   context.Context
	store kv.Store
	blobs committed.BlobStore
	g     *graveler.Graveler
	// live: the repositories that must survive, by name.
	live map[graveler.RepositoryID]bool
	// crashedCreates: creates that crashed part-way and left state behind.
	crashedCreates int
}

// newBlobs returns an in-memory blob store closed by t.Cleanup.
func newBlobs(t testing.TB) committed.BlobStore {
	b := committed.NewBucketStore(committed.BucketConfig{})
	t.Cleanup(func() { b.Close() })
	return b
}

func newSvcWorld(t testing.TB, store kv.Store, s shape) *svcWorld {
	t.Helper()
	w := &svcWorld{t: t, ctx: context.Background(), store: store, blobs: newBlobs(t), live: map[graveler.RepositoryID]bool{}}
	w.g = gravelertest.New(t, store, gravelertest.Options{Blobs: w.blobs})
	for i := range s.live {
		name := graveler.RepositoryID(fmt.Sprintf("live-%d", i))
		w.populate(name, s)
		w.live[name] = true
	}
	for i := range s.dead {
		name := graveler.RepositoryID(fmt.Sprintf("dead-%d", i))
		w.populate(name, s)
		if err := w.g.DeleteRepository(w.ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	if s.live > 0 {
		// A name deleted and re-created: the old incarnation is queued,
		// the new one lives.
		if err := w.g.DeleteRepository(w.ctx, "live-0"); err != nil {
			t.Fatal(err)
		}
		w.populate("live-0", s)
	}
	w.crashCreates()
	// Orphans no service call leaves without a crash or a late writer.
	if err := store.Set(w.ctx, keys.RepositoryPartition("ghost", ref.NewID()), keys.Branch("main"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := store.Set(w.ctx, keys.StagingPartition("live-1."+ref.NewID()), keys.Entry([]byte("late")), []byte("x")); err != nil {
		t.Fatal(err)
	}
	return w
}

func version(v int) graveler.Value {
	return graveler.Value{Identity: fmt.Appendf(nil, "v%d", v), Data: fmt.Appendf(nil, "data-%d", v)}
}

// put stages n entries prefix0000.. on a branch.
func (w *svcWorld) put(repo graveler.RepositoryID, branch graveler.BranchID, prefix string, n int) {
	w.t.Helper()
	for i := range n {
		if err := w.g.Set(w.ctx, repo, branch, graveler.Key(fmt.Sprintf("%s%04d", prefix, i)), version(1), graveler.SetOptions{}); err != nil {
			w.t.Fatalf("set on %s/%s: %v", repo, branch, err)
		}
	}
}

func (w *svcWorld) commit(repo graveler.RepositoryID, branch graveler.BranchID) {
	w.t.Helper()
	if _, err := w.g.Commit(w.ctx, repo, branch, graveler.CommitParams{Committer: "tester", Message: "c"}); err != nil {
		w.t.Fatalf("commit %s/%s: %v", repo, branch, err)
	}
}

// populate creates repo with commits on main, branches with commits and
// staged entries, sealed tokens of a crashed commit, a reset and a
// deleted branch.
func (w *svcWorld) populate(repo graveler.RepositoryID, s shape) {
	w.t.Helper()
	ctx, g := w.ctx, w.g
	if _, err := g.CreateRepository(ctx, repo, gravelertest.Namespace(), "main"); err != nil {
		w.t.Fatal(err)
	}
	for c := range s.commits {
		w.put(repo, "main", fmt.Sprintf("c%02d/", c), s.entries)
		w.commit(repo, "main")
	}
	branches := []graveler.BranchID{"main"}
	for b := 1; b < s.branches; b++ {
		id := graveler.BranchID(fmt.Sprintf("b%d", b))
		if _, err := g.CreateBranch(ctx, repo, id, "main"); err != nil {
			w.t.Fatal(err)
		}
		w.put(repo, id, "b/", s.entries)
		w.commit(repo, id)
		branches = append(branches, id)
	}
	for _, b := range branches {
		w.put(repo, b, "staged/", s.entries)
	}
	// A commit that crashes right after sealing leaves its tokens sealed;
	// what is staged afterwards goes to the fresh token.
	w.crashCommitAfterSeal(repo, "main")
	w.put(repo, "main", "after-crash/", s.entries)
	if s.branches > 1 {
		// A reset queues the branch's tokens; then it stages again.
		if err := g.Reset(ctx, repo, "b1", graveler.ResetTypeAll, nil); err != nil {
			w.t.Fatal(err)
		}
		w.put(repo, "b1", "after-reset/", s.entries)
	}
	// A branch with commits and staged entries, deleted.
	if _, err := g.CreateBranch(ctx, repo, "doomed", "main"); err != nil {
		w.t.Fatal(err)
	}
	w.put(repo, "doomed", "d/", s.entries)
	w.commit(repo, "doomed")
	w.put(repo, "doomed", "d2/", s.entries)
	if err := g.DeleteBranch(ctx, repo, "doomed"); err != nil {
		w.t.Fatal(err)
	}
}

// crashCommitAfterSeal runs a commit through a replica whose store
// crashes at kv operation 1, 2, ... until one crash leaves sealed tokens
// on the branch: the commit sealed its token and died before finishing.
func (w *svcWorld) crashCommitAfterSeal(repo graveler.RepositoryID, branch graveler.BranchID) {
	w.t.Helper()
	for n := int64(1); n < 100; n++ {
		fs := kvtest.NewFaultStore(w.store)
		fs.FailAt(n, kvtest.FaultCrash)
		faulty := gravelertest.New(w.t, fs, gravelertest.Options{Blobs: w.blobs})
		if _, err := faulty.Commit(w.ctx, repo, branch, graveler.CommitParams{Committer: "tester", Message: "crashing"}); err == nil {
			w.t.Fatalf("commit crashed at op %d succeeded before leaving sealed tokens", n)
		}
		b, err := w.g.GetBranch(w.ctx, repo, branch)
		if err != nil {
			w.t.Fatal(err)
		}
		if len(b.SealedTokens) > 0 {
			return
		}
	}
	w.t.Fatal("no crash left sealed tokens")
}

// crashCreates crashes a repository create at each of its kv operations,
// each under its own name, until a create completes; the completed one
// lives.
func (w *svcWorld) crashCreates() {
	w.t.Helper()
	for n := int64(1); n < 100; n++ {
		name := graveler.RepositoryID(fmt.Sprintf("create-%02d", n))
		fs := kvtest.NewFaultStore(w.store)
		fs.FailAt(n, kvtest.FaultCrash)
		faulty := gravelertest.New(w.t, fs, gravelertest.Options{Blobs: w.blobs})
		_, err := faulty.CreateRepository(w.ctx, name, gravelertest.Namespace(), "main")
		if !fs.Crashed() {
			if err != nil {
				w.t.Fatalf("create %s: %v", name, err)
			}
			w.live[name] = true
			return
		}
		w.crashedCreates++
	}
	w.t.Fatal("create never completed")
}

// branchState is what a branch shows through the service.
type branchState struct {
	head    graveler.CommitID
	entries map[string]string // key -> identity, staged view
	log     []graveler.CommitID
}

// listAll lists every entry at ref as key -> identity.
func listAll(ctx context.Context, g *graveler.Graveler, repo graveler.RepositoryID, ref graveler.Ref) (map[string]string, error) {
	out := map[string]string{}
	var after graveler.Key
	for {
		rows, more, err := g.ListEntries(ctx, repo, ref, graveler.ListEntriesOptions{After: after, Limit: 500})
		if err != nil {
			return nil, fmt.Errorf("list %s at %s: %w", repo, ref, err)
		}
		for _, r := range rows {
			out[string(r.Key)] = string(r.Value.Identity)
			after = r.Key
		}
		if !more {
			return out, nil
		}
	}
}

// logOf lists the commits reachable from ref, newest first.
func logOf(ctx context.Context, g *graveler.Graveler, repo graveler.RepositoryID, ref graveler.Ref) ([]graveler.CommitID, error) {
	var out []graveler.CommitID
	for c, err := range g.Log(ctx, repo, ref, graveler.LogOptions{}) {
		if err != nil {
			return nil, fmt.Errorf("log %s at %s: %w", repo, ref, err)
		}
		out = append(out, c.CommitID)
	}
	return out, nil
}

// snapshot reads every branch of every live repository through the service.
func (w *svcWorld) snapshot() map[string]branchState {
	w.t.Helper()
	out := map[string]branchState{}
	for repo := range w.live {
		for b, err := range w.g.ListBranches(w.ctx, repo, graveler.ListBranchesOptions{}) {
			if err != nil {
				w.t.Fatal(err)
			}
			entries, err := listAll(w.ctx, w.g, repo, graveler.Ref(b.BranchID))
			if err != nil {
				w.t.Fatal(err)
			}
			log, err := logOf(w.ctx, w.g, repo, graveler.Ref(b.BranchID))
			if err != nil {
				w.t.Fatal(err)
			}
			out[string(repo)+"/"+string(b.BranchID)] = branchState{head: b.CommitID, entries: entries, log: log}
		}
	}
	return out
}

// liveIDs reads the unique ids of the live repositories through the service.
func liveIDs(t testing.TB, g *graveler.Graveler, live map[graveler.RepositoryID]bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	for repo := range live {
		rec, err := g.GetRepository(context.Background(), repo)
		if err != nil {
			t.Fatalf("live repository %s: %v", repo, err)
		}
		out[string(repo)] = string(rec.UniqueID)
	}
	return out
}

// unreachableInEtcd scans every key under root straight from etcd and
// returns those no live repository reaches. live maps each live
// repository to its unique id. Reachable are: the live repositories'
// records (active, with that id), their repository partitions, and the
// staging partitions their branch records name (staging or sealed), and
// the storage namespace claims they hold.
// Nothing else may remain after a complete cleaner pass: not a work item,
// not another record, not another partition, not another claim. perToken counts the keys of
// each reachable staging partition.
func unreachableInEtcd(t testing.TB, cli *clientv3.Client, root string, live map[string]string) (stray []string, perToken map[string]int) {
	t.Helper()
	entries := etcdEntries(t, cli, root)
	livePart := map[string]bool{}
	for name, uid := range live {
		livePart[string(keys.RepositoryPartition(name, uid))] = true
	}
	records := keys.PartitionGraveler + "/" + keys.ReposPrefix
	tokens := map[string]bool{}
	var staged []string
	seenRecord := map[string]bool{}
	for _, e := range entries {
		k := e.Key
		switch {
		case strings.HasPrefix(k, records):
			name := strings.TrimPrefix(k, records)
			rec, err := ref.DecodeRepository(e.Value)
			if err != nil || live[name] == "" || string(rec.UniqueID) != live[name] || rec.State != graveler.RepositoryStateActive {
				stray = append(stray, k)
				continue
			}
			seenRecord[name] = true
		case strings.HasPrefix(k, keys.PartitionGraveler+"/"+keys.NamespacesPrefix):
			c, err := ref.DecodeNamespaceClaim([]byte(strings.TrimPrefix(k, keys.PartitionGraveler+"/")), e.Value)
			if err != nil || live[string(c.Repository)] != string(c.UniqueID) {
				stray = append(stray, k)
			}
		case strings.HasPrefix(k, "repo/"):
			p, rest, _ := strings.Cut(strings.TrimPrefix(k, "repo/"), "/")
			if !livePart["repo/"+p] {
				stray = append(stray, k)
				continue
			}
			if strings.HasPrefix(rest, keys.BranchesPrefix) {
				b, err := ref.DecodeBranch(e.Value)
				if err != nil {
					t.Fatalf("branch record %s: %v", k, err)
				}
				tokens[string(b.StagingToken)] = true
				for _, tok := range b.SealedTokens {
					tokens[string(tok)] = true
				}
			}
		case strings.HasPrefix(k, "staging/"):
			staged = append(staged, k)
		default: // a work item, or anything else
			stray = append(stray, k)
		}
	}
	for name := range live {
		if !seenRecord[name] {
			t.Errorf("live repository %s has no active record in etcd", name)
		}
	}
	perToken = map[string]int{}
	for _, k := range staged {
		tok, _, _ := strings.Cut(strings.TrimPrefix(k, "staging/"), "/")
		if !tokens[tok] {
			stray = append(stray, k)
			continue
		}
		perToken[tok]++
	}
	return stray, perToken
}

// TestReclaimServiceOnEtcd: state made by the real service (gravelertest
// on embedded etcd); after one cleaner pass, a scan of etcd finds only
// what live repositories reach, every live staging partition keeps its
// keys, and every live branch reads as before, commits and reads again.
func TestReclaimServiceOnEtcd(t *testing.T) {
	store, cli, lister := newEtcd(t)
	s := shape{live: 3, dead: 3, branches: 3, commits: 3, entries: 12}
	w := newSvcWorld(t, store, s)
	root := store.Prefix()
	ids := liveIDs(t, w.g, w.live)
	strayBefore, keysBefore := unreachableInEtcd(t, cli, root, ids)
	if len(strayBefore) == 0 || len(keysBefore) == 0 {
		t.Fatalf("fixture: %d unreachable keys, %d live tokens; want both", len(strayBefore), len(keysBefore))
	}
	before := w.snapshot()

	sum, err := cleaner.New(store, testConfig(lister)).RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fixture: %d keys no live repository reaches, %d crashed creates; summary: %+v", len(strayBefore), w.crashedCreates, sum)
	if sum.Errors != 0 || sum.Incomplete || sum.Skipped != 0 {
		t.Errorf("summary %+v", sum)
	}
	// Deleted: dead-*, the first live-0, every crashed create that left a record.
	if sum.RepositoriesReclaimed < s.dead+1 || sum.TokensReclaimed == 0 || sum.OrphanRepositoryPartitions < 1 || sum.OrphanStagingPartitions < 1 {
		t.Errorf("summary %+v: want >= %d repositories, some tokens and orphans", sum, s.dead+1)
	}

	stray, keysAfter := unreachableInEtcd(t, cli, root, ids)
	if len(stray) > 0 {
		slices.Sort(stray)
		t.Errorf("%d keys no live repository reaches remain, e.g. %v", len(stray), stray[:min(len(stray), 10)])
	}
	if !maps.Equal(keysBefore, keysAfter) {
		t.Errorf("live staging partitions changed: %d tokens before, %d after", len(keysBefore), len(keysAfter))
		for tok, n := range keysBefore {
			if keysAfter[tok] != n {
				t.Errorf("live token %s: %d keys before, %d after", tok, n, keysAfter[tok])
			}
		}
	}
	// A second pass finds nothing.
	again, err := cleaner.New(store, testConfig(lister)).RunOnce(t.Context())
	if err != nil || again.EntriesRemoved != 0 || again.RepositoriesRetired != 0 || again.OrphanRepositoryPartitions != 0 || again.OrphanStagingPartitions != 0 {
		t.Errorf("second pass: %+v, %v", again, err)
	}
	after := w.snapshot()
	for b, want := range before {
		got, ok := after[b]
		if !ok || got.head != want.head || !maps.Equal(got.entries, want.entries) || !slices.Equal(got.log, want.log) {
			t.Errorf("branch %s changed: head %s -> %s, %d -> %d entries, %d -> %d commits", b, want.head, got.head,
				len(want.entries), len(got.entries), len(want.log), len(got.log))
		}
	}
	if len(after) != len(before) {
		t.Errorf("%d live branches before, %d after", len(before), len(after))
	}
	// Every live branch still commits everything it shows.
	for b, want := range before {
		repo, branch, _ := strings.Cut(b, "/")
		_, err := w.g.Commit(t.Context(), graveler.RepositoryID(repo), graveler.BranchID(branch), graveler.CommitParams{Committer: "tester", Message: "after"})
		if err != nil && !errors.Is(err, graveler.ErrNoChanges) {
			t.Errorf("commit %s after the pass: %v", b, err)
			continue
		}
		got, err := listAll(t.Context(), w.g, graveler.RepositoryID(repo), graveler.Ref(branch+"@"))
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want.entries) {
			t.Errorf("%s: committed data has %d entries, the branch showed %d", b, len(got), len(want.entries))
		}
	}
}

// entryVersion parses an identity made by version.
func entryVersion(identity string) (int, error) {
	return strconv.Atoi(strings.TrimPrefix(identity, "v"))
}
