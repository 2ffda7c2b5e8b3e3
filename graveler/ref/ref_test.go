package ref_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/ref"
	"graveler/graveler/ref/refpb"
	"graveler/keys"
	"graveler/kv"
)

// suite lists every behavioural test; each runs against every store.
var suite = []struct {
	name string
	fn   func(t *testing.T, newStore newStoreFunc)
}{
	{"RepositoryLifecycle", testRepositoryLifecycle},
	{"RepositoryInitialExpiry", testRepositoryInitialExpiry},
	{"BareRepository", testBareRepository},
	{"Validation", testValidation},
	{"Branches", testBranches},
	{"BranchUpdate", testBranchUpdate},
	{"BranchUpdateConcurrent", testBranchUpdateConcurrent},
	{"AmortizedReads", testAmortizedReads},
	{"Tags", testTags},
	{"Commits", testCommits},
	{"LogAndMergeBase", testLogAndMergeBase},
	{"ListCommits", testListCommits},
	{"Refs", testRefs},
	{"FormatVersion", testFormatVersion},
	{"FaultsCreateRepository", testFaultsCreateRepository},
	{"FaultsDeleteRepository", testFaultsDeleteRepository},
	{"ChangesAndEffects", testChangesAndEffects},
	{"NamespaceClaims", testNamespaceClaims},
}

func runSuite(t *testing.T, newStore newStoreFunc) {
	for _, tc := range suite {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newStore) })
	}
}

func TestMemory(t *testing.T) { runSuite(t, memoryStore) }

// TestEtcd runs the same suite on a real embedded etcd: one server, and a
// fresh root prefix (so an empty store) per test.
func TestEtcd(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	n := 0
	runSuite(t, func(t *testing.T) kv.Store {
		n++
		return etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{Prefix: fmt.Sprintf("/ref-test-%d", n)})
	})
}

func testRepositoryLifecycle(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore(t), nil)
	ctx := e.ctx
	r := e.createRepo("repo-b")
	e.createRepo("repo-a")
	e.createRepo("repo-c")
	if r.State != graveler.RepositoryStateActive || r.UniqueID == "" || r.DefaultBranchID != "main" || !strings.HasPrefix(string(r.StorageNamespace), "mem://bucket/ns-") {
		t.Fatalf("created record = %+v", r.Repository)
	}
	if !r.CreationDate.Equal(e.clock.Now()) {
		t.Fatalf("creation date %v, want now %v", r.CreationDate, e.clock.Now())
	}
	got, err := e.m.GetRepository(ctx, "repo-b")
	if err != nil {
		t.Fatal(err)
	}
	if *got.Repository != *r.Repository {
		t.Fatalf("get = %+v, want %+v", got.Repository, r.Repository)
	}
	_, err = e.m.CreateRepository(ctx, "repo-b", repoParams(), initialCommit())
	wantErr(t, err, graveler.ErrRepositoryExists)
	_, err = e.m.CreateBareRepository(ctx, "repo-b", repoParams())
	wantErr(t, err, graveler.ErrRepositoryExists)

	// The default branch points at the initial commit, an empty tree.
	b, err := e.m.GetBranch(ctx, r, "main")
	if err != nil {
		t.Fatal(err)
	}
	c, err := e.m.GetCommit(ctx, r, b.CommitID)
	if err != nil {
		t.Fatal(err)
	}
	if c.MetaRangeID != "" || len(c.Parents) != 0 || c.Generation != 1 || c.Message != "Repository created" || b.StagingToken == "" {
		t.Fatalf("initial commit %+v, branch %+v", c, b)
	}

	names := func(after string) []string {
		var out []string
		for _, rec := range collect(t, e.m.ListRepositories(ctx, graveler.ListOptions{After: after})) {
			out = append(out, string(rec.RepositoryID))
		}
		return out
	}
	if got := names(""); !slices.Equal(got, []string{"repo-a", "repo-b", "repo-c"}) {
		t.Fatalf("list = %v", got)
	}
	if got := names("repo-a"); !slices.Equal(got, []string{"repo-b", "repo-c"}) {
		t.Fatalf("list after repo-a = %v", got)
	}
	if got := names("repo-bb"); !slices.Equal(got, []string{"repo-c"}) {
		t.Fatalf("list after repo-bb = %v", got)
	}

	// Delete: invisible at once, queued for the cleaner, name reusable.
	if err := e.m.DeleteRepository(ctx, "repo-b"); err != nil {
		t.Fatal(err)
	}
	_, err = e.m.GetRepository(ctx, "repo-b")
	wantErr(t, err, graveler.ErrRepositoryNotFound)
	wantErr(t, e.m.DeleteRepository(ctx, "repo-b"), graveler.ErrRepositoryNotFound)
	if got := names(""); !slices.Equal(got, []string{"repo-a", "repo-c"}) {
		t.Fatalf("list after delete = %v", got)
	}
	if !e.queued(string(r.RepositoryID), string(r.UniqueID)) {
		t.Fatal("deleted repository not queued in graveler_deleted")
	}
	r2 := e.createRepo("repo-b")
	if r2.UniqueID == r.UniqueID {
		t.Fatal("re-created repository reuses the unique id")
	}
	if _, err := e.m.GetBranch(ctx, r2, "main"); err != nil {
		t.Fatal(err)
	}
	// The old incarnation's partition is untouched (for the cleaner) but
	// unreachable through the new record.
	if _, err := e.m.GetBranch(ctx, r, "main"); err != nil {
		t.Fatalf("old partition should still hold its branch for the cleaner: %v", err)
	}
}

// queued reports whether graveler_deleted names the repository incarnation.
func (e *env) queued(repo, uid string) bool {
	_, _, err := e.store.Get(e.ctx, keys.Deleted(), keys.DeletedRepository(repo, uid))
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		e.t.Fatal(err)
	}
	return err == nil
}

func (e *env) tokenQueued(tok graveler.StagingToken) bool {
	_, _, err := e.store.Get(e.ctx, keys.Deleted(), keys.DeletedToken(string(tok)))
	if err != nil && !errors.Is(err, kv.ErrNotFound) {
		e.t.Fatal(err)
	}
	return err == nil
}

func (e *env) rawRepository(id string) (*graveler.Repository, bool) {
	data, _, err := e.store.Get(e.ctx, keys.Graveler(), keys.Repository(id))
	if errors.Is(err, kv.ErrNotFound) {
		return nil, false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	r, err := ref.DecodeRepository(data)
	if err != nil {
		e.t.Fatal(err)
	}
	return r, true
}

func testRepositoryInitialExpiry(t *testing.T, newStore newStoreFunc) {
	store := newStore(t)
	e := newEnv(t, store, nil)
	// A creation that dies after its first write leaves an initial record.
	fs := &faultStore{Store: store}
	fs.arm(faultCrash, 3) // Get, SetIf initial, then the claim's read fails
	_, err := e.managerOn(fs).CreateRepository(e.ctx, "stuck", repoParams(), initialCommit())
	if err == nil {
		t.Fatal("crashed creation succeeded")
	}
	rec, ok := e.rawRepository("stuck")
	if !ok || rec.State != graveler.RepositoryStateInitial {
		t.Fatalf("record after crash = %+v, %v", rec, ok)
	}
	_, err = e.m.GetRepository(e.ctx, "stuck")
	wantErr(t, err, graveler.ErrRepositoryNotFound)
	if got := collect(t, e.m.ListRepositories(e.ctx, graveler.ListOptions{})); len(got) != 0 {
		t.Fatalf("initial repository listed: %v", got)
	}
	// Young: a concurrent creation may be in progress, so the name is taken.
	_, err = e.m.CreateRepository(e.ctx, "stuck", repoParams(), initialCommit())
	wantErr(t, err, graveler.ErrRepositoryExists)
	wantErr(t, e.m.DeleteRepository(e.ctx, "stuck"), graveler.ErrRepositoryNotFound)

	// Past the timeout, a Get retires it: queued and removed.
	e.clock.Advance(e.cfg.RepositoryCreationTimeout)
	_, err = e.m.GetRepository(e.ctx, "stuck")
	wantErr(t, err, graveler.ErrRepositoryNotFound)
	if _, ok := e.rawRepository("stuck"); ok {
		t.Fatal("expired initial record not removed")
	}
	if !e.queued("stuck", string(rec.UniqueID)) {
		t.Fatal("expired initial record not queued")
	}
	e.createRepo("stuck")

	// An expired initial record met by a create is queued and replaced.
	fs.arm(faultCrash, 3)
	if _, err := e.managerOn(fs).CreateRepository(e.ctx, "stuck2", repoParams(), initialCommit()); err == nil {
		t.Fatal("crashed creation succeeded")
	}
	rec2, _ := e.rawRepository("stuck2")
	e.clock.Advance(2 * e.cfg.RepositoryCreationTimeout)
	e.createRepo("stuck2")
	if !e.queued("stuck2", string(rec2.UniqueID)) {
		t.Fatal("replaced initial record not queued")
	}
}

func testBareRepository(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore(t), nil)
	r, err := e.m.CreateBareRepository(e.ctx, "bare", repoParams())
	if err != nil {
		t.Fatal(err)
	}
	if r.State != graveler.RepositoryStateActive {
		t.Fatalf("bare state %v", r.State)
	}
	if got := collect(t, e.m.ListBranches(e.ctx, r, graveler.ListBranchesOptions{})); len(got) != 0 {
		t.Fatalf("bare repository has branches %v", got)
	}
	if got := collect(t, e.m.ListCommits(e.ctx, r, graveler.ListCommitsOptions{})); len(got) != 0 {
		t.Fatalf("bare repository has commits %v", got)
	}
	_, err = e.m.GetBranch(e.ctx, r, "main")
	wantErr(t, err, graveler.ErrBranchNotFound)
}

func testValidation(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore(t), nil)
	ctx := e.ctx
	bad := []struct {
		name string
		err  error
	}{
		{"", graveler.ErrInvalidRepositoryID},
		{"ab", graveler.ErrInvalidRepositoryID},
		{"Upper", graveler.ErrInvalidRepositoryID},
		{"-lead", graveler.ErrInvalidRepositoryID},
		{"has/slash", graveler.ErrInvalidRepositoryID},
	}
	for _, b := range bad {
		_, err := e.m.CreateRepository(ctx, graveler.RepositoryID(b.name), repoParams(), initialCommit())
		wantErr(t, err, b.err)
		wantErr(t, err, graveler.ErrInvalidArgument)
		_, err = e.m.GetRepository(ctx, graveler.RepositoryID(b.name))
		wantErr(t, err, graveler.ErrInvalidArgument)
	}
	p := repoParams()
	p.StorageNamespace = "/tmp/x"
	_, err := e.m.CreateRepository(ctx, "repo1", p, initialCommit())
	wantErr(t, err, graveler.ErrInvalidStorageNamespace)
	p = repoParams()
	p.DefaultBranchID = "bad~name"
	_, err = e.m.CreateRepository(ctx, "repo1", p, initialCommit())
	wantErr(t, err, graveler.ErrInvalidBranchID)
	ic := initialCommit()
	ic.Parents = []graveler.CommitID{graveler.CommitID(strings.Repeat("a", 64))}
	_, err = e.m.CreateRepository(ctx, "repo1", p, ic)
	wantErr(t, err, graveler.ErrInvalidArgument)

	r := e.createRepo("repo1")
	b, _ := e.m.GetBranch(ctx, r, "main")
	for _, id := range []graveler.BranchID{"", "a^b", "x..y", "HEAD", "a.lock", graveler.BranchID(strings.Repeat("f", 64))} {
		wantErr(t, e.m.CreateBranch(ctx, r, id, *b), graveler.ErrInvalidBranchID)
	}
	wantErr(t, e.m.CreateBranch(ctx, r, "ok", graveler.Branch{CommitID: "nothex"}), graveler.ErrInvalidCommitID)
	wantErr(t, e.m.CreateBranch(ctx, r, "ok", graveler.Branch{CommitID: b.CommitID, StagingToken: "bad/token"}), graveler.ErrInvalidArgument)
	wantErr(t, e.m.CreateTag(ctx, r, "t@1", b.CommitID), graveler.ErrInvalidTagID)
	wantErr(t, e.m.CreateTag(ctx, r, "t1", "abc"), graveler.ErrInvalidCommitID)
	_, err = e.m.GetCommit(ctx, r, "abc")
	wantErr(t, err, graveler.ErrInvalidCommitID)
	_, _, err = e.m.GetCommitByPrefix(ctx, r, "abc")
	wantErr(t, err, graveler.ErrInvalidCommitID)
	_, err = e.m.AddCommit(ctx, r, graveler.Commit{Parents: []graveler.CommitID{"zz"}})
	wantErr(t, err, graveler.ErrInvalidCommitID)
	wantErr(t, e.m.DeleteStagingTokens(ctx, []graveler.StagingToken{""}), graveler.ErrInvalidArgument)
	_, err = e.m.GetBranch(ctx, nil, "main")
	wantErr(t, err, graveler.ErrInvalidArgument)
}

func testBranches(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore(t), nil)
	ctx := e.ctx
	r := e.createRepo("branches")
	main, err := e.m.GetBranch(ctx, r, "main")
	if err != nil {
		t.Fatal(err)
	}
	c2 := e.commit(r, "second", main.CommitID)
	for _, name := range []string{"feature-b", "feature-a", "zeta"} {
		if err := e.m.CreateBranch(ctx, r, graveler.BranchID(name), graveler.Branch{CommitID: c2}); err != nil {
			t.Fatal(err)
		}
	}
	wantErr(t, e.m.CreateBranch(ctx, r, "zeta", graveler.Branch{CommitID: c2}), graveler.ErrBranchExists)
	fa, err := e.m.GetBranch(ctx, r, "feature-a")
	if err != nil {
		t.Fatal(err)
	}
	fb, _ := e.m.GetBranch(ctx, r, "feature-b")
	if fa.CommitID != c2 || fa.StagingToken == "" || fa.StagingToken == fb.StagingToken || fa.StagingToken == main.StagingToken {
		t.Fatalf("branches need distinct fresh tokens: %+v %+v %+v", fa, fb, main)
	}
	_, err = e.m.GetBranch(ctx, r, "missing")
	wantErr(t, err, graveler.ErrBranchNotFound)

	byName := func(after string) []string {
		var out []string
		for _, b := range collect(t, e.m.ListBranches(ctx, r, graveler.ListBranchesOptions{After: after})) {
			out = append(out, string(b.BranchID))
		}
		return out
	}
	if got := byName(""); !slices.Equal(got, []string{"feature-a", "feature-b", "main", "zeta"}) {
		t.Fatalf("by name: %v", got)
	}
	if got := byName("feature-b"); !slices.Equal(got, []string{"main", "zeta"}) {
		t.Fatalf("by name after feature-b: %v", got)
	}
	byCommit := func(after string) []string {
		var out []string
		for _, b := range collect(t, e.m.ListBranches(ctx, r, graveler.ListBranchesOptions{After: after, Order: graveler.BranchListByCommitID})) {
			out = append(out, string(b.CommitID)+"/"+string(b.BranchID))
		}
		return out
	}
	all := byCommit("")
	want := []string{string(c2) + "/feature-a", string(c2) + "/feature-b", string(c2) + "/zeta", string(main.CommitID) + "/main"}
	slices.Sort(want)
	if !slices.Equal(all, want) {
		t.Fatalf("by commit: %v, want %v", all, want)
	}
	if got := byCommit(all[1]); !slices.Equal(got, all[2:]) {
		t.Fatalf("by commit after %s: %v", all[1], got)
	}

	// Delete: default refused; tokens queued; record gone.
	wantErr(t, e.m.DeleteBranch(ctx, r, "main"), graveler.ErrDeleteDefaultBranch)
	sealed := graveler.StagingToken("sealed-one")
	if err := e.m.BranchUpdate(ctx, r, "zeta", func(b *graveler.Branch) (*graveler.Branch, error) {
		b.SealedTokens = append(b.SealedTokens, sealed)
		return b, nil
	}); err != nil {
		t.Fatal(err)
	}
	zeta, _ := e.m.GetBranch(ctx, r, "zeta")
	if err := e.m.DeleteBranch(ctx, r, "zeta"); err != nil {
		t.Fatal(err)
	}
	if !e.tokenQueued(zeta.StagingToken) || !e.tokenQueued(sealed) {
		t.Fatal("deleted branch's tokens not queued")
	}
	_, err = e.m.GetBranch(ctx, r, "zeta")
	wantErr(t, err, graveler.ErrBranchNotFound)
	wantErr(t, e.m.DeleteBranch(ctx, r, "zeta"), graveler.ErrBranchNotFound)

	if err := e.m.DeleteStagingTokens(ctx, []graveler.StagingToken{"t-1", "t-2"}); err != nil {
		t.Fatal(err)
	}
	if !e.tokenQueued("t-1") || !e.tokenQueued("t-2") {
		t.Fatal("DeleteStagingTokens did not queue")
	}
}

func testBranchUpdate(t *testing.T, newStore newStoreFunc) {
	store := newStore(t)
	e := newEnv(t, store, func(c *ref.Config) {
		c.BranchUpdateMaxRetries = 3
		c.BranchUpdateBackoff = time.Microsecond
	})
	ctx := e.ctx
	r := e.createRepo("update")
	before, _ := e.m.GetBranch(ctx, r, "main")

	// ErrSkipUpdate ends without writing.
	if err := e.m.BranchUpdate(ctx, r, "main", func(*graveler.Branch) (*graveler.Branch, error) {
		return nil, graveler.ErrSkipUpdate
	}); err != nil {
		t.Fatal(err)
	}
	// f's own error comes back as is.
	errMine := errors.New("mine")
	wantErr(t, e.m.BranchUpdate(ctx, r, "main", func(*graveler.Branch) (*graveler.Branch, error) {
		return nil, errMine
	}), errMine)
	after, _ := e.m.GetBranch(ctx, r, "main")
	if !slices.Equal(after.SealedTokens, before.SealedTokens) || after.StagingToken != before.StagingToken {
		t.Fatal("skipped update wrote")
	}
	wantErr(t, e.m.BranchUpdate(ctx, r, "nope", func(b *graveler.Branch) (*graveler.Branch, error) { return b, nil }), graveler.ErrBranchNotFound)
	wantErr(t, e.m.BranchUpdate(ctx, r, "main", func(b *graveler.Branch) (*graveler.Branch, error) {
		b.CommitID = "bad"
		return b, nil
	}), graveler.ErrInvalidCommitID)

	// A writer that always changes the branch under f makes every SetIf
	// lose: after MaxRetries retries, ErrTooManyRetries.
	calls := 0
	retriesBefore := counter(t, "graveler_branch_update_retries_total")
	err := e.m.BranchUpdate(ctx, r, "main", func(b *graveler.Branch) (*graveler.Branch, error) {
		calls++
		if err := e.m.BranchUpdate(ctx, r, "main", func(in *graveler.Branch) (*graveler.Branch, error) {
			in.StagingToken = graveler.StagingToken(fmt.Sprintf("interloper-%d", calls))
			return in, nil
		}); err != nil {
			return nil, err
		}
		b.StagingToken = "loser"
		return b, nil
	})
	wantErr(t, err, graveler.ErrTooManyRetries)
	wantErr(t, err, graveler.ErrConflict)
	if calls != 4 {
		t.Fatalf("f called %d times, want 1 + 3 retries", calls)
	}
	if got := counter(t, "graveler_branch_update_retries_total") - retriesBefore; got < 3 {
		t.Fatalf("retries counter grew by %v, want >= 3", got)
	}
	got, _ := e.m.GetBranch(ctx, r, "main")
	if got.StagingToken != "interloper-4" {
		t.Fatalf("branch = %+v", got)
	}
}

// testBranchUpdateConcurrent: 32 goroutines each append their own tokens
// to one branch; every append must land exactly once.
func testBranchUpdateConcurrent(t *testing.T, newStore newStoreFunc) {
	// Retries are generous: the point is exactly-once, not the give-up path
	// (testBranchUpdate covers it), and a 2-core machine under -race
	// schedules the contenders unevenly.
	e := newEnv(t, newStore(t), func(c *ref.Config) { c.BranchUpdateMaxRetries = 200 })
	r := e.createRepo("concurrent")
	const workers, each = 32, 4
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				tok := graveler.StagingToken(fmt.Sprintf("w%02d-%d", w, i))
				errs <- e.m.BranchUpdate(e.ctx, r, "main", func(b *graveler.Branch) (*graveler.Branch, error) {
					b.SealedTokens = append(b.SealedTokens, tok)
					return b, nil
				})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	b, err := e.m.GetBranch(e.ctx, r, "main")
	if err != nil {
		t.Fatal(err)
	}
	if len(b.SealedTokens) != workers*each {
		t.Fatalf("%d tokens landed, want %d", len(b.SealedTokens), workers*each)
	}
	seen := map[graveler.StagingToken]bool{}
	for _, tok := range b.SealedTokens {
		if seen[tok] {
			t.Fatalf("token %s landed twice", tok)
		}
		seen[tok] = true
	}
	// Each worker's own appends keep their order.
	for w := range workers {
		last := -1
		for i, tok := range b.SealedTokens {
			if strings.HasPrefix(string(tok), fmt.Sprintf("w%02d-", w)) {
				if i < last {
					t.Fatalf("worker %d's tokens out of order", w)
				}
				last = i
			}
		}
	}
}

func testAmortizedReads(t *testing.T, newStore newStoreFunc) {
	cs := &countingStore{Store: newStore(t)}
	e := newEnv(t, cs, func(c *ref.Config) { c.BranchReadWindow = 20 * time.Millisecond })
	ctx := e.ctx
	r := e.createRepo("amortized")

	// Many concurrent readers share few kv reads.
	const readers = 64
	start := cs.gets.Load()
	savedBefore := counter(t, "graveler_branch_reads_saved_total")
	var wg sync.WaitGroup
	for range readers {
		wg.Go(func() {
			if _, err := e.m.GetBranch(ctx, r, "main"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := cs.gets.Load() - start; n > readers/4 {
		t.Fatalf("%d concurrent GetBranch made %d kv reads", readers, n)
	} else {
		t.Logf("%d concurrent GetBranch made %d kv reads", readers, n)
		// Other tests may run in parallel in this process: at least ours.
		if saved := counter(t, "graveler_branch_reads_saved_total") - savedBefore; saved < float64(readers-n) {
			t.Fatalf("reads saved counter grew by %v, want >= %d", saved, readers-n)
		}
	}

	// A read in flight when a write completes is not joined by a reader
	// that starts after the write: it must see the write.
	readDone, release := cs.hold()
	first := make(chan *graveler.Branch)
	go func() {
		b, err := e.m.GetBranch(ctx, r, "main")
		if err != nil {
			t.Error(err)
		}
		first <- b
	}()
	<-readDone // the first read has its (old) value and is still in flight
	if err := e.m.BranchUpdate(ctx, r, "main", func(b *graveler.Branch) (*graveler.Branch, error) {
		b.StagingToken = "after-write"
		return b, nil
	}); err != nil {
		t.Fatal(err)
	}
	b, err := e.m.GetBranch(ctx, r, "main")
	if err != nil {
		t.Fatal(err)
	}
	if b.StagingToken != "after-write" {
		t.Fatalf("read after write saw %q", b.StagingToken)
	}
	release()
	if old := <-first; old.StagingToken == "after-write" {
		t.Fatal("the held read should have returned the value it read before the write")
	}

	// Readers and a writer together: every read that starts after a write
	// returned sees that write or a later one.
	var mu sync.Mutex
	written := 0
	stop := make(chan struct{})
	var readers2 sync.WaitGroup
	for range 8 {
		readers2.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				floor := written
				mu.Unlock()
				b, err := e.m.GetBranch(ctx, r, "main")
				if err != nil {
					t.Error(err)
					return
				}
				var got int
				fmt.Sscanf(string(b.StagingToken), "v%d", &got)
				if got < floor {
					t.Errorf("read started after write %d saw %d", floor, got)
					return
				}
			}
		})
	}
	for i := 1; i <= 30; i++ {
		if err := e.m.BranchUpdate(ctx, r, "main", func(b *graveler.Branch) (*graveler.Branch, error) {
			b.StagingToken = graveler.StagingToken(fmt.Sprintf("v%d", i))
			return b, nil
		}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		written = i
		mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	close(stop)
	readers2.Wait()

	// A reader that gives up does not fail the others of its batch.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = e.m.GetBranch(cctx, r, "main")
	wantErr(t, err, context.Canceled)
	if _, err := e.m.GetBranch(ctx, r, "main"); err != nil {
		t.Fatal(err)
	}
	_, err = e.m.GetBranch(ctx, r, "missing")
	wantErr(t, err, graveler.ErrBranchNotFound)
}

func testTags(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore(t), nil)
	ctx := e.ctx
	r := e.createRepo("tags")
	main, _ := e.m.GetBranch(ctx, r, "main")
	c2 := e.commit(r, "two", main.CommitID)
	for _, tg := range []string{"v2", "v1", "v3"} {
		if err := e.m.CreateTag(ctx, r, graveler.TagID(tg), c2); err != nil {
			t.Fatal(err)
		}
	}
	wantErr(t, e.m.CreateTag(ctx, r, "v1", main.CommitID), graveler.ErrTagExists)
	got, err := e.m.GetTag(ctx, r, "v1")
	if err != nil || got != c2 {
		t.Fatalf("GetTag = %s, %v", got, err)
	}
	_, err = e.m.GetTag(ctx, r, "v9")
	wantErr(t, err, graveler.ErrTagNotFound)
	list := func(after string) []string {
		var out []string
		for _, tr := range collect(t, e.m.ListTags(ctx, r, graveler.ListOptions{After: after})) {
			out = append(out, string(tr.TagID))
			if tr.CommitID != c2 {
				t.Fatalf("tag %s -> %s", tr.TagID, tr.CommitID)
			}
		}
		return out
	}
	if l := list(""); !slices.Equal(l, []string{"v1", "v2", "v3"}) {
		t.Fatalf("tags %v", l)
	}
	if l := list("v1"); !slices.Equal(l, []string{"v2", "v3"}) {
		t.Fatalf("tags after v1 %v", l)
	}
	if err := e.m.DeleteTag(ctx, r, "v2"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, e.m.DeleteTag(ctx, r, "v2"), graveler.ErrTagNotFound)
	if l := list(""); !slices.Equal(l, []string{"v1", "v3"}) {
		t.Fatalf("tags after delete %v", l)
	}
}

func testCommits(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore(t), nil)
	ctx := e.ctx
	r := e.createRepo("commits")
	main, _ := e.m.GetBranch(ctx, r, "main")
	date := time.Date(2025, 5, 6, 7, 8, 9, 123456789, time.FixedZone("x", 3600))
	c := graveler.Commit{Committer: "c", Message: "m", MetaRangeID: "mr1", CreationDate: date,
		Parents: []graveler.CommitID{main.CommitID}, Metadata: graveler.Metadata{"b": "2", "a": "1"}}
	id, err := e.m.AddCommit(ctx, r, c)
	if err != nil {
		t.Fatal(err)
	}
	again, err := e.m.AddCommit(ctx, r, c)
	if err != nil || again != id {
		t.Fatalf("re-add = %s, %v; want %s", again, err, id)
	}
	got, err := e.m.GetCommit(ctx, r, id)
	if err != nil {
		t.Fatal(err)
	}
	wantDate := date.Truncate(time.Microsecond).UTC()
	if got.Generation != 2 || got.Version != graveler.CurrentCommitVersion || !got.CreationDate.Equal(wantDate) ||
		got.CreationDate.Location() != time.UTC || got.Metadata["a"] != "1" || got.MetaRangeID != "mr1" ||
		!slices.Equal(got.Parents, c.Parents) {
		t.Fatalf("stored commit %+v", got)
	}
	// The id is the hash of exactly what was stored: re-adding the stored
	// record (as a restore does) gives the same id.
	if ref.ComputeCommitID(got) != id {
		t.Fatal("id is not the hash of the stored record")
	}
	restored, err := e.m.AddCommit(ctx, r, *got)
	if err != nil || restored != id {
		t.Fatalf("restore re-add = %s, %v", restored, err)
	}
	// Every field is part of the id.
	variants := []func(*graveler.Commit){
		func(c *graveler.Commit) { c.Committer = "d" },
		func(c *graveler.Commit) { c.Message = "n" },
		func(c *graveler.Commit) { c.MetaRangeID = "mr2" },
		func(c *graveler.Commit) { c.CreationDate = c.CreationDate.Add(time.Microsecond) },
		func(c *graveler.Commit) { c.Metadata = graveler.Metadata{"a": "1"} },
		func(c *graveler.Commit) { c.Generation = 7 },
		func(c *graveler.Commit) { c.Version = 2 },
		func(c *graveler.Commit) { c.Parents = nil },
	}
	for i, v := range variants {
		cc := *got
		cc.Metadata = maps_clone(got.Metadata)
		v(&cc)
		if ref.ComputeCommitID(&cc) == id {
			t.Fatalf("variant %d has the same id", i)
		}
	}
	// Metadata order does not matter; sub-precision date digits do not.
	cc := *got
	cc.CreationDate = cc.CreationDate.Add(999 * time.Nanosecond).In(time.Local)
	if ref.ComputeCommitID(&cc) != id {
		t.Fatal("sub-microsecond or zone difference changed the id")
	}

	// Explicit generation and date are preserved (restore).
	exp := graveler.Commit{Committer: "r", Message: "restored", CreationDate: date, Generation: 42, Parents: []graveler.CommitID{id}}
	rid, err := e.m.AddCommit(ctx, r, exp)
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := e.m.GetCommit(ctx, r, rid)
	if rc.Generation != 42 || !rc.CreationDate.Equal(wantDate) {
		t.Fatalf("restored commit %+v", rc)
	}
	// Generation needs existing parents when computed.
	_, err = e.m.AddCommit(ctx, r, graveler.Commit{Parents: []graveler.CommitID{graveler.CommitID(strings.Repeat("0", 64))}})
	wantErr(t, err, graveler.ErrCommitNotFound)

	// Prefixes.
	c2, full, err := e.m.GetCommitByPrefix(ctx, r, id[:8])
	if err != nil || full != id || c2.Message != "m" {
		t.Fatalf("by prefix: %s, %v", full, err)
	}
	if _, full, err = e.m.GetCommitByPrefix(ctx, r, id); err != nil || full != id {
		t.Fatalf("by full id: %s %v", full, err)
	}
	_, _, err = e.m.GetCommitByPrefix(ctx, r, "ffffffff")
	if !errors.Is(err, graveler.ErrCommitNotFound) && !strings.HasPrefix(string(id), "ffffffff") {
		t.Fatalf("missing prefix: %v", err)
	}
	_, _, err = e.m.GetCommitByPrefix(ctx, r, "abc")
	wantErr(t, err, graveler.ErrInvalidArgument)
	// Make two commits share a prefix, by brute force over messages.
	ids := map[string]graveler.CommitID{}
	var amb string
	for i := 0; amb == ""; i++ {
		cid := e.commit(r, fmt.Sprintf("amb-%d", i), id)
		p := string(cid[:graveler.MinCommitPrefixLen])
		if _, ok := ids[p]; ok {
			amb = p
		}
		ids[p] = cid
	}
	_, _, err = e.m.GetCommitByPrefix(ctx, r, graveler.CommitID(amb))
	wantErr(t, err, graveler.ErrRefAmbiguous)
	_, err = e.m.GetCommit(ctx, r, graveler.CommitID(strings.Repeat("0", 64)))
	wantErr(t, err, graveler.ErrCommitNotFound)
}

func maps_clone(m graveler.Metadata) graveler.Metadata {
	if m == nil {
		return nil
	}
	out := graveler.Metadata{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// history builds
//
//	root - a1 - a2 ------- m1 - a3      (main line, m1 merges b2)
//	        \             /
//	         b1 - b2 ----+
//	               \
//	                c1                  (unrelated to m1 except via b2)
func history(e *env, r *graveler.RepositoryRecord) map[string]graveler.CommitID {
	main, _ := e.m.GetBranch(e.ctx, r, "main")
	h := map[string]graveler.CommitID{"root": main.CommitID}
	h["a1"] = e.commit(r, "a1", h["root"])
	h["b1"] = e.commit(r, "b1", h["a1"])
	h["a2"] = e.commit(r, "a2", h["a1"])
	h["b2"] = e.commit(r, "b2", h["b1"])
	h["c1"] = e.commit(r, "c1", h["b2"])
	h["m1"] = e.commit(r, "m1", h["a2"], h["b2"])
	h["a3"] = e.commit(r, "a3", h["m1"])
	return h
}

func testLogAndMergeBase(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore(t), nil)
	ctx := e.ctx
	r := e.createRepo("log")
	h := history(e, r)
	name := map[graveler.CommitID]string{}
	for k, v := range h {
		name[v] = k
	}
	logNames := func(from string, opts graveler.LogOptions) []string {
		var out []string
		for c := range collectSeq(t, e.m.Log(ctx, r, h[from], opts)) {
			out = append(out, name[c.CommitID])
		}
		return out
	}
	// Generations: root 1, a1 2, b1 3, a2 3, b2 4, m1 5, a3 6. Equal
	// generations order by date (b2's line: b1 before a2 in time).
	if got := logNames("a3", graveler.LogOptions{}); !slices.Equal(got, []string{"a3", "m1", "b2", "a2", "b1", "a1", "root"}) {
		t.Fatalf("log = %v", got)
	}
	if got := logNames("a3", graveler.LogOptions{FirstParent: true}); !slices.Equal(got, []string{"a3", "m1", "a2", "a1", "root"}) {
		t.Fatalf("first-parent log = %v", got)
	}
	a2, _ := e.m.GetCommit(ctx, r, h["a2"])
	if got := logNames("a3", graveler.LogOptions{Since: a2.CreationDate}); !slices.Equal(got, []string{"a3", "m1", "b2", "a2"}) {
		t.Fatalf("log since a2 = %v", got)
	}
	// Stopping early is fine.
	for range e.m.Log(ctx, r, h["a3"], graveler.LogOptions{}) {
		break
	}
	for _, err := range e.m.Log(ctx, r, graveler.CommitID(strings.Repeat("1", 64)), graveler.LogOptions{}) {
		wantErr(t, err, graveler.ErrCommitNotFound)
	}

	base := func(l, rr string) string {
		t.Helper()
		c, err := e.m.FindMergeBase(ctx, r, h[l], h[rr])
		if err != nil {
			t.Fatal(err)
		}
		return name[c.CommitID]
	}
	for _, tc := range [][3]string{
		{"a2", "b2", "a1"}, {"b2", "a2", "a1"}, {"a3", "c1", "b2"}, {"c1", "a3", "b2"},
		{"a3", "a2", "a2"}, {"a1", "a1", "a1"}, {"m1", "b1", "b1"}, {"root", "c1", "root"},
	} {
		if got := base(tc[0], tc[1]); got != tc[2] {
			t.Fatalf("merge base of %s and %s = %s, want %s", tc[0], tc[1], got, tc[2])
		}
	}
	// Unrelated histories.
	lone, err := e.m.AddCommit(ctx, r, graveler.Commit{Message: "lone", CreationDate: e.clock.Now()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.m.FindMergeBase(ctx, r, lone, h["a3"])
	wantErr(t, err, graveler.ErrNoMergeBase)
}

func collectSeq(t *testing.T, seq func(func(*graveler.CommitRecord, error) bool)) func(func(*graveler.CommitRecord) bool) {
	return func(yield func(*graveler.CommitRecord) bool) {
		for c, err := range seq {
			if err != nil {
				t.Fatal(err)
			}
			if !yield(c) {
				return
			}
		}
	}
}

func testListCommits(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore(t), nil)
	ctx := e.ctx
	r := e.createRepo("listcommits")
	h := history(e, r)
	var all []graveler.CommitID
	for _, v := range h {
		all = append(all, v)
	}
	slices.Sort(all)
	ids := func(opts graveler.ListCommitsOptions) []graveler.CommitID {
		var out []graveler.CommitID
		for _, c := range collect(t, e.m.ListCommits(ctx, r, opts)) {
			out = append(out, c.CommitID)
		}
		return out
	}
	if got := ids(graveler.ListCommitsOptions{}); !slices.Equal(got, all) {
		t.Fatalf("list = %v, want %v", got, all)
	}
	if got := ids(graveler.ListCommitsOptions{After: string(all[2])}); !slices.Equal(got, all[3:]) {
		t.Fatalf("list after = %v", got)
	}
	// First parents: a1 (of b1, a2), root, b1 (of b2), b2 (of c1), a2 (of
	// m1), m1 (of a3). Left: c1 and a3 — b2 is m1's second parent only but
	// c1's first parent.
	want := []graveler.CommitID{h["c1"], h["a3"]}
	slices.Sort(want)
	if got := ids(graveler.ListCommitsOptions{NotFirstParentOnly: true}); !slices.Equal(got, want) {
		t.Fatalf("not-first-parent = %v, want %v", got, want)
	}
	if got := ids(graveler.ListCommitsOptions{NotFirstParentOnly: true, After: string(want[0])}); !slices.Equal(got, want[1:]) {
		t.Fatalf("not-first-parent after = %v", got)
	}
}

func testRefs(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore(t), nil)
	ctx := e.ctx
	r := e.createRepo("refs")
	h := history(e, r)
	if err := e.m.BranchUpdate(ctx, r, "main", func(b *graveler.Branch) (*graveler.Branch, error) {
		b.CommitID = h["a3"]
		return b, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.m.CreateBranch(ctx, r, "feature", graveler.Branch{CommitID: h["c1"]}); err != nil {
		t.Fatal(err)
	}
	if err := e.m.CreateTag(ctx, r, "v1", h["b2"]); err != nil {
		t.Fatal(err)
	}
	// A tag named like main's commit prefix is shadowed by nothing; a branch
	// named "v1" would shadow the tag.
	resolve := func(s string) (*graveler.ResolvedRef, error) {
		raw, err := e.m.ParseRef(graveler.Ref(s))
		if err != nil {
			return nil, err
		}
		return e.m.ResolveRawRef(ctx, r, raw)
	}
	mustCommit := func(s, want string) *graveler.ResolvedRef {
		t.Helper()
		res, err := resolve(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if res.CommitID != h[want] {
			t.Fatalf("%s resolved to %s, want %s (%s)", s, res.CommitID, h[want], want)
		}
		wantMR := graveler.MetaRangeID("mr-" + want)
		if want == "root" {
			wantMR = "" // the initial commit is the empty tree
		}
		if res.MetaRangeID != wantMR {
			t.Fatalf("%s metarange %q", s, res.MetaRangeID)
		}
		return res
	}
	res := mustCommit("main", "a3")
	if res.Type != graveler.RefTypeBranch || res.ResolvedBranchModifier != graveler.ResolvedBranchModifierNone ||
		res.BranchRecord.BranchID != "main" || res.BranchRecord.Branch == nil || res.BranchRecord.StagingToken == "" {
		t.Fatalf("main = %+v", res)
	}
	res = mustCommit("main@", "a3")
	if res.Type != graveler.RefTypeBranch || res.ResolvedBranchModifier != graveler.ResolvedBranchModifierCommitted {
		t.Fatalf("main@ = %+v", res)
	}
	res = mustCommit("v1", "b2")
	if res.Type != graveler.RefTypeTag {
		t.Fatalf("v1 = %+v", res)
	}
	for s, want := range map[string]string{
		"main~":                     "m1",
		"main~1":                    "m1",
		"main~2":                    "a2",
		"main~3":                    "a1",
		"main~0":                    "a3",
		"main^":                     "m1",
		"main^0":                    "a3",
		"main~1^2":                  "b2",
		"main~1^2~1":                "b1",
		"main~^2":                   "b2",
		"main@~2":                   "a2",
		"main^^":                    "a2",
		"feature~2":                 "b1",
		"v1~1":                      "b1",
		string(h["m1"]) + "^2":      "b2",
		string(h["m1"][:10]):        "m1",
		string(h["m1"][:10]) + "~3": "root",
	} {
		res := mustCommit(s, want)
		if strings.ContainsAny(s, "~^") && res.Type != graveler.RefTypeCommit {
			t.Fatalf("%s type %v, want commit", s, res.Type)
		}
	}
	res = mustCommit(string(h["c1"]), "c1")
	if res.Type != graveler.RefTypeCommit {
		t.Fatalf("commit id type %v", res.Type)
	}
	// A branch would shadow a tag of the same name: it is refused.
	if err := e.m.CreateBranch(ctx, r, "v1", graveler.Branch{CommitID: h["a1"]}); !errors.Is(err, graveler.ErrAlreadyExists) || errors.Is(err, graveler.ErrBranchExists) {
		t.Fatalf("branch named like a tag: %v, want ErrAlreadyExists", err)
	}
	if res := mustCommit("v1", "b2"); res.Type != graveler.RefTypeTag {
		t.Fatalf("v1 should still be the tag: %+v", res)
	}

	for s, want := range map[string]error{
		"":                 graveler.ErrInvalidRef,
		"~1":               graveler.ErrInvalidRef,
		"main~x":           graveler.ErrInvalidRef,
		"main@@":           graveler.ErrInvalidRef,
		"main~1@":          graveler.ErrInvalidRef,
		"ma/in":            graveler.ErrInvalidRef,
		"main~99999999999": graveler.ErrInvalidRef,
		"v1@x":             graveler.ErrInvalidRef,
		"root~1":           graveler.ErrRefNotFound, // no such branch/tag; not hex
		"nosuch":           graveler.ErrRefNotFound,
		"main~7":           graveler.ErrRefNotFound,
		"main^3":           graveler.ErrRefNotFound,
		"a3@":              graveler.ErrRefNotFound,
		"ffff0000":         graveler.ErrRefNotFound,
	} {
		_, err := resolve(s)
		if strings.HasPrefix(string(h["m1"]), "ffff0000") {
			continue
		}
		wantErr(t, err, want)
	}
	// "@" only applies to branches.
	_, err := resolve("v2@")
	wantErr(t, err, graveler.ErrRefNotFound)
	if err := e.m.CreateTag(ctx, r, "v2", h["a1"]); err != nil {
		t.Fatal(err)
	}
	_, err = resolve("v2@")
	wantErr(t, err, graveler.ErrInvalidRef)

	raw, err := ref.ParseRef("main@~2^3")
	if err != nil {
		t.Fatal(err)
	}
	wantRaw := graveler.RawRef{BaseRef: "main", Modifiers: []graveler.RefModifier{
		{Type: graveler.RefModTypeAt}, {Type: graveler.RefModTypeTilde, Value: 2}, {Type: graveler.RefModTypeCaret, Value: 3}}}
	if raw.BaseRef != wantRaw.BaseRef || !slices.Equal(raw.Modifiers, wantRaw.Modifiers) {
		t.Fatalf("parse = %+v", raw)
	}
}

func testFormatVersion(t *testing.T, newStore newStoreFunc) {
	e := newEnv(t, newStore(t), nil)
	ctx := e.ctx
	r := e.createRepo("format")
	part := keys.RepositoryPartition(string(r.RepositoryID), string(r.UniqueID))
	put := func(p, k []byte, m proto.Message) {
		data, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.store.Set(ctx, p, k, data); err != nil {
			t.Fatal(err)
		}
	}
	put(part, keys.Branch("future"), &refpb.Branch{FormatVersion: ref.BranchFormatVersion + 1, CommitId: "x"})
	_, err := e.m.GetBranch(ctx, r, "future")
	wantErr(t, err, ref.ErrUnknownFormat)
	put(part, keys.Tag("future"), &refpb.Tag{FormatVersion: 99})
	_, err = e.m.GetTag(ctx, r, "future")
	wantErr(t, err, ref.ErrUnknownFormat)
	cid := strings.Repeat("c", 64)
	put(part, keys.Commit(cid), &refpb.Commit{FormatVersion: 0})
	_, err = e.m.GetCommit(ctx, r, graveler.CommitID(cid))
	wantErr(t, err, ref.ErrUnknownFormat)
	put(keys.Graveler(), keys.Repository("future"), &refpb.Repository{FormatVersion: 2, State: refpb.RepositoryState_REPOSITORY_STATE_ACTIVE})
	_, err = e.m.GetRepository(ctx, "future")
	wantErr(t, err, ref.ErrUnknownFormat)
	if err := e.store.Set(ctx, part, keys.Branch("junk"), []byte{0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	_, err = e.m.GetBranch(ctx, r, "junk")
	wantErr(t, err, ref.ErrCorruptRecord)
}
