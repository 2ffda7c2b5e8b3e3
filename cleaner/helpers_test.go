package cleaner_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/cleaner"
	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/ref"
	"graveler/keys"
	"graveler/kv"
	"graveler/kv/kvtest"
)

// later is the cleaner's clock in tests: far enough ahead that every
// initial record of the fixture is past the creation timeout.
func later() time.Time { return time.Now().Add(time.Hour) }

func testConfig(lister cleaner.PartitionLister) cleaner.Config {
	return cleaner.Config{Sweep: true, SweepGrace: -1, Lister: lister, Now: later}
}

// shape sizes a fixture.
type shape struct {
	live, dead, branches, commits, entries int
}

// world is a fixture: live and deleted repositories with branches,
// commits, staged and sealed entries, consumed tokens, a deleted branch, a
// crashed create, and orphans.
type world struct {
	t     testing.TB
	ctx   context.Context
	store kv.Store
	m     *ref.Manager
	live  map[string]*graveler.RepositoryRecord
}

func newWorld(t testing.TB, store kv.Store, s shape) *world {
	t.Helper()
	w := &world{t: t, ctx: context.Background(), store: store, m: ref.New(store, ref.Config{BranchReadWindow: -1}),
		live: map[string]*graveler.RepositoryRecord{}}
	for i := range s.live {
		name := fmt.Sprintf("live-%d", i)
		w.live[name] = w.repo(name, s)
	}
	for i := range s.dead {
		name := fmt.Sprintf("dead-%d", i)
		w.repo(name, s)
		if err := w.m.DeleteRepository(w.ctx, graveler.RepositoryID(name)); err != nil {
			t.Fatal(err)
		}
	}
	// A name deleted and re-created: the old incarnation is queued, the
	// new one lives.
	if s.live > 0 {
		name := "live-0"
		if err := w.m.DeleteRepository(w.ctx, graveler.RepositoryID(name)); err != nil {
			t.Fatal(err)
		}
		w.live[name] = w.repo(name, s)
	}
	// A create that crashed after its initial record, its claim and its
	// commit (Get, SetIf, Get claim, SetIf claim, Get, Set commit, then
	// the branch's SetIf crashes).
	fs := kvtest.NewFaultStore(store)
	fs.FailAt(7, kvtest.FaultCrash)
	if _, err := ref.New(fs, ref.Config{}).CreateRepository(w.ctx, "crashed", repoParams(), initialCommit()); err == nil {
		t.Fatal("crashed create succeeded")
	}
	data, _, err := store.Get(w.ctx, keys.Graveler(), keys.Repository("crashed"))
	if err != nil {
		t.Fatal(err)
	}
	crashed, err := ref.DecodeRepository(data)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, err := range store.Scan(w.ctx, keys.RepositoryPartition("crashed", string(crashed.UniqueID)), kv.ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("the crashed create left no data in its repository partition")
	}
	// Orphans: a repository partition no record names, and a late
	// writer's keys in a token nothing references.
	w.set(keys.RepositoryPartition("ghost", ref.NewID()), keys.Branch("main"), []byte("x"))
	w.set(keys.StagingPartition("live-1."+ref.NewID()), keys.Entry([]byte("late")), []byte("x"))
	return w
}

var namespaces atomic.Int64

// repoParams returns the parameters of a new repository, on a storage
// namespace no other call returns (a namespace is held by one repository).
func repoParams() graveler.Repository {
	return graveler.Repository{StorageNamespace: graveler.StorageNamespace(fmt.Sprintf("mem://ns-%d", namespaces.Add(1))), DefaultBranchID: "main"}
}

func initialCommit() graveler.Commit {
	return graveler.Commit{Committer: "tester", Message: "created"}
}

func (w *world) set(part, key, value []byte) {
	w.t.Helper()
	if err := w.store.Set(w.ctx, part, key, value); err != nil {
		w.t.Fatal(err)
	}
}

// stage writes n entries to token.
func (w *world) stage(tok graveler.StagingToken, prefix string, n int) {
	w.t.Helper()
	for i := range n {
		w.set(keys.StagingPartition(string(tok)), keys.Entry(fmt.Appendf(nil, "%s/%04d", prefix, i)), []byte("v"))
	}
}

// repo creates a repository with branches, commits, staged entries, one
// sealed token per branch, a consumed token and a deleted branch.
func (w *world) repo(name string, s shape) *graveler.RepositoryRecord {
	w.t.Helper()
	ctx := w.ctx
	rec, err := w.m.CreateRepository(ctx, graveler.RepositoryID(name), repoParams(), initialCommit())
	if err != nil {
		w.t.Fatal(err)
	}
	main, err := w.m.GetBranch(ctx, rec, "main")
	if err != nil {
		w.t.Fatal(err)
	}
	head := main.CommitID
	for c := range s.commits {
		head, err = w.m.AddCommit(ctx, rec, graveler.Commit{Committer: "tester", Message: fmt.Sprint(c), MetaRangeID: "mr",
			Parents: []graveler.CommitID{head}, CreationDate: time.Now()})
		if err != nil {
			w.t.Fatal(err)
		}
	}
	for b := range s.branches {
		id := graveler.BranchID(fmt.Sprintf("b%d", b))
		if b > 0 {
			if err := w.m.CreateBranch(ctx, rec, id, graveler.Branch{CommitID: head}); err != nil {
				w.t.Fatal(err)
			}
		} else {
			id = "main"
		}
		br, err := w.m.GetBranch(ctx, rec, id)
		if err != nil {
			w.t.Fatal(err)
		}
		w.stage(br.StagingToken, "a", s.entries)
		// Seal it under a fresh token and stage more: both stay live.
		fresh := w.m.NewStagingToken(rec.RepositoryID)
		if err := w.m.BranchUpdate(ctx, rec, id, func(cur *graveler.Branch) (*graveler.Branch, error) {
			return &graveler.Branch{CommitID: cur.CommitID, StagingToken: fresh,
				SealedTokens: append([]graveler.StagingToken{cur.StagingToken}, cur.SealedTokens...)}, nil
		}); err != nil {
			w.t.Fatal(err)
		}
		w.stage(fresh, "b", s.entries)
	}
	if s.branches > 0 {
		// A consumed token: staged, sealed, then trimmed and queued.
		br, err := w.m.GetBranch(ctx, rec, "main")
		if err != nil {
			w.t.Fatal(err)
		}
		consumed := br.StagingToken
		w.stage(consumed, "c", 3)
		fresh := w.m.NewStagingToken(rec.RepositoryID)
		if err := w.m.BranchUpdate(ctx, rec, "main", func(cur *graveler.Branch) (*graveler.Branch, error) {
			return &graveler.Branch{CommitID: head, StagingToken: fresh, SealedTokens: cur.SealedTokens}, nil
		}); err != nil {
			w.t.Fatal(err)
		}
		if err := w.m.DeleteStagingTokens(ctx, []graveler.StagingToken{consumed}); err != nil {
			w.t.Fatal(err)
		}
		// A deleted branch: its tokens are queued.
		if err := w.m.CreateBranch(ctx, rec, "doomed", graveler.Branch{CommitID: head}); err != nil {
			w.t.Fatal(err)
		}
		d, err := w.m.GetBranch(ctx, rec, "doomed")
		if err != nil {
			w.t.Fatal(err)
		}
		w.stage(d.StagingToken, "d", 2)
		if err := w.m.DeleteBranch(ctx, rec, "doomed"); err != nil {
			w.t.Fatal(err)
		}
	}
	return rec
}

// tokensOf lists the staging and sealed tokens of every branch of rec.
func (w *world) tokensOf(rec *graveler.RepositoryRecord) map[string]bool {
	w.t.Helper()
	out := map[string]bool{}
	for b, err := range w.m.ListBranches(w.ctx, rec, graveler.ListBranchesOptions{}) {
		if err != nil {
			w.t.Fatal(err)
		}
		out[string(b.StagingToken)] = true
		for _, t := range b.SealedTokens {
			out[string(t)] = true
		}
	}
	return out
}

// reachable is what live repositories reach: their records, their
// partitions and their branches' tokens.
func (w *world) reachable() (records, repoParts, tokens map[string]bool) {
	records, repoParts, tokens = map[string]bool{}, map[string]bool{}, map[string]bool{}
	for name, rec := range w.live {
		records[name] = true
		repoParts[string(keys.RepositoryPartition(name, string(rec.UniqueID)))] = true
		maps.Copy(tokens, w.tokensOf(rec))
	}
	return records, repoParts, tokens
}

// rawEntry is one key read straight from etcd: Key is "partition/key",
// decoded as etcdkv stores them, or "?" and the raw key when no partition
// can hold it.
type rawEntry struct {
	Key   string
	Value []byte
}

// etcdEntries reads every key under root straight from etcd.
func etcdEntries(t testing.TB, cli *clientv3.Client, root string) []rawEntry {
	t.Helper()
	s, err := etcdkv.NewFromClient(cli, etcdkv.Config{Prefix: root})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(context.Background(), s.Prefix()+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]rawEntry, 0, len(resp.Kvs))
	for _, e := range resp.Kvs {
		if strings.HasPrefix(string(e.Key), etcdkv.FenceRoot(s.Prefix())) {
			// A running store's write fence: no repository's, and gone
			// with its lease.
			continue
		}
		r := rawEntry{Key: "?" + string(e.Key), Value: e.Value}
		if part, key, ok := s.ParseRawKey(e.Key); ok {
			r.Key = string(part) + "/" + string(key)
		}
		out = append(out, r)
	}
	return out
}

// etcdKeys lists every key under root straight from etcd, as
// "partition/key" (see etcdEntries), in etcd's order.
func etcdKeys(t testing.TB, cli *clientv3.Client, root string) []string {
	t.Helper()
	var out []string
	for _, e := range etcdEntries(t, cli, root) {
		out = append(out, e.Key)
	}
	return out
}

// liveEntries counts the keys of every live token among all.
func (w *world) liveEntries(all []string) map[string]int {
	w.t.Helper()
	_, _, tokens := w.reachable()
	out := map[string]int{}
	for _, k := range all {
		if rest, ok := strings.CutPrefix(k, "staging/"); ok {
			if tok, _, _ := strings.Cut(rest, "/"); tokens[tok] {
				out[tok]++
			}
		}
	}
	return out
}

// checkOnlyReachable asserts that every key (partition/key) belongs to a
// live repository and that live tokens hold the entries they held before.
func (w *world) checkOnlyReachable(all []string, before map[string]int) {
	w.t.Helper()
	records, repoParts, tokens := w.reachable()
	claims := map[string]bool{}
	for _, rec := range w.live {
		norm, err := graveler.NormalizeStorageNamespace(rec.StorageNamespace)
		if err != nil {
			w.t.Fatal(err)
		}
		claims[keys.PartitionGraveler+"/"+string(keys.NamespaceClaim(string(norm)))] = true
	}
	perToken := map[string]int{}
	var stray []string
	for _, k := range all {
		switch {
		case strings.HasPrefix(k, keys.PartitionGraveler+"/"+keys.ReposPrefix):
			if !records[strings.TrimPrefix(k, keys.PartitionGraveler+"/"+keys.ReposPrefix)] {
				stray = append(stray, k)
			}
		case strings.HasPrefix(k, keys.PartitionGraveler+"/"+keys.NamespacesPrefix):
			// The claims of the live repositories, and no other.
			if !claims[k] {
				stray = append(stray, k)
			}
		case strings.HasPrefix(k, "repo/"):
			part, _, _ := strings.Cut(strings.TrimPrefix(k, "repo/"), "/")
			if !repoParts["repo/"+part] {
				stray = append(stray, k)
			}
		case strings.HasPrefix(k, "staging/"):
			tok, _, _ := strings.Cut(strings.TrimPrefix(k, "staging/"), "/")
			if !tokens[tok] {
				stray = append(stray, k)
			}
			perToken[tok]++
		default:
			stray = append(stray, k)
		}
	}
	if len(stray) > 0 {
		w.t.Errorf("%d unreachable keys remain, e.g. %v", len(stray), stray[:min(len(stray), 10)])
	}
	if len(before) == 0 {
		w.t.Error("no live staged entries to check")
	}
	for tok, n := range before {
		if perToken[tok] != n {
			w.t.Errorf("live token %s holds %d entries, want %d", tok, perToken[tok], n)
		}
	}
}

// memoryKeys lists a memory store's keys as partition/key.
func memoryKeys(t testing.TB, s *kv.MemoryStore) []string {
	t.Helper()
	var out []string
	for _, p := range s.Partitions() {
		for e, err := range s.Scan(context.Background(), []byte(p), kv.ScanOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p+"/"+string(e.Key)+"="+string(e.Value))
		}
	}
	slices.Sort(out)
	return out
}

// cloneMemory copies every key of src into a new memory store.
func cloneMemory(t testing.TB, src *kv.MemoryStore) *kv.MemoryStore {
	t.Helper()
	dst := kv.NewMemoryStore()
	for _, p := range src.Partitions() {
		for e, err := range src.Scan(context.Background(), []byte(p), kv.ScanOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			if err := dst.Set(context.Background(), []byte(p), e.Key, e.Value); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dst
}

// newEtcd returns a store on a fresh embedded etcd, its raw client and
// its partition lister (the store itself).
func newEtcd(t testing.TB) (*etcdkv.Store, *clientv3.Client, *etcdkv.Store) {
	t.Helper()
	srv := etcdkvtest.NewServer(t)
	s := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	return s, srv.Client, s
}
