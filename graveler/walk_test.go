package graveler_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/gravelertest"
	"graveler/kv"
	"graveler/kv/kvtest"
)

// TestFailureAtEveryStep walks a kv failure over every operation of a
// short workload (a write, a delete, a commit, another write) in each
// fault mode and each writer fence. A crash ends the process: the checks
// then run on a new service over the same kv and blob stores. Whatever
// failed, once the faults are gone:
//   - every acknowledged write is visible on the branch with its value,
//     and an acknowledged delete hides its key;
//   - a commit reported successful is in the branch's first-parent log
//     and holds the writes acknowledged before it;
//   - one more commit takes everything left, and leaves no sealed token.
func TestFailureAtEveryStep(t *testing.T) {
	modes := []kvtest.FaultMode{kvtest.FaultError, kvtest.FaultAmbiguousApplied, kvtest.FaultAmbiguousNotApplied, kvtest.FaultCrash}
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		for _, fm := range fenceModes {
			for _, mode := range modes {
				t.Run(fmt.Sprintf("%s/%s", fm.name, mode), func(t *testing.T) {
					walkFailures(t, store, fm.name, fm.cfg, mode)
				})
			}
		}
	})
}

func walkFailures(t *testing.T, store kv.Store, fence string, cfg graveler.Config, mode kvtest.FaultMode) {
	ctx := context.Background()
	blobs := committed.NewBucketStore(committed.BucketConfig{})
	t.Cleanup(func() { blobs.Close() })
	cfg.BranchCacheTTL = -1 // every step reads the store: more steps to fail
	walked := 0
	for n := int64(1); ; n++ {
		repo := graveler.RepositoryID(fmt.Sprintf("walk-%s-%s-%d", fence, mode, n))
		fs := kvtest.NewFaultStore(store)
		g := gravelertest.New(t, fs, gravelertest.Options{Graveler: cfg, Blobs: blobs})
		if _, err := g.CreateRepository(ctx, repo, gravelertest.Namespace(), "main"); err != nil {
			t.Fatal(err)
		}
		mustSet := func(k, v string) {
			t.Helper()
			if err := g.Set(ctx, repo, "main", graveler.Key(k), val(v), graveler.SetOptions{}); err != nil {
				t.Fatalf("set %s: %v", k, err)
			}
		}
		mustSet("old", "0")
		mustSet("gone", "0")
		if _, err := g.Commit(ctx, repo, "main", graveler.CommitParams{Message: "base"}); err != nil {
			t.Fatal(err)
		}
		mustSet("staged", "1")

		// The walked workload. acked holds what must be visible after it.
		fs.Reset()
		fs.FailAt(n, mode)
		acked := map[string]string{"old": "0", "gone": "0", "staged": "1"}
		deleted := map[string]bool{}
		if g.Set(ctx, repo, "main", graveler.Key("a"), val("A"), graveler.SetOptions{}) == nil {
			acked["a"] = "A"
		}
		// A failed write may or may not have landed, so only an
		// acknowledged delete says anything about "gone".
		delete(acked, "gone")
		if g.Delete(ctx, repo, "main", graveler.Key("gone")) == nil {
			deleted["gone"] = true
		}
		beforeCommit := map[string]string{}
		for k, v := range acked {
			beforeCommit[k] = v
		}
		commitID, commitErr := g.Commit(ctx, repo, "main", graveler.CommitParams{Message: "walked"})
		if g.Set(ctx, repo, "main", graveler.Key("b"), val("B"), graveler.SetOptions{}) == nil {
			acked["b"] = "B"
		}
		injected := fs.Injected() > 0
		if mode == kvtest.FaultCrash && fs.Crashed() {
			// A restarted process: a new service over the same stores.
			g = gravelertest.New(t, fs.Inner(), gravelertest.Options{Graveler: cfg, Blobs: blobs})
		}
		fs.Reset()

		check := func(ref graveler.Ref, want map[string]string, what string) {
			t.Helper()
			for k, v := range want {
				got, err := g.Get(ctx, repo, ref, graveler.Key(k))
				if err != nil || string(got.Data) != v {
					t.Fatalf("fault %s at op %d: %s: %s = %v, %v; want %q", mode, n, what, k, got, err, v)
				}
			}
			for k := range deleted {
				if _, err := g.Get(ctx, repo, ref, graveler.Key(k)); !errors.Is(err, graveler.ErrEntryNotFound) {
					t.Fatalf("fault %s at op %d: %s: deleted %s is visible (%v)", mode, n, what, k, err)
				}
			}
		}
		check("main", acked, "branch")
		if commitErr == nil {
			inLog := false
			for c, err := range g.Log(ctx, repo, "main", graveler.LogOptions{FirstParent: true}) {
				if err != nil {
					t.Fatal(err)
				}
				inLog = inLog || c.CommitID == commitID
			}
			if !inLog {
				t.Fatalf("fault %s at op %d: commit %s succeeded but is not in main's first-parent log", mode, n, commitID)
			}
			check(graveler.Ref(commitID), beforeCommit, "the walked commit")
		}
		head, err := g.Commit(ctx, repo, "main", graveler.CommitParams{Message: "recovery", AllowEmpty: true})
		if err != nil {
			t.Fatalf("fault %s at op %d: recovery commit: %v", mode, n, err)
		}
		check(graveler.Ref(head), acked, "the recovery commit")
		br, err := g.GetBranch(ctx, repo, "main")
		if err != nil || br.CommitID != head || len(br.SealedTokens) != 0 {
			t.Fatalf("fault %s at op %d: branch after recovery: %+v, %v", mode, n, br, err)
		}
		if !injected {
			break // n is past the workload's last operation
		}
		walked++
	}
	if walked < 8 {
		t.Fatalf("walked only %d operations", walked)
	}
	t.Logf("walked a %s over %d operations", mode, walked)
}
