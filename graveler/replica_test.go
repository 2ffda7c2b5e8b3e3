package graveler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/ref"
	"graveler/graveler/staging"
	"graveler/kv"
)

// TestReadSeesWritesOfAnotherReplica: replica A has main in its branch
// cache; replica B then changes the branch's tokens (a commit that seals
// and then fails, so the old token stays sealed) and writes into the new
// token. A read on A that starts after B's write was acknowledged must
// see it, although A's cached branch does not name the new token and the
// token A reads from is still on the branch.
func TestReadSeesWritesOfAnotherReplica(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		ctx := context.Background()
		blobs := committed.NewBucketStore(committed.BucketConfig{})
		t.Cleanup(func() { blobs.Close() })
		cfg := graveler.Config{BranchCacheTTL: time.Hour} // A's cache never expires here
		a := graveler.New(ref.New(store, ref.Config{}), staging.New(store, staging.Config{}), committed.NewManager(blobs, committed.Config{}), cfg)
		fc := &failingCommitted{CommittedManager: committed.NewManager(blobs, committed.Config{})}
		b := graveler.New(ref.New(store, ref.Config{}), staging.New(store, staging.Config{}), fc, cfg)
		fa := &fixture{t: t, g: a, ctx: ctx, repo: "replicas"}
		fb := &fixture{t: t, g: b, ctx: ctx, repo: "replicas"}
		if _, err := a.CreateRepository(ctx, "replicas", "mem://replicas", "main"); err != nil {
			t.Fatal(err)
		}
		fa.set("main", "old", "1") // A caches main
		fa.want("main", "old", "1")
		for i := range 3 {
			fc.fail.Store(true)
			if _, err := b.Commit(ctx, "replicas", "main", graveler.CommitParams{Message: "fails after sealing"}); err == nil {
				t.Fatal("commit succeeded with a failing blob store")
			}
			fc.fail.Store(false)
			key := fmt.Sprintf("new%d", i)
			fb.set("main", key, "2")
			fa.want("main", key, "2")
			if got := fa.list("main", graveler.ListEntriesOptions{Limit: 10}); len(got) != i+2 {
				t.Fatalf("A lists %q after B wrote %s", got, key)
			}
		}

		// B commits everything and the cleaner drops the consumed tokens;
		// A, whose cache still names them, must not answer "not found"
		// from an emptied token and the old head.
		fb.set("main", "late", "3")
		br, err := b.GetBranch(ctx, "replicas", "main")
		if err != nil {
			t.Fatal(err)
		}
		fb.commit("main", "all")
		st := staging.New(store, staging.Config{})
		for _, tok := range append([]graveler.StagingToken{br.StagingToken}, br.SealedTokens...) {
			if err := st.Drop(ctx, tok); err != nil {
				t.Fatal(err)
			}
		}
		fa.want("main", "late", "3")
		fa.want("main", "new2", "2")
	})
}

// TestRepositoryCreatedAgainOnAnotherReplica: replica A holds a repository
// in its short cache; replica B deletes it and creates it again. A's next
// write and read go to the new repository instead of failing with "not
// found" for the cache's lifetime, and the old one's entries are gone.
func TestRepositoryCreatedAgainOnAnotherReplica(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		for _, m := range fenceModes {
			t.Run(m.name, func(t *testing.T) {
				ctx := context.Background()
				blobs := committed.NewBucketStore(committed.BucketConfig{})
				t.Cleanup(func() { blobs.Close() })
				cfg := m.cfg
				cfg.BranchCacheTTL = time.Hour
				newReplica := func() *graveler.Graveler {
					return graveler.New(ref.New(store, ref.Config{}), staging.New(store, staging.Config{}), committed.NewManager(blobs, committed.Config{}), cfg)
				}
				repo := graveler.RepositoryID("again-" + m.name)
				a, b := newReplica(), newReplica()
				fa := &fixture{t: t, g: a, ctx: ctx, repo: repo}
				if _, err := a.CreateRepository(ctx, repo, graveler.StorageNamespace("mem://"+repo), "main"); err != nil {
					t.Fatal(err)
				}
				fa.set("main", "old", "1")
				fa.want("main", "old", "1")
				if err := b.DeleteRepository(ctx, repo); err != nil {
					t.Fatal(err)
				}
				// A new namespace: the deleted incarnation holds its own
				// until the cleaner has reclaimed it.
				if _, err := b.CreateRepository(ctx, repo, graveler.StorageNamespace("mem://"+repo+"-2"), "main"); err != nil {
					t.Fatal(err)
				}
				fa.wantMissing("main", "old")
				fa.set("main", "new", "2")
				fb := &fixture{t: t, g: b, ctx: ctx, repo: repo}
				fb.want("main", "new", "2")
				fb.wantMissing("main", "old")
			})
		}
	})
}
