package cleaner_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"graveler/graveler"
	"graveler/graveler/ref"
	"graveler/keys"
)

// skippedRecords reads graveler_cleaner_skipped_records_total{kind}.
func skippedRecords(t *testing.T, kind string) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "graveler_cleaner_skipped_records_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestUndecodableRecordsSkipped: one undecodable repository record and one
// undecodable branch record do not stop a pass. The rest is reclaimed; the
// skips are counted in the summary (once per pass) and the metric; and
// what either record may reference is kept: the partitions and work items
// of the repository's name, and the queued and orphan tokens minted for
// the repository whose branch does not decode.
func TestUndecodableRecordsSkipped(t *testing.T) {
	forEachStore(t, func(t *testing.T, newEnv func(t *testing.T) *cenv) {
		e := newEnv(t)
		garbage := []byte{0xff, 0xff, 0xff}

		// Work that must be done.
		gone := e.newLive("gone")
		if err := e.m.DeleteRepository(e.ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		fine := e.newLive("fine")
		consumed := graveler.StagingToken("fine." + ref.NewID())
		e.set(keys.StagingPartition(string(consumed)), keys.Entry([]byte("k")))
		if err := e.m.DeleteStagingTokens(e.ctx, []graveler.StagingToken{consumed}); err != nil {
			t.Fatal(err)
		}
		orphan := keys.StagingPartition("fine." + ref.NewID())
		e.set(orphan, keys.Entry([]byte("late")))

		// An undecodable repository record, with what may be its live
		// partition, a work item of its name and a token minted for it.
		if err := e.inner.Set(e.ctx, keys.Graveler(), keys.Repository("bad"), garbage); err != nil {
			t.Fatal(err)
		}
		badUID := ref.NewID()
		badPart := keys.RepositoryPartition("bad", badUID)
		e.set(badPart, keys.Branch("main"))
		badItem := keys.DeletedRepository("bad", ref.NewID())
		e.set(keys.Deleted(), badItem)
		badTok := keys.StagingPartition("bad." + ref.NewID())
		e.set(badTok, keys.Entry([]byte("k")))

		// A live repository with an undecodable branch: a queued token and
		// an unreferenced one minted for it may be that branch's.
		cracked := e.newLive("cracked")
		crackedPart := keys.RepositoryPartition("cracked", string(cracked.rec.UniqueID))
		if err := e.inner.Set(e.ctx, crackedPart, keys.Branch("broken"), garbage); err != nil {
			t.Fatal(err)
		}
		crackedQueued := graveler.StagingToken("cracked." + ref.NewID())
		e.set(keys.StagingPartition(string(crackedQueued)), keys.Entry([]byte("k")))
		if err := e.m.DeleteStagingTokens(e.ctx, []graveler.StagingToken{crackedQueued}); err != nil {
			t.Fatal(err)
		}
		crackedLoose := keys.StagingPartition("cracked." + ref.NewID())
		e.set(crackedLoose, keys.Entry([]byte("k")))

		repoSkips, branchSkips := skippedRecords(t, "repository"), skippedRecords(t, "branch")
		for pass := 1; pass <= 2; pass++ {
			sum, err := e.cleanerWith(true).RunOnce(e.ctx)
			if err != nil || sum.Errors != 0 {
				t.Fatalf("pass %d: %+v, %v", pass, sum, err)
			}
			if sum.SkippedRecords != 2 {
				t.Fatalf("pass %d: %d skipped records, want 2 (each counted once): %+v", pass, sum.SkippedRecords, sum)
			}
			if got := skippedRecords(t, "repository") - repoSkips; got != float64(pass) {
				t.Errorf("pass %d: repository skips metric moved by %v, want %d", pass, got, pass)
			}
			if got := skippedRecords(t, "branch") - branchSkips; got != float64(pass) {
				t.Errorf("pass %d: branch skips metric moved by %v, want %d", pass, got, pass)
			}
			if pass == 1 && (sum.RepositoriesReclaimed != 1 || sum.TokensReclaimed != 1 || sum.OrphanStagingPartitions != 1) {
				t.Errorf("pass 1 did not reclaim the rest: %+v", sum)
			}
		}

		// The rest was reclaimed.
		if !e.partitionEmpty(keys.RepositoryPartition("gone", string(gone.rec.UniqueID))) ||
			!e.partitionEmpty(keys.StagingPartition(string(gone.dev.StagingToken))) {
			t.Error("deleted repository not reclaimed")
		}
		if !e.partitionEmpty(keys.StagingPartition(string(consumed))) || !e.partitionEmpty(orphan) {
			t.Error("consumed or orphan token not reclaimed")
		}
		e.checkIntact(fine)
		e.checkIntact(cracked)
		// What the undecodable records may reference was kept.
		for name, part := range map[string][]byte{"bad partition": badPart, "bad token": badTok,
			"cracked queued token": keys.StagingPartition(string(crackedQueued)), "cracked loose token": crackedLoose} {
			if e.partitionEmpty(part) {
				t.Errorf("%s dropped", name)
			}
		}
		e.wantItem(badItem, true)
		e.wantItem(keys.DeletedToken(string(crackedQueued)), true)
		if !e.present(crackedPart, keys.Branch("broken")) {
			t.Error("undecodable branch record removed")
		}
	})
}
