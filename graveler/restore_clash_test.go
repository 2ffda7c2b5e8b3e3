package graveler_test

import (
	"testing"

	"graveler/graveler"
	"graveler/graveler/gravelertest"
	"graveler/kv"
)

// TestRestoreDumpWithBranchAndTagOfOneName: a repository made before
// branch and tag names were refused to clash may hold a branch and a tag
// of one name. Its dump restores as it was: both refs.
func TestRestoreDumpWithBranchAndTagOfOneName(t *testing.T) {
	f := newFixture(t, kv.NewMemoryStore(), graveler.Config{})
	f.set("main", "a", "1")
	c := f.commit("main", "one")
	recs := f.dump()
	// What DumpRefs writes for a legacy repository with branch and tag "release".
	recs = append(recs,
		&graveler.RefsRecord{Branch: &graveler.BranchRecord{BranchID: "release", Branch: &graveler.Branch{CommitID: c}}},
		&graveler.RefsRecord{Tag: &graveler.TagRecord{TagID: "release", CommitID: c}})
	if err := f.restoreCopy("copy", gravelertest.Namespace(), recs); err != nil {
		t.Fatalf("restore of a dump holding branch and tag \"release\": %v", err)
	}
	if got, err := f.g.GetTag(f.ctx, "copy", "release"); err != nil || got != c {
		t.Fatalf("restored tag release: %s, %v", got, err)
	}
	if b, err := f.g.GetBranch(f.ctx, "copy", "release"); err != nil || b.CommitID != c {
		t.Fatalf("restored branch release: %+v, %v", b, err)
	}
}
