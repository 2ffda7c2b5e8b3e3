package ref_test

import (
	"context"
	"fmt"
	"time"

	"graveler/graveler"
	"graveler/graveler/ref"
	"graveler/kv"
)

func Example() {
	ctx := context.Background()
	store := kv.NewMemoryStore()
	defer store.Close()
	m := ref.New(store, ref.Config{})

	repo, err := m.CreateRepository(ctx, "example", graveler.Repository{
		StorageNamespace: "mem://example",
		DefaultBranchID:  "main",
	}, graveler.Commit{Committer: "admin", Message: "Repository created"})
	if err != nil {
		fmt.Println(err)
		return
	}
	main, _ := m.GetBranch(ctx, repo, "main")
	next, _ := m.AddCommit(ctx, repo, graveler.Commit{
		Committer: "admin", Message: "second", MetaRangeID: "mr-1",
		Parents: []graveler.CommitID{main.CommitID},
	})
	// Move the branch with a compare-and-swap loop.
	_ = m.BranchUpdate(ctx, repo, "main", func(b *graveler.Branch) (*graveler.Branch, error) {
		b.CommitID = next
		return b, nil
	})

	raw, _ := m.ParseRef("main~1")
	res, _ := m.ResolveRawRef(ctx, repo, raw)
	fmt.Println(res.CommitID == main.CommitID, res.Type == graveler.RefTypeCommit)
	for c, err := range m.Log(ctx, repo, next, graveler.LogOptions{}) {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(c.Generation, c.Message)
	}
	// Output:
	// true true
	// 2 second
	// 1 Repository created
}

func ExampleParseRef() {
	raw, err := ref.ParseRef("main@~2^2")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(raw.BaseRef)
	for _, mod := range raw.Modifiers {
		fmt.Println(mod.Type, mod.Value)
	}
	// Output:
	// main
	// 2 0
	// 0 2
	// 1 2
}

// The encoding is frozen: stored commits are named by it, so this output
// must never change.
func ExampleComputeCommitID() {
	id := ref.ComputeCommitID(&graveler.Commit{
		Version:      1,
		Committer:    "a",
		Message:      "m",
		MetaRangeID:  "mr",
		CreationDate: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC),
		Parents:      []graveler.CommitID{"p1", "p2"},
		Metadata:     graveler.Metadata{"k2": "v2", "k1": "v1"},
		Generation:   3,
	})
	fmt.Println(id)
	// Output: e7ec7e53fb94f28f76b42b6218d83794efdfed5be85662757e61b62a047deddc
}
