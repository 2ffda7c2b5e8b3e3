package fsck_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"graveler/etcdkv"
	"graveler/fsck"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/gravelertest"
	"graveler/graveler/ref"
	"graveler/graveler/ref/refpb"
	"graveler/keys"
	"graveler/kv"
)

func TestFsckHealthyInstallation(t *testing.T) {
	w := newWorld(t)
	w.installation()
	for _, full := range []bool{false, true} {
		rep := w.check(fsck.Config{Full: full})
		if !rep.Healthy || len(rep.Findings) != 0 || rep.Incomplete {
			t.Fatalf("full=%v: a healthy installation is reported unhealthy:\n%s", full, text(rep))
		}
		st := rep.Stats
		// sales: initial, first, dev, second, merge; logs: initial, one.
		if st.Commits != 7 || st.UnreachableCommits != 0 || st.Branches != 3 || st.Tags != 1 {
			t.Errorf("full=%v: stats %+v, want 7 commits, 3 branches, 1 tag", full, st)
		}
		if st.Repositories["active"] != 2 || st.QueuedRepositories != 1 {
			t.Errorf("full=%v: repositories %v, queued %d", full, st.Repositories, st.QueuedRepositories)
		}
		if st.MetaRanges < 5 || st.Ranges < 10 {
			t.Errorf("full=%v: %d metaranges, %d ranges checked", full, st.MetaRanges, st.Ranges)
		}
		if full != (st.RangeBytes > 0) {
			t.Errorf("full=%v: %d range bytes read", full, st.RangeBytes)
		}
		// Consumed tokens, and those of the deleted repository, wait for
		// the cleaner: queued, not orphaned.
		if st.OrphanedPartitions != 0 || st.QueuedPartitions == 0 {
			t.Errorf("full=%v: %d orphaned, %d queued partitions", full, st.OrphanedPartitions, st.QueuedPartitions)
		}
		if len(rep.Staging) != 1 || rep.Staging[0].Branch != "main" || rep.Staging[0].Tombstones != 2 || rep.Staging[0].Entries != 7 {
			t.Errorf("full=%v: staging %+v, want sales/main with 7 entries, 2 tombstones", full, rep.Staging)
		}
		if rep.Revision == 0 || len(rep.Etcd.Members) != 1 || rep.Etcd.Members[0].DBSize == 0 || rep.Etcd.Members[0].Error != "" {
			t.Errorf("full=%v: revision %d, etcd %+v", full, rep.Revision, rep.Etcd)
		}
		if !strings.Contains(text(rep), "HEALTHY") {
			t.Errorf("full=%v: the text report does not say healthy:\n%s", full, text(rep))
		}
	}
}

func TestFsckMissingRange(t *testing.T) {
	w := newWorld(t)
	w.installation()
	// The first range of main's head is shared by every commit of main:
	// it is reported once.
	rs := w.ranges("sales", w.head("sales", "main"))
	gone := rs[0].ID
	w.must(w.blobs.Delete(w.ctx, w.ns("sales"), "_graveler/ranges/"+string(gone)))
	for _, full := range []bool{false, true} {
		rep := w.check(fsck.Config{Full: full})
		f := only(t, rep, fsck.KindRangeMissing, 1)[0]
		if f.Repository != "sales" || !strings.Contains(f.Resource, string(gone)) {
			t.Fatalf("full=%v: finding %+v does not name range %s of sales", full, f, gone)
		}
	}
}

func TestFsckMissingMetaRange(t *testing.T) {
	w := newWorld(t)
	w.installation()
	c := w.head("logs", "main")
	w.must(w.blobs.Delete(w.ctx, w.ns("logs"), "_graveler/metaranges/"+string(c.MetaRangeID)))
	f := only(t, w.check(fsck.Config{}), fsck.KindMetaRangeMissing, 1)[0]
	if !strings.Contains(f.Detail, string(c.CommitID)) {
		t.Fatalf("finding %+v does not name the commit", f)
	}
}

func TestFsckCorruptRangeFullOnly(t *testing.T) {
	w := newWorld(t)
	w.installation()
	rs := w.ranges("sales", w.head("sales", "dev"))
	name := "_graveler/ranges/" + string(rs[len(rs)-1].ID)
	data, err := w.blobs.Get(w.ctx, w.ns("sales"), name)
	w.must(err)
	data[len(data)/3] ^= 0x55
	w.must(w.blobs.Put(w.ctx, w.ns("sales"), name, data))

	if rep := w.check(fsck.Config{}); !rep.Healthy {
		t.Fatalf("without --full only existence is checked, yet:\n%s", text(rep))
	}
	f := only(t, w.check(fsck.Config{Full: true}), fsck.KindRangeCorrupt, 1)[0]
	if !strings.Contains(f.Resource, string(rs[len(rs)-1].ID)) {
		t.Fatalf("finding %+v does not name the range", f)
	}
}

func TestFsckDanglingBranchAndTag(t *testing.T) {
	w := newWorld(t)
	w.installation()
	missing := fakeCommitID("no such commit")
	w.setBranch("sales", "lost", &refpb.Branch{CommitId: string(missing), StagingToken: "sales." + ref.NewID()})
	f := only(t, w.check(fsck.Config{}), fsck.KindBranchDangling, 1)[0]
	if f.Resource != "branch lost" || !strings.Contains(f.Detail, string(missing)) {
		t.Fatalf("finding %+v", f)
	}
}

func TestFsckMissingParent(t *testing.T) {
	w := newWorld(t)
	w.installation()
	refs := ref.New(w.store, ref.Config{})
	missing := fakeCommitID("a parent never stored")
	// A generation the caller gives is kept: AddCommit reads no parent.
	id, err := refs.AddCommit(w.ctx, w.repository("sales"), graveler.Commit{Committer: "x", Message: "orphan child", Parents: []graveler.CommitID{missing}, Generation: 9})
	w.must(err)
	rep := w.check(fsck.Config{})
	f := only(t, rep, fsck.KindCommitParentMissing, 1)[0]
	if f.Resource != "commit "+string(id) || !strings.Contains(f.Detail, string(missing)) {
		t.Fatalf("finding %+v", f)
	}
	if rep.Stats.UnreachableCommits != 1 {
		t.Fatalf("%d unreachable commits, want the planted one", rep.Stats.UnreachableCommits)
	}
}

func TestFsckWrongGeneration(t *testing.T) {
	w := newWorld(t)
	w.installation()
	head := w.head("sales", "main")
	refs := ref.New(w.store, ref.Config{})
	id, err := refs.AddCommit(w.ctx, w.repository("sales"), graveler.Commit{Committer: "x", Message: "bad generation", MetaRangeID: head.MetaRangeID,
		Parents: []graveler.CommitID{head.CommitID}, Generation: head.Generation + 5})
	w.must(err)
	f := only(t, w.check(fsck.Config{}), fsck.KindCommitGeneration, 1)[0]
	if f.Resource != "commit "+string(id) {
		t.Fatalf("finding %+v", f)
	}
}

func TestFsckWrongCommitID(t *testing.T) {
	w := newWorld(t)
	w.installation()
	head := w.head("sales", "main")
	part := w.partition("sales")
	data, _, err := w.store.Get(w.ctx, part, keys.Commit(string(head.CommitID)))
	w.must(err)
	other := fakeCommitID("stored under another id")
	w.must(w.store.Set(w.ctx, part, keys.Commit(string(other)), data))
	f := only(t, w.check(fsck.Config{}), fsck.KindCommitIDMismatch, 1)[0]
	if f.Resource != "commit "+string(other) || !strings.Contains(f.Detail, string(head.CommitID)) {
		t.Fatalf("finding %+v", f)
	}
}

func TestFsckOrphanedStagingAndRepair(t *testing.T) {
	w := newWorld(t)
	w.installation()
	// A late writer's keys in a token no branch references any more.
	tok := "sales." + ref.NewID()
	w.stageRaw(tok, "late/a")
	w.stageRaw(tok, "late/b")

	// Young: within the default grace it may be a commit in flight.
	rep := w.check(fsck.Config{})
	if !rep.Healthy || rep.Stats.YoungPartitions != 1 {
		t.Fatalf("a young unreferenced partition is reported:\n%s", text(rep))
	}

	cfg := fsck.Config{OrphanGrace: -1}
	f := only(t, w.check(cfg), fsck.KindStagingOrphaned, 1)[0]
	if f.Resource != "staging partition staging/"+tok || f.Repository != "sales" {
		t.Fatalf("finding %+v", f)
	}
	// Read-only without --repair.
	if _, _, err := w.store.Get(w.ctx, keys.Deleted(), keys.DeletedToken(tok)); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("fsck without --repair wrote a work item: %v", err)
	}

	cfg.Repair = true
	rep = w.check(cfg)
	only(t, rep, fsck.KindStagingOrphaned, 1)
	if len(rep.Repairs) != 1 || rep.Repairs[0].Action != "queued" || !strings.Contains(rep.Repairs[0].Resource, tok) {
		t.Fatalf("repairs %+v", rep.Repairs)
	}
	if _, _, err := w.store.Get(w.ctx, keys.Deleted(), keys.DeletedToken(tok)); err != nil {
		t.Fatalf("the work item of the repaired token: %v", err)
	}

	cfg.Repair = false
	rep = w.check(cfg)
	if !rep.Healthy {
		t.Fatalf("after the repair the partition is still reported:\n%s", text(rep))
	}
	before := w.check(fsck.Config{OrphanGrace: -1, Repair: true})
	if len(before.Repairs) != 0 {
		t.Fatalf("a second repair did something: %+v", before.Repairs)
	}
	if rep.Stats.QueuedPartitions != before.Stats.QueuedPartitions || rep.Stats.QueuedTokens == 0 {
		t.Fatalf("stats %+v", rep.Stats)
	}
}

// TestFsckRepairRechecks: a token referenced again by the time of the
// repair is not queued. ref's fresh tokens never are; a branch record is
// planted between the finding and the repair to prove the re-check.
func TestFsckRepairRechecks(t *testing.T) {
	w := newWorld(t)
	w.installation()
	tok := "sales." + ref.NewID()
	w.stageRaw(tok, "k")
	head := w.head("sales", "main")
	defer fsck.SetBeforeRepair(func() {
		w.setBranch("sales", "late", &refpb.Branch{CommitId: string(head.CommitID), StagingToken: tok})
	})()
	rep := w.check(fsck.Config{OrphanGrace: -1, Repair: true})
	only(t, rep, fsck.KindStagingOrphaned, 1)
	if len(rep.Repairs) != 1 || rep.Repairs[0].Action != "skipped" || !strings.Contains(rep.Repairs[0].Detail, "references it") {
		t.Fatalf("repairs %+v", rep.Repairs)
	}
	if _, _, err := w.store.Get(w.ctx, keys.Deleted(), keys.DeletedToken(tok)); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("a referenced token was queued: %v", err)
	}
}

func TestFsckStaleRepositoryRecords(t *testing.T) {
	w := newWorld(t)
	w.installation()
	now := time.Now()
	w.setRepositoryRecord("crashed", refpb.RepositoryState_REPOSITORY_STATE_INITIAL, now.Add(-time.Hour))
	w.setRepositoryRecord("creating", refpb.RepositoryState_REPOSITORY_STATE_INITIAL, now)
	f := only(t, w.check(fsck.Config{}), fsck.KindRepositoryInitialStale, 1)[0]
	if f.Repository != "crashed" {
		t.Fatalf("finding %+v", f)
	}

	// A delete that stopped after marking the record.
	gravelertest.MarkDeleting(t, w.store, "logs")
	rep := w.check(fsck.Config{Now: func() time.Time { return now.Add(30 * time.Minute) }})
	if len(findings(rep, fsck.KindRepositoryDeletingStale)) != 0 {
		t.Fatalf("a delete younger than the deleting timeout is reported:\n%s", text(rep))
	}
	rep = w.check(fsck.Config{Now: func() time.Time { return now.Add(2 * time.Hour) }})
	if got := findings(rep, fsck.KindRepositoryDeletingStale); len(got) != 1 || got[0].Repository != "logs" {
		t.Fatalf("a stuck delete is not reported:\n%s", text(rep))
	}
}

func TestFsckBranchLimits(t *testing.T) {
	w := newWorld(t)
	w.installation()
	head := w.head("sales", "main")
	var sealed []string
	for range graveler.DefaultMaxSealedTokens + 1 {
		sealed = append(sealed, "sales."+ref.NewID())
	}
	w.setBranch("sales", "piled", &refpb.Branch{CommitId: string(head.CommitID), StagingToken: "sales." + ref.NewID(), SealedTokens: sealed})
	only(t, w.check(fsck.Config{}), fsck.KindSealedTokensPiled, 1)

	// main stages two deletes.
	w.setBranch("sales", "piled", &refpb.Branch{CommitId: string(head.CommitID), StagingToken: "sales." + ref.NewID()})
	f := only(t, w.check(fsck.Config{MaxTombstones: 1}), fsck.KindTombstonesHigh, 1)[0]
	if f.Resource != "branch main" {
		t.Fatalf("finding %+v", f)
	}
	if rep := w.check(fsck.Config{MaxTombstones: 2}); !rep.Healthy {
		t.Fatalf("two tombstones within a bound of two:\n%s", text(rep))
	}
}

// TestFsckTokenRecordsAreNotEntries: a token's range record (DeletePrefix)
// and a sealed token's seal marker live in the token's partition beside
// its entries; fsck counts neither as an entry, nor as one that does not
// decode.
func TestFsckTokenRecordsAreNotEntries(t *testing.T) {
	w := newWorld(t)
	w.installation()
	before := w.check(fsck.Config{})
	w.must(w.g.DeletePrefix(w.ctx, "sales", "main", graveler.Key("zz/")))
	head := w.head("sales", "main")
	sealed := "sales." + ref.NewID()
	w.stageRaw(sealed, "k")
	w.must(w.store.Set(w.ctx, keys.StagingPartition(sealed), keys.StagingSealed(), []byte{}))
	w.setBranch("sales", "held", &refpb.Branch{CommitId: string(head.CommitID), StagingToken: "sales." + ref.NewID(), SealedTokens: []string{sealed}})
	rep := w.check(fsck.Config{})
	if !rep.Healthy || len(rep.Findings) != 0 {
		t.Fatalf("a range record and a seal marker are reported:\n%s", text(rep))
	}
	if got, want := rep.Stats.StagedEntries, before.Stats.StagedEntries+1; got != want {
		t.Fatalf("%d staged entries counted, want %d (the sealed token's one entry added)", got, want)
	}
}

func TestFsckUndecodableRecordsAreFindings(t *testing.T) {
	w := newWorld(t)
	w.installation()
	w.must(w.store.Set(w.ctx, w.partition("sales"), keys.Branch("garbled"), []byte("\xff\xff not a record")))
	// A token of sales that nothing seen references: the undecodable
	// branch may, so it is not called orphaned.
	tok := "sales." + ref.NewID()
	w.stageRaw(tok, "k")
	rep := w.check(fsck.Config{OrphanGrace: -1})
	f := only(t, rep, fsck.KindRecordUndecodable, 1)[0]
	if !strings.Contains(f.Resource, "garbled") || rep.Stats.UnsurePartitions != 1 {
		t.Fatalf("finding %+v, stats %+v", f, rep.Stats)
	}
}

func TestFsckEtcdDBSize(t *testing.T) {
	w := newWorld(t)
	w.installation()
	f := only(t, w.check(fsck.Config{EtcdQuotaBytes: 4096}), fsck.KindEtcdDBSize, 1)[0]
	if !strings.HasPrefix(f.Resource, "etcd member ") {
		t.Fatalf("finding %+v", f)
	}
}

func TestFsckUnreachableEtcd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	store, err := etcdkv.New(t.Context(), etcdkv.Config{Endpoints: []string{"http://" + addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	blobs := committed.NewBucketStore(committed.BucketConfig{})
	defer blobs.Close()
	rep, err := fsck.New(store, blobs, fsck.Config{ConnectTimeout: 300 * time.Millisecond}).Run(t.Context())
	if !errors.Is(err, fsck.ErrUnreachable) || !errors.Is(err, fsck.ErrIncomplete) {
		t.Fatalf("Run against no etcd = %v, want ErrUnreachable", err)
	}
	if rep == nil || !rep.Incomplete || rep.Healthy || !strings.Contains(err.Error(), "connect timeout") {
		t.Fatalf("report %+v, error %v", rep, err)
	}
}

// TestFsckReadsOneRevision: damage done after the run fixed its revision
// is not seen, though the records are read after it is done.
func TestFsckReadsOneRevision(t *testing.T) {
	w := newWorld(t)
	w.installation()
	head := w.head("sales", "main")
	part := w.partition("sales")
	defer fsck.SetAfterRevision(func() {
		w.setBranch("sales", "later", &refpb.Branch{CommitId: string(fakeCommitID("later")), StagingToken: "sales." + ref.NewID()})
		w.must(w.store.Delete(w.ctx, part, keys.Commit(string(head.CommitID))))
		w.setRepositoryRecord("crashed", refpb.RepositoryState_REPOSITORY_STATE_INITIAL, time.Now().Add(-time.Hour))
		// Listed after the revision, but it held nothing then.
		w.stageRaw("sales."+ref.NewID(), "after")
	})()
	first := w.check(fsck.Config{OrphanGrace: -1})
	if !first.Healthy {
		t.Fatalf("changes made after the revision are seen:\n%s", text(first))
	}
	fsck.SetAfterRevision(nil)
	now := w.check(fsck.Config{OrphanGrace: -1})
	if now.Revision <= first.Revision || len(findings(now, fsck.KindBranchDangling)) != 2 || len(findings(now, fsck.KindRepositoryInitialStale)) != 1 ||
		len(findings(now, fsck.KindStagingOrphaned)) != 1 {
		t.Fatalf("revision %d, then %d:\n%s", first.Revision, now.Revision, text(now))
	}
}

func TestFsckEtcdAlarm(t *testing.T) {
	w := newWorld(t)
	w.installation()
	members, err := w.srv.Client.MemberList(w.ctx)
	w.must(err)
	// The API raises an alarm as etcd does when its quota is reached;
	// writes are refused from then on, reads still answer.
	_, err = etcdserverpb.NewMaintenanceClient(w.srv.Client.ActiveConnection()).Alarm(w.ctx, &etcdserverpb.AlarmRequest{
		Action: etcdserverpb.AlarmRequest_ACTIVATE, MemberID: members.Members[0].ID, Alarm: etcdserverpb.AlarmType_NOSPACE})
	w.must(err)
	rep := w.check(fsck.Config{})
	f := only(t, rep, fsck.KindEtcdAlarm, 1)[0]
	if !strings.Contains(f.Detail, "NOSPACE") || len(rep.Etcd.Alarms) != 1 {
		t.Fatalf("finding %+v, alarms %v", f, rep.Etcd.Alarms)
	}
}

// TestFsckEtcdStopsMidCheck: an etcd that stops after the check read its
// revision ends the check with ErrIncomplete within its request timeout's
// attempts, not at the caller's deadline: opening a scan is bounded as
// each chunk is.
func TestFsckEtcdStopsMidCheck(t *testing.T) {
	w := newWorld(t)
	w.installation()
	defer fsck.SetAfterRevision(func() { w.srv.Close() })()
	ctx, cancel := context.WithTimeout(w.ctx, 2*time.Minute)
	defer cancel()
	_, err := fsck.New(w.store, w.blobs, fsck.Config{RequestTimeout: 300 * time.Millisecond}).Run(ctx)
	if !errors.Is(err, fsck.ErrIncomplete) || ctx.Err() != nil {
		t.Fatalf("check with etcd stopped: %v (caller's context: %v)", err, ctx.Err())
	}
}
