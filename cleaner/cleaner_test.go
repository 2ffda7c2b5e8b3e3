package cleaner_test

import (
	"context"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"graveler/cleaner"
	"graveler/graveler"
	"graveler/graveler/ref"
	"graveler/keys"
	"graveler/kv"
	"graveler/kv/kvtest"
)

var fixture = shape{live: 3, dead: 3, branches: 4, commits: 5, entries: 20}

// TestReclaimOnEtcd: after one pass, etcd holds exactly what live
// repositories reach, and every live staged entry is still there.
func TestReclaimOnEtcd(t *testing.T) {
	store, cli, lister := newEtcd(t)
	w := newWorld(t, store, fixture)
	root := store.Prefix()
	before := w.liveEntries(etcdKeys(t, cli, root))

	sum, err := cleaner.New(store, testConfig(lister)).RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("summary: %+v", sum)
	w.checkOnlyReachable(etcdKeys(t, cli, root), before)
	// 3 deleted, the replaced incarnation of live-0, the crashed create.
	if sum.RepositoriesReclaimed != fixture.dead+2 || sum.RepositoriesRetired != 1 {
		t.Errorf("repositories reclaimed %d, retired %d; want %d, 1", sum.RepositoriesReclaimed, sum.RepositoriesRetired, fixture.dead+2)
	}
	if sum.OrphanRepositoryPartitions != 1 || sum.OrphanStagingPartitions != 1 {
		t.Errorf("orphans: %d repository, %d staging; want 1, 1", sum.OrphanRepositoryPartitions, sum.OrphanStagingPartitions)
	}
	if sum.Errors != 0 || sum.Incomplete || sum.TokensReclaimed == 0 || sum.KeysReclaimed == 0 {
		t.Errorf("summary %+v", sum)
	}
	// The live repositories still work.
	for name, rec := range w.live {
		if _, err := w.m.GetRepository(t.Context(), graveler.RepositoryID(name)); err != nil {
			t.Errorf("live repository %s: %v", name, err)
		}
		if len(w.tokensOf(rec)) == 0 {
			t.Errorf("live repository %s lost its branches", name)
		}
	}
	// A second pass finds nothing.
	again, err := cleaner.New(store, testConfig(lister)).RunOnce(t.Context())
	if err != nil || again.KeysReclaimed != 0 || again.EntriesRemoved != 0 || again.RepositoriesRetired != 0 {
		t.Errorf("second pass: %+v, %v", again, err)
	}
}

func TestReclaimOnMemory(t *testing.T) {
	store := kv.NewMemoryStore()
	w := newWorld(t, store, fixture)
	keysOf := func() []string {
		var out []string
		for _, k := range memoryKeys(t, store) {
			k, _, _ = strings.Cut(k, "=")
			out = append(out, k)
		}
		return out
	}
	before := w.liveEntries(keysOf())
	// The memory store lists its partitions itself only through an adapter.
	if _, err := cleaner.New(store, testConfig(cleaner.NewMemoryLister(store))).RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.checkOnlyReachable(keysOf(), before)
}

// TestCrashAfterEveryStep crashes a pass at every kv operation, then runs
// a healthy pass: the end state is the clean run's. It runs on the
// hand-made fixture and on one built through the real service.
func TestCrashAfterEveryStep(t *testing.T) {
	small := shape{live: 2, dead: 2, branches: 2, commits: 2, entries: 3}
	t.Run("handmade", func(t *testing.T) {
		base := kv.NewMemoryStore()
		newWorld(t, base, small)
		crashAfterEveryStep(t, base)
	})
	t.Run("service", func(t *testing.T) {
		base := kv.NewMemoryStore()
		newSvcWorld(t, base, small)
		crashAfterEveryStep(t, base)
	})
}

func crashAfterEveryStep(t *testing.T, base *kv.MemoryStore) {
	cfg := func(s *kv.MemoryStore) cleaner.Config { return testConfig(cleaner.NewMemoryLister(s)) }

	clean := cloneMemory(t, base)
	if _, err := cleaner.New(clean, cfg(clean)).RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := memoryKeys(t, clean)

	crashes := 0
	for n := int64(1); ; n++ {
		s := cloneMemory(t, base)
		fs := kvtest.NewFaultStore(s)
		fs.FailAt(n, kvtest.FaultCrash)
		_, _ = cleaner.New(fs, cfg(s)).RunOnce(t.Context())
		if !fs.Crashed() {
			if n < 20 {
				t.Fatalf("a pass has only %d kv operations", n-1)
			}
			break
		}
		crashes++
		if _, err := cleaner.New(s, cfg(s)).RunOnce(t.Context()); err != nil {
			t.Fatalf("healthy pass after a crash at op %d: %v", n, err)
		}
		if got := memoryKeys(t, s); !slices.Equal(got, want) {
			t.Fatalf("crash at op %d: end state differs from a clean run:\n got %d keys %v\nwant %d keys %v", n, len(got), got, len(want), want)
		}
	}
	t.Logf("crashed at each of %d operations", crashes)
}

// TestFaultsAreSkipped: a failing operation fails that entry only; the
// rest of the pass goes on, and the next pass finishes.
func TestFaultsAreSkipped(t *testing.T) {
	base := kv.NewMemoryStore()
	newWorld(t, base, shape{live: 1, dead: 3, branches: 2, commits: 1, entries: 2})
	clean := cloneMemory(t, base)
	if _, err := cleaner.New(clean, testConfig(cleaner.NewMemoryLister(clean))).RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := memoryKeys(t, clean)
	for seed := range uint64(10) {
		s := cloneMemory(t, base)
		fs := kvtest.NewFaultStore(s)
		fs.FailRandomly(seed, 0.1, kvtest.FaultError, kvtest.FaultAmbiguousApplied, kvtest.FaultAmbiguousNotApplied)
		c := cleaner.New(fs, testConfig(cleaner.NewMemoryLister(s)))
		sum, err := c.RunOnce(t.Context())
		if err != nil && !errors.Is(err, cleaner.ErrRunFailed) {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if fs.Injected() > 0 && err == nil && sum.Errors == 0 {
			t.Errorf("seed %d: %d faults injected, none reported", seed, fs.Injected())
		}
		fs.Reset()
		for range 3 {
			if _, err := c.RunOnce(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if got := memoryKeys(t, s); !slices.Equal(got, want) {
			t.Fatalf("seed %d: end state differs from a clean run", seed)
		}
	}
}

// TestDryRun changes nothing and reports what the real run then does.
func TestDryRun(t *testing.T) {
	store, cli, lister := newEtcd(t)
	newWorld(t, store, fixture)
	root := store.Prefix()
	before := etcdKeys(t, cli, root)

	cfg := testConfig(lister)
	cfg.DryRun = true
	dry, err := cleaner.New(store, cfg).RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if after := etcdKeys(t, cli, root); !slices.Equal(after, before) {
		t.Fatalf("dry run changed etcd: %d keys before, %d after", len(before), len(after))
	}
	real, err := cleaner.New(store, testConfig(lister)).RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !dry.DryRun || real.DryRun {
		t.Fatalf("DryRun flags: dry %v, real %v", dry.DryRun, real.DryRun)
	}
	dry.DryRun, dry.Duration, real.Duration = false, 0, 0
	if dry.KeysReclaimed == 0 || !equalSummaries(dry, real) {
		t.Fatalf("dry run reported\n%+v\nthe real run did\n%+v", dry, real)
	}
	// The same on a store without a partition counter.
	mem := kv.NewMemoryStore()
	newWorld(t, mem, fixture)
	mcfg := testConfig(cleaner.NewMemoryLister(mem))
	mcfg.DryRun = true
	mdry, err := cleaner.New(mem, mcfg).RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	mreal, err := cleaner.New(mem, testConfig(cleaner.NewMemoryLister(mem))).RunOnce(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	mdry.DryRun, mdry.Duration, mreal.Duration = false, 0, 0
	if !equalSummaries(mdry, mreal) {
		t.Fatalf("memory: dry run reported\n%+v\nthe real run did\n%+v", mdry, mreal)
	}
}

func equalSummaries(a, b cleaner.Summary) bool {
	if !slices.Equal(a.Failures, b.Failures) {
		return false
	}
	a.Failures, b.Failures = nil, nil
	return reflect.DeepEqual(a, b)
}

// TestMaxKeys: a bounded pass stops early and the next ones finish.
func TestMaxKeys(t *testing.T) {
	store := kv.NewMemoryStore()
	w := newWorld(t, store, fixture)
	cfg := testConfig(cleaner.NewMemoryLister(store))
	cfg.MaxKeys = 30
	c := cleaner.New(store, cfg)
	var passes int
	for passes = 1; passes < 100; passes++ {
		sum, err := c.RunOnce(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if sum.KeysReclaimed > cfg.MaxKeys+int64(fixture.entries*2) {
			t.Fatalf("pass reclaimed %d keys, bound %d (plus one partition)", sum.KeysReclaimed, cfg.MaxKeys)
		}
		if !sum.Incomplete {
			break
		}
	}
	if passes < 3 {
		t.Fatalf("done in %d passes; the bound did not bind", passes)
	}
	var all []string
	for _, k := range memoryKeys(t, store) {
		k, _, _ = strings.Cut(k, "=")
		all = append(all, k)
	}
	w.checkOnlyReachable(all, w.liveEntries(all))
}

// TestTimeout: a pass cut by its timeout is incomplete, not failed.
func TestTimeout(t *testing.T) {
	store := kv.NewMemoryStore()
	newWorld(t, store, shape{live: 1, dead: 1, branches: 1, commits: 1, entries: 1})
	cfg := testConfig(cleaner.NewMemoryLister(store))
	cfg.Timeout = time.Nanosecond
	sum, err := cleaner.New(store, cfg).RunOnce(t.Context())
	if err != nil || !sum.Incomplete {
		t.Fatalf("RunOnce with an expired timeout = %+v, %v; want incomplete, no error", sum, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := cleaner.New(store, testConfig(nil)).RunOnce(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("RunOnce on a cancelled context: %v", err)
	}
}

// TestSweepGrace: young orphans are left alone; those named by a
// time-ordered id (UUIDv7, or the ULIDs of earlier versions) by the id's
// time, others until a second pass the grace later.
func TestSweepGrace(t *testing.T) {
	store := kv.NewMemoryStore()
	ctx := t.Context()
	now := time.Now()
	clock := now
	set := func(part []byte) {
		if err := store.Set(ctx, part, keys.Entry([]byte("k")), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	young := keys.StagingPartition("r." + ref.NewID())
	set(young)
	plain := keys.StagingPartition("r.not-a-ulid")
	set(plain)
	plainRepo := keys.RepositoryPartition("r", "plainid")
	set(plainRepo)
	c := cleaner.New(store, cleaner.Config{Sweep: true, SweepGrace: time.Minute, Lister: cleaner.NewMemoryLister(store),
		Now: func() time.Time { return clock }})
	exists := func(part []byte) bool { return slices.Contains(store.Partitions(), string(part)) }

	sum, err := c.RunOnce(ctx)
	if err != nil || sum.KeysReclaimed != 0 || sum.Skipped != 3 {
		t.Fatalf("first pass: %+v, %v; want nothing reclaimed, 3 skipped", sum, err)
	}
	clock = now.Add(30 * time.Second)
	if sum, _ := c.RunOnce(ctx); sum.KeysReclaimed != 0 {
		t.Fatalf("pass within the grace reclaimed %d keys", sum.KeysReclaimed)
	}
	clock = now.Add(2 * time.Minute)
	sum, err = c.RunOnce(ctx)
	if err != nil || sum.OrphanStagingPartitions != 2 || sum.OrphanRepositoryPartitions != 1 {
		t.Fatalf("pass after the grace: %+v, %v", sum, err)
	}
	if exists(young) || exists(plain) || exists(plainRepo) {
		t.Fatalf("orphans left: %v", store.Partitions())
	}
	// Orphans named by an id older than the grace go in a first pass, even
	// for a fresh cleaner, whether the id is a UUIDv7 or a ULID written by
	// an earlier version; a young one stays.
	before := now.Add(-2 * time.Minute)
	olds := [][]byte{
		keys.StagingPartition("r." + uuidV7At(before)),
		keys.StagingPartition("r." + ulidAt(before)),
		keys.RepositoryPartition("r", uuidV7At(before)),
		keys.RepositoryPartition("r", strings.ToUpper(ulidAt(before))),
	}
	for _, p := range olds {
		set(p)
	}
	young = keys.StagingPartition("r." + ref.NewID())
	set(young)
	youngRepo := keys.RepositoryPartition("r", ref.NewID())
	set(youngRepo)
	sum, err = cleaner.New(store, cleaner.Config{Sweep: true, SweepGrace: time.Minute, Lister: cleaner.NewMemoryLister(store)}).RunOnce(ctx)
	if err != nil || sum.OrphanStagingPartitions != 2 || sum.OrphanRepositoryPartitions != 2 ||
		slices.ContainsFunc(olds, exists) || !exists(young) || !exists(youngRepo) {
		t.Fatalf("fresh cleaner: %+v, %v; partitions %v", sum, err, store.Partitions())
	}
	if _, err := store.DropPartition(ctx, youngRepo); err != nil {
		t.Fatal(err)
	}
	if _, err := store.DropPartition(ctx, young); err != nil {
		t.Fatal(err)
	}
	// A fresh cleaner has not seen a plain name before: it waits.
	set(plain)
	if sum, _ := cleaner.New(store, cleaner.Config{Sweep: true, SweepGrace: time.Minute, Lister: cleaner.NewMemoryLister(store)}).RunOnce(ctx); sum.KeysReclaimed != 0 {
		t.Fatalf("a first sighting reclaimed %d keys", sum.KeysReclaimed)
	}
}

// uuidV7At returns an id as ref.NewID makes it, created at t.
func uuidV7At(t time.Time) string {
	u := uuid.Must(uuid.NewV7())
	ms := t.UnixMilli()
	for i := 5; i >= 0; i-- {
		u[i] = byte(ms)
		ms >>= 8
	}
	return hex.EncodeToString(u[:])
}

// ulidAt returns a lower-case ULID created at t, as earlier versions made
// unique ids and staging tokens: 10 base32 digits of milliseconds, 16 of
// randomness.
func ulidAt(t time.Time) string {
	const crockford = "0123456789abcdefghjkmnpqrstvwxyz"
	b := make([]byte, 26)
	ms := t.UnixMilli()
	for i := 9; i >= 0; i-- {
		b[i] = crockford[ms&31]
		ms >>= 5
	}
	for i := 10; i < len(b); i++ {
		b[i] = crockford[rand.IntN(len(crockford))]
	}
	return string(b)
}

// TestLiveQueuedTokenIsKept: a branch delete that stopped after queueing
// its tokens leaves a live branch; its token is kept until it really goes.
func TestLiveQueuedTokenIsKept(t *testing.T) {
	store := kv.NewMemoryStore()
	ctx := t.Context()
	m := ref.New(store, ref.Config{BranchReadWindow: -1})
	rec, err := m.CreateRepository(ctx, "rep", repoParams(), initialCommit())
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.GetBranch(ctx, rec, "main")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.CreateBranch(ctx, rec, "dev", graveler.Branch{CommitID: b.CommitID}); err != nil {
		t.Fatal(err)
	}
	dev, err := m.GetBranch(ctx, rec, "dev")
	if err != nil {
		t.Fatal(err)
	}
	part := keys.StagingPartition(string(dev.StagingToken))
	if err := store.Set(ctx, part, keys.Entry([]byte("k")), []byte("v")); err != nil {
		t.Fatal(err)
	}
	// DeleteBranch crashes after queueing the tokens.
	fs := kvtest.NewFaultStore(store)
	fs.FailAt(3, kvtest.FaultCrash) // read branch, queue token, then the re-read fails
	if err := ref.New(fs, ref.Config{BranchReadWindow: -1}).DeleteBranch(ctx, rec, "dev"); err == nil {
		t.Fatal("crashed DeleteBranch succeeded")
	}
	c := cleaner.New(store, testConfig(cleaner.NewMemoryLister(store)))
	sum, err := c.RunOnce(ctx)
	if err != nil || sum.Skipped != 1 || sum.TokensReclaimed != 0 {
		t.Fatalf("pass with a live queued token: %+v, %v", sum, err)
	}
	if _, _, err := store.Get(ctx, part, keys.Entry([]byte("k"))); err != nil {
		t.Fatalf("live staged entry: %v", err)
	}
	// The delete completes: now it goes.
	if err := m.DeleteBranch(ctx, rec, "dev"); err != nil {
		t.Fatal(err)
	}
	if sum, err := c.RunOnce(ctx); err != nil || sum.TokensReclaimed != 1 {
		t.Fatalf("pass after the delete: %+v, %v", sum, err)
	}
	if slices.Contains(store.Partitions(), string(part)) {
		t.Fatal("deleted branch's staging partition kept")
	}
}
