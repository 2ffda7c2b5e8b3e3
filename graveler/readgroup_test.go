package graveler_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/gravelertest"
	"graveler/keys"
	"graveler/kv"
	"graveler/kv/kvtest"
)

// getManyLog wraps a store and records the size of every kv.GetMany, so
// tests can tell how many Gets shared one transaction. It passes the
// optional abilities through, so fenced paths stay fenced.
type getManyLog struct {
	kv.Store
	mu    sync.Mutex
	sizes []int
	gets  []string // keys of plain Gets
	// panicNext makes the next GetMany panic.
	panicNext atomic.Bool
}

func (s *getManyLog) Get(ctx context.Context, partition, key []byte) ([]byte, kv.Predicate, error) {
	s.mu.Lock()
	s.gets = append(s.gets, string(key))
	s.mu.Unlock()
	return s.Store.Get(ctx, partition, key)
}

// getsOf counts the plain Gets of key.
func (s *getManyLog) getsOf(key []byte) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, k := range s.gets {
		if k == string(key) {
			n++
		}
	}
	return n
}

func (s *getManyLog) GetMany(ctx context.Context, reads []kv.KeyRef) ([]kv.Entry, error) {
	if s.panicNext.CompareAndSwap(true, false) {
		panic("store failure")
	}
	s.mu.Lock()
	s.sizes = append(s.sizes, len(reads))
	s.mu.Unlock()
	return kv.GetMany(ctx, s.Store, reads)
}

func (s *getManyLog) SetAndRead(ctx context.Context, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, error) {
	return kv.SetAndRead(ctx, s.Store, writes, reads)
}

func (s *getManyLog) SetAndReadUnless(ctx context.Context, absent []kv.KeyRef, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, bool, error) {
	return kv.SetAndReadUnless(ctx, s.Store, absent, writes, reads)
}

func (s *getManyLog) DeleteIfWith(ctx context.Context, partition, key []byte, pred kv.Predicate, also []kv.Write) error {
	return kv.DeleteIfWith(ctx, s.Store, partition, key, pred, also)
}

func (s *getManyLog) SetIfWith(ctx context.Context, partition, key, value []byte, pred kv.Predicate, absent []kv.KeyRef, also []kv.Write) error {
	return kv.SetIfWith(ctx, s.Store, partition, key, value, pred, absent, also)
}

func (s *getManyLog) DropPartition(ctx context.Context, partition []byte) (int64, error) {
	return kv.DropPartition(ctx, s.Store, partition)
}

// since returns the sizes of the GetMany calls after the first n.
func (s *getManyLog) since(n int) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.sizes[n:]...)
}

func (s *getManyLog) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sizes)
}

// groupFixture is a pause fixture on a real etcd whose GetMany calls are
// logged.
type groupFixture struct {
	*pauseFixture
	log  *getManyLog
	rec  *graveler.RepositoryRecord
	txns func(kvtest.Op) bool // a Get's transaction on the repository
}

func newGroupFixture(t *testing.T) *groupFixture {
	return newGroupFixtureConfig(t, graveler.Config{})
}

func newGroupFixtureConfig(t *testing.T, cfg graveler.Config) *groupFixture {
	t.Helper()
	log := &getManyLog{Store: etcdkvtest.NewStore(t)}
	p := newPauseFixture(t, log, cfg)
	rec, err := p.g.GetRepository(p.ctx, p.repo)
	if err != nil {
		t.Fatal(err)
	}
	repoKey := keys.Repository(string(p.repo))
	return &groupFixture{pauseFixture: p, log: log, rec: rec,
		txns: func(op kvtest.Op) bool { return op.Is("get_many", keys.Graveler(), repoKey) }}
}

// getAsync starts a Get of key on main.
func (f *groupFixture) getAsync(ctx context.Context, key string) <-chan getResult {
	out := make(chan getResult, 1)
	go func() {
		v, err := f.g.Get(ctx, f.repo, "main", graveler.Key(key))
		r := getResult{err: err}
		if v != nil {
			r.v = string(v.Data)
		}
		out <- r
	}()
	return out
}

type getResult struct {
	v   string
	err error
}

func (f *groupFixture) awaitGet(ch <-chan getResult) getResult {
	f.t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(holdTimeout):
		f.t.Fatal("a Get did not return")
		return getResult{}
	}
}

// wantQueued waits until n Gets of main wait for the next grouped read.
func (f *groupFixture) waitQueued(n int) {
	f.t.Helper()
	deadline := time.Now().Add(holdTimeout)
	for f.g.QueuedReads(f.rec, "main") != n {
		if time.Now().After(deadline) {
			f.t.Fatalf("%d Gets queued behind the read in flight, want %d", f.g.QueuedReads(f.rec, "main"), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// holdLeader starts a Get of key and holds its transaction before etcd
// sees it, so that Gets started next queue behind it.
func (f *groupFixture) holdLeader(key string) (*kvtest.PausePoint, <-chan getResult) {
	f.t.Helper()
	hold := f.ps.Pause(kvtest.Before, f.txns)
	ch := f.getAsync(f.ctx, key)
	hold.Wait(f.t, holdTimeout)
	return hold, ch
}

func (f *groupFixture) wantGet(r getResult, v string) {
	f.t.Helper()
	if r.err != nil || r.v != v {
		f.t.Fatalf("Get = %q, %v; want %q", r.v, r.err, v)
	}
}

// TestGroupedReadSeesWriteBeforeItsTransaction: Gets of a branch queue
// behind one in flight, and a write of their key is acknowledged after
// they queued but before their shared transaction is sent. The group's
// transaction reads after the write, so they see it; they share one
// transaction (the fence records plus each key once, in the one token).
func TestGroupedReadSeesWriteBeforeItsTransaction(t *testing.T) {
	f := newGroupFixture(t)
	f.set("main", "k", "v1")
	f.set("main", "j", "j1")
	hold, leader := f.holdLeader("k")
	b := f.getAsync(f.ctx, "k")
	c := f.getAsync(f.ctx, "j")
	d := f.getAsync(f.ctx, "k")
	f.waitQueued(3)
	f.set("main", "k", "v2")
	n := f.log.count()
	hold.Release()
	f.wantGet(f.awaitGet(leader), "v2") // held before etcd saw it, so it reads after the write too
	for _, ch := range []<-chan getResult{b, d} {
		f.wantGet(f.awaitGet(ch), "v2")
	}
	f.wantGet(f.awaitGet(c), "j1")
	if got := f.log.since(n); len(got) != 2 || got[1] != got[0]+1 {
		t.Fatalf("transactions of %v records, want the leader's and one for the queued Gets, reading one key more (k and j)", got)
	}
}

// TestGroupedReadPanicFreesBranch: a lone Get's transaction panics in the
// store (the gRPC server recovers such a panic and goes on serving); the
// branch's next Get is read, not queued behind a read that will never
// finish.
func TestGroupedReadPanicFreesBranch(t *testing.T) {
	f := newGroupFixture(t)
	f.set("main", "k", "v1")
	f.log.panicNext.Store(true)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the store's panic did not reach the reader")
			}
		}()
		_, _ = f.g.Get(f.ctx, f.repo, "main", graveler.Key("k"))
	}()
	f.wantGet(f.awaitGet(f.getAsync(f.ctx, "k")), "v1")
}

// TestGroupedReadReaderGivesUp: a reader of a group gives up while it is
// queued, and another while the group's transaction is in flight. Each is
// answered with its context's error at once (the second while its
// transaction is still held), the first's key is not read, and the other
// readers of the group get their values.
func TestGroupedReadReaderGivesUp(t *testing.T) {
	f := newGroupFixture(t)
	f.set("main", "k", "v1")
	f.set("main", "q", "q1")
	f.set("main", "s", "s1")
	hold, leader := f.holdLeader("k")
	qctx, qcancel := context.WithCancel(f.ctx)
	defer qcancel()
	queued := f.getAsync(qctx, "q")
	sctx, scancel := context.WithCancel(f.ctx)
	defer scancel()
	sent := f.getAsync(sctx, "s")
	other := f.getAsync(f.ctx, "k")
	f.waitQueued(3)
	qcancel()
	if r := f.awaitGet(queued); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("queued reader that gave up: %q, %v; want context.Canceled", r.v, r.err)
	}
	f.waitQueued(2)
	n := f.log.count()
	hold2 := f.ps.Pause(kvtest.Before, f.txns)
	hold.Release()
	f.wantGet(f.awaitGet(leader), "v1")
	hold2.Wait(t, holdTimeout)
	scancel()
	if r := f.awaitGet(sent); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("reader that gave up with its transaction in flight: %q, %v; want context.Canceled", r.v, r.err)
	}
	hold2.Release()
	f.wantGet(f.awaitGet(other), "v1")
	if got := f.log.since(n); len(got) != 2 || got[1] != got[0]+1 {
		t.Fatalf("transactions of %v records, want the leader's and one for the group reading one key more (s and k): the key of the reader that left is not read", got)
	}
}

// TestGroupedReadBranchMovesInFlight: a group's transaction is held while
// a commit seals the branch's staging token and a new value of the key is
// staged in the next one. The transaction, released, reads a branch that
// names other tokens than the ones it read, so the group reads again: its
// readers see the value staged after the commit, and a key only the
// commit holds now.
func TestGroupedReadBranchMovesInFlight(t *testing.T) {
	f := newGroupFixture(t)
	f.set("main", "k", "v1")
	f.set("main", "c", "c1")
	hold, leader := f.holdLeader("k")
	b := f.getAsync(f.ctx, "k")
	c := f.getAsync(f.ctx, "c")
	f.waitQueued(2)
	hold2 := f.ps.Pause(kvtest.Before, f.txns)
	hold.Release()
	f.wantGet(f.awaitGet(leader), "v1")
	hold2.Wait(t, holdTimeout)
	f.set("main", "k", "v2")
	f.commit("main", "moves the branch")
	f.set("main", "k", "v3")
	n := f.log.count()
	hold2.Release()
	f.wantGet(f.awaitGet(b), "v3")
	f.wantGet(f.awaitGet(c), "c1")
	if got := f.log.since(n); len(got) != 2 {
		t.Fatalf("the group sent %d transactions (%v reads each), want 2: the held one and one read again with the new tokens", len(got), got)
	}
}

// TestGroupedReadSplitsLargeGroup: more Gets queue behind one in flight
// than one transaction can read (kv.MaxSetAndReadOps records). The group
// goes as several transactions, none over the limit, and every reader
// gets its own key's value.
func TestGroupedReadSplitsLargeGroup(t *testing.T) {
	f := newGroupFixture(t)
	const n = kv.MaxSetAndReadOps + 10
	recs := make([]*graveler.ValueRecord, n)
	for i := range recs {
		v := val(fmt.Sprintf("v%d", i))
		recs[i] = &graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("k%03d", i)), Value: &v}
	}
	if err := f.g.SetBatch(f.ctx, f.repo, "main", recs); err != nil {
		t.Fatal(err)
	}
	hold, leader := f.holdLeader("k000")
	chs := make([]<-chan getResult, n)
	for i := range chs {
		chs[i] = f.getAsync(f.ctx, fmt.Sprintf("k%03d", i))
	}
	f.waitQueued(n)
	m := f.log.count()
	hold.Release()
	f.wantGet(f.awaitGet(leader), "v0")
	for i, ch := range chs {
		f.wantGet(f.awaitGet(ch), fmt.Sprintf("v%d", i))
	}
	got := f.log.since(m)
	if len(got) < 3 {
		t.Fatalf("transactions of %v records, want the leader's and at least two for the %d queued Gets", got, n)
	}
	for _, size := range got {
		if size > kv.MaxSetAndReadOps {
			t.Fatalf("transactions of %v records, want none over %d", got, kv.MaxSetAndReadOps)
		}
	}
}

// TestGetImmutableRefs: a Get of a commit id reads no commit record once
// the commit is cached; a Get of a tag reads the tag record, which may
// have been deleted and created again at another commit, and the
// repository record at the same time (held tag read, repository read
// reached), not one after the other.
func TestGetImmutableRefs(t *testing.T) {
	// The repository stays cached, so the repository read held below is
	// the Get's own check, not its first step.
	f := newGroupFixtureConfig(t, graveler.Config{BranchCacheTTL: time.Hour})
	f.set("main", "k", "v1")
	c1 := f.commit("main", "one")
	f.set("main", "k", "v2")
	c2 := f.commit("main", "two")
	if _, err := f.g.CreateTag(f.ctx, f.repo, "t", graveler.Ref(c1)); err != nil {
		t.Fatal(err)
	}
	f.want(string(c2), "k", "v2")
	before := f.log.getsOf(keys.Commit(string(c2)))
	for range 3 {
		f.want(string(c2), "k", "v2")
		f.want("main~1", "k", "v1")
	}
	if n := f.log.getsOf(keys.Commit(string(c2))) - before; n != 0 {
		t.Fatalf("Gets of a cached commit read its record %d times", n)
	}

	// Both held before the store: each is reached while the other waits.
	tagRead := f.ps.Pause(kvtest.Before, func(op kvtest.Op) bool { return op.Is("get", f.part, keys.Tag("t")) })
	repoRead := f.ps.Pause(kvtest.Before, func(op kvtest.Op) bool {
		return op.Is("get", keys.Graveler(), keys.Repository(string(f.repo)))
	})
	got := async(func() error {
		v, err := f.g.Get(f.ctx, f.repo, "t", graveler.Key("k"))
		if err == nil && string(v.Data) != "v1" {
			err = fmt.Errorf("get k at tag t = %q, want v1", v.Data)
		}
		return err
	})
	tagRead.Wait(t, holdTimeout)
	repoRead.Wait(t, holdTimeout)
	repoRead.Release()
	tagRead.Release()
	if err := await(t, got); err != nil {
		t.Fatal(err)
	}

	if err := f.g.DeleteTag(f.ctx, f.repo, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.g.CreateTag(f.ctx, f.repo, "t", graveler.Ref(c2)); err != nil {
		t.Fatal(err)
	}
	f.want("t", "k", "v2")
}

// ---- linearizability ----

type linIn struct {
	set   bool
	key   string
	value string
}

// linRegisters is one register per key: a Get returns the last value Set
// ("" when none), each key checked on its own.
var linRegisters = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range h {
			k := op.Input.(linIn).key
			if _, ok := by[k]; !ok {
				order = append(order, k)
			}
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, k := range order {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, in, out any) (bool, any) {
		i := in.(linIn)
		if i.set {
			return true, i.value
		}
		return out.(string) == state.(string), state
	},
	DescribeOperation: func(in, out any) string {
		i := in.(linIn)
		if i.set {
			return fmt.Sprintf("set %s=%s", i.key, i.value)
		}
		return fmt.Sprintf("get %s -> %q", i.key, out)
	},
}

// TestGroupedReadsLinearizable: readers Get three keys of a branch while
// writers stage new values of them and a committer commits the branch
// again and again, on a real etcd. Every Get and Set is recorded with its
// call and return times, and porcupine checks that the history is
// linearizable, key by key. The readers outnumber the keys, so Gets are
// grouped (checked: fewer transactions than Gets).
//
// Commits overlap Sets and Gets freely. A Set racing a commit's seal
// must not land in the sealed token after the commit read it: it would be
// visible there until the commit ends, then invisible until the Set's
// retry into the new token lands, which porcupine reports (the seal
// marker, keys.StagingSealed, is what prevents it).
//
// It runs on one replica, and on two sharing the store (writers and the
// committer on one, readers on the other, which read at random moments):
// the readers' replica then holds a stale cached branch whenever the
// other commits, which only the fence catches (a skipped fence fails this
// history about one run in five; TestReadSeesWritesOfAnotherReplica
// orders the same case deterministically).
func TestGroupedReadsLinearizable(t *testing.T) {
	for _, two := range []bool{false, true} {
		t.Run(fmt.Sprintf("two-replicas-%v", two), func(t *testing.T) { testGroupedReadsLinearizable(t, two) })
	}
}

func testGroupedReadsLinearizable(t *testing.T, twoReplicas bool) {
	log := &getManyLog{Store: etcdkvtest.NewStore(t)}
	blobs := committed.NewBucketStore(committed.BucketConfig{})
	t.Cleanup(func() { blobs.Close() })
	f := &fixture{t: t, g: gravelertest.New(t, log, gravelertest.Options{Blobs: blobs}), ctx: context.Background(), repo: "repo"}
	if _, err := f.g.CreateRepository(f.ctx, f.repo, gravelertest.Namespace(), "main"); err != nil {
		t.Fatal(err)
	}
	reader := f.g
	if twoReplicas {
		reader = gravelertest.New(t, log, gravelertest.Options{Blobs: blobs})
	}
	const readers, writers, opsEach = 12, 3, 60
	keyNames := []string{"a", "b", "c"}
	start := time.Now()
	now := func() int64 { return time.Since(start).Nanoseconds() }
	var mu sync.Mutex
	var hist []porcupine.Operation
	record := func(client int, in linIn, call int64, out string) {
		mu.Lock()
		hist = append(hist, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: now()})
		mu.Unlock()
	}
	ctx := f.ctx
	n0 := log.count()
	var gets int
	var getsMu sync.Mutex
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			for i := range opsEach {
				k := keyNames[rand.IntN(len(keyNames))]
				v := fmt.Sprintf("w%d-%d", w, i)
				call := now()
				err := f.g.Set(ctx, f.repo, "main", graveler.Key(k), val(v), graveler.SetOptions{})
				if err == nil {
					record(readers+w, linIn{set: true, key: k, value: v}, call, "")
				}
				if err != nil {
					t.Errorf("set %s=%s: %v", k, v, err)
					return
				}
			}
		})
	}
	var committer sync.WaitGroup
	committer.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, err := f.g.Commit(ctx, f.repo, "main", graveler.CommitParams{Committer: "t", Message: "lin"})
			if err != nil && !errors.Is(err, graveler.ErrNoChanges) {
				t.Errorf("commit: %v", err)
				return
			}
		}
	})
	for r := range readers {
		wg.Go(func() {
			for range opsEach {
				k := keyNames[rand.IntN(len(keyNames))]
				if twoReplicas {
					time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
				}
				call := now()
				v, err := reader.Get(ctx, f.repo, "main", graveler.Key(k))
				var out string
				switch {
				case err == nil:
					out = string(v.Data)
				case errors.Is(err, graveler.ErrEntryNotFound):
				default:
					t.Errorf("get %s: %v", k, err)
					return
				}
				record(r, linIn{key: k}, call, out)
				getsMu.Lock()
				gets++
				getsMu.Unlock()
			}
		})
	}
	wg.Wait()
	close(stop)
	committer.Wait()
	if t.Failed() {
		return
	}
	res, info := porcupine.CheckOperationsVerbose(linRegisters, hist, time.Minute)
	if res != porcupine.Ok {
		if path := t.TempDir() + "/history.html"; porcupine.VisualizePath(linRegisters, info, path) == nil {
			t.Logf("history: %s", path)
		}
		t.Fatalf("history of %d operations is %s", len(hist), res)
	}
	if txns := log.count() - n0; txns >= gets {
		t.Fatalf("%d Gets sent %d transactions: none were grouped", gets, txns)
	}
}
