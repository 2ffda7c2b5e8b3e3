package graveler_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"graveler/graveler"
	"graveler/graveler/gravelertest"
	"graveler/kv"
)

// TestRestoreChecksParentsBeyondWhatItRemembers: a restore checks a
// commit's parents against the commits it restored last without reading
// them, and reads from the store only a parent it no longer remembers.
// Remembering a single id, a history whose merge reaches far back still
// restores whole, and a dump missing one commit is refused at the first
// child of it (INVALID_ARGUMENT naming the child and the missing parent),
// before that child is stored.
func TestRestoreChecksParentsBeyondWhatItRemembers(t *testing.T) {
	graveler.SetRestoreRecentIDs(t, 1)
	store := kv.NewMemoryStore()
	f := newFixture(t, store, graveler.Config{})
	f.set("main", "a", "1")
	f.commit("main", "one")
	if _, err := f.g.CreateBranch(f.ctx, f.repo, "side", "main"); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		f.set("main", fmt.Sprint("m", i), "1")
		f.commit("main", fmt.Sprint("main ", i))
	}
	f.set("side", "s", "1")
	f.commit("side", "side")
	if _, _, err := f.g.Merge(f.ctx, f.repo, "main", "side", graveler.MergeParams{}); err != nil {
		t.Fatal(err)
	}
	var recs []*graveler.RefsRecord
	for r, err := range f.g.DumpRefs(f.ctx, f.repo) {
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	restore := func(repo graveler.RepositoryID, recs []*graveler.RefsRecord) error {
		if _, err := f.g.CreateBareRepository(f.ctx, repo, gravelertest.Namespace(), "main"); err != nil {
			t.Fatal(err)
		}
		return f.g.RestoreRefs(f.ctx, repo, func(yield func(*graveler.RefsRecord, error) bool) {
			for _, r := range recs {
				if !yield(r, nil) {
					return
				}
			}
		})
	}
	if err := restore("whole", recs); err != nil {
		t.Fatalf("restore of a whole dump: %v", err)
	}
	// Cut out the side commit: the merge's second parent, and the last
	// commit a restore would remember when it reaches the merge.
	side := slices.IndexFunc(recs, func(r *graveler.RefsRecord) bool { return r.Commit != nil && r.Commit.Message == "side" })
	merge := slices.IndexFunc(recs, func(r *graveler.RefsRecord) bool {
		return r.Commit != nil && slices.Contains(r.Commit.Parents, recs[side].Commit.CommitID)
	})
	if side < 0 || merge < 0 {
		t.Fatalf("dump has no side commit or no merge of it: %d, %d", side, merge)
	}
	cut := slices.Delete(slices.Clone(recs), side, side+1)
	err := restore("cut", cut)
	if !errors.Is(err, graveler.ErrInvalidArgument) || !strings.Contains(err.Error(), string(recs[merge].Commit.CommitID)) ||
		!strings.Contains(err.Error(), string(recs[side].Commit.CommitID)) {
		t.Fatalf("restore of a dump missing a parent: %v", err)
	}
	if _, err := f.g.GetCommit(f.ctx, "cut", graveler.Ref(recs[merge].Commit.CommitID)); !errors.Is(err, graveler.ErrNotFound) {
		t.Errorf("the refused merge commit was stored: %v", err)
	}
}
