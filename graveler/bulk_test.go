package graveler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"graveler/graveler"
	"graveler/kv"
	"graveler/kv/kvtest"
)

// sortedStream yields recs in order; onNext, when set, runs before each
// record is yielded (i counts from 1).
type sortedStream struct {
	recs   []*graveler.ValueRecord
	i      int
	onNext func(i int)
}

func (s *sortedStream) Next() bool {
	if s.i >= len(s.recs) {
		return false
	}
	s.i++
	if s.onNext != nil {
		s.onNext(s.i)
	}
	return true
}
func (s *sortedStream) Value() *graveler.ValueRecord { return s.recs[s.i-1] }
func (s *sortedStream) SeekGE(graveler.Key)          {}
func (s *sortedStream) Err() error                   { return nil }
func (s *sortedStream) Close()                       {}

// bulkRecords returns n records bulk/00000=v0, bulk/00001=v1, ...
func bulkRecords(n int) []*graveler.ValueRecord {
	recs := make([]*graveler.ValueRecord, n)
	for i := range recs {
		v := val(fmt.Sprintf("v%d", i))
		recs[i] = &graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("bulk/%05d", i)), Value: &v}
	}
	return recs
}

func (f *fixture) commitSorted(ctx context.Context, recs []*graveler.ValueRecord, params graveler.CommitParams) (graveler.CommitID, error) {
	return f.g.CommitSorted(ctx, f.repo, "main", &sortedStream{recs: recs}, params)
}

func (f *fixture) headOf(branch string) graveler.CommitID {
	f.t.Helper()
	b, err := f.g.GetBranch(f.ctx, f.repo, graveler.BranchID(branch))
	if err != nil {
		f.t.Fatal(err)
	}
	return b.CommitID
}

// TestCommitSorted: the commit's content is exactly the stream (a key of
// the old head the stream lacks is gone), its one parent is the old head,
// the branch stays clean, and the same stream again is ErrNoChanges unless
// AllowEmpty.
func TestCommitSorted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		f := newFixture(t, store, graveler.Config{})
		f.set("main", "bulk/00001", "old")
		f.set("main", "gone", "old")
		c1 := f.commit("main", "before")
		recs := bulkRecords(3000)
		id, err := f.commitSorted(f.ctx, recs, graveler.CommitParams{Committer: "t", Message: "bulk", Metadata: graveler.Metadata{"k": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		if h := f.headOf("main"); h != id {
			t.Fatalf("head %s, want the bulk commit %s", h, id)
		}
		var want []string
		for _, r := range recs {
			want = append(want, string(r.Key))
		}
		if got := f.list("main", graveler.ListEntriesOptions{Limit: 1000}); !slices.Equal(got, want) {
			t.Fatalf("listing has %d keys (first %q), want the stream's %d", len(got), got[:min(3, len(got))], len(want))
		}
		for _, i := range []int{0, 1, 1234, 2999} {
			f.want(string(id), string(recs[i].Key), fmt.Sprintf("v%d", i))
		}
		f.wantMissing("main", "gone")
		if d := f.diffUncommitted("main"); len(d) != 0 {
			t.Fatalf("branch dirty after a bulk commit: %v", d)
		}
		var log []*graveler.CommitRecord
		for c, err := range f.g.Log(f.ctx, f.repo, "main", graveler.LogOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			log = append(log, c)
		}
		if len(log) < 2 || log[0].CommitID != id || log[1].CommitID != c1 {
			t.Fatalf("log does not start with the bulk commit then %s: %v", c1, log)
		}
		if c := log[0]; !slices.Equal(c.Parents, []graveler.CommitID{c1}) || c.Message != "bulk" || c.Committer != "t" || c.Metadata["k"] != "v" {
			t.Fatalf("bulk commit record %+v", c.Commit)
		}
		if _, err := f.commitSorted(f.ctx, recs, graveler.CommitParams{}); !errors.Is(err, graveler.ErrNoChanges) {
			t.Fatalf("the same stream again: %v, want ErrNoChanges", err)
		}
		if h := f.headOf("main"); h != id {
			t.Fatalf("a refused bulk commit moved the head to %s", h)
		}
		empty, err := f.commitSorted(f.ctx, recs, graveler.CommitParams{AllowEmpty: true, Message: "again"})
		if err != nil || f.headOf("main") != empty || empty == id {
			t.Fatalf("the same stream with AllowEmpty: %s, %v", empty, err)
		}
	})
}

// TestCommitSortedRefuses: a branch with staged changes is ErrDirtyBranch
// (a failed precondition) and keeps them; a stream out of order, with a
// duplicate, a tombstone or an invalid key or value is ErrInvalidArgument.
// Neither moves the branch.
func TestCommitSortedRefuses(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		f := newFixture(t, store, graveler.Config{})
		f.set("main", "a", "1")
		c1 := f.commit("main", "a")
		f.set("main", "staged", "s")
		_, err := f.commitSorted(f.ctx, bulkRecords(10), graveler.CommitParams{})
		if !errors.Is(err, graveler.ErrDirtyBranch) || !errors.Is(err, graveler.ErrFailedPrecondition) {
			t.Fatalf("bulk commit on a dirty branch: %v", err)
		}
		f.want("main", "staged", "s")
		if err := f.g.Reset(f.ctx, f.repo, "main", graveler.ResetTypeAll, nil); err != nil {
			t.Fatal(err)
		}
		ok := bulkRecords(3)
		bad := map[string][]*graveler.ValueRecord{
			"out of order": {ok[1], ok[0], ok[2]},
			"duplicate":    {ok[0], ok[1], ok[1]},
			"tombstone":    {ok[0], {Key: graveler.Key("bulk/9")}},
			"empty key":    {{Key: graveler.Key(""), Value: ok[0].Value}, ok[1]},
			"no identity":  {ok[0], {Key: graveler.Key("bulk/9"), Value: &graveler.Value{Data: []byte("x")}}},
		}
		for name, recs := range bad {
			_, err := f.commitSorted(f.ctx, recs, graveler.CommitParams{})
			if !errors.Is(err, graveler.ErrInvalidArgument) {
				t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
			}
		}
		if h := f.headOf("main"); h != c1 {
			t.Fatalf("refused bulk commits moved the head to %s", h)
		}
		f.want("main", "a", "1")
	})
}

// TestCommitSortedCancelled: a caller that gives up while the stream is
// being read leaves the branch as it was, also on the memory store, which
// never looks at a context.
func TestCommitSortedCancelled(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		f := newFixture(t, store, graveler.Config{})
		before := f.headOf("main")
		ctx, cancel := context.WithCancel(f.ctx)
		defer cancel()
		s := &sortedStream{recs: bulkRecords(5000), onNext: func(i int) {
			if i == 2500 {
				cancel()
			}
		}}
		_, err := f.g.CommitSorted(ctx, f.repo, "main", s, graveler.CommitParams{})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled bulk commit: %v", err)
		}
		if s.i == len(s.recs) {
			t.Fatal("the build read the whole stream after its caller gave up")
		}
		if h := f.headOf("main"); h != before {
			t.Fatalf("a cancelled bulk commit moved the head from %s to %s", before, h)
		}
		f.wantMissing("main", "bulk/00000")
	})
}

// TestInterleaveCommitSortedVsCommit: a bulk commit is held between its
// read of the branch and its compare-and-swap while a write and a commit
// land: the bulk commit fails with ErrBranchHeadMoved and the other
// commit stays, with none of the stream's entries. If its caller gives up
// while the head update is held before the store, the head never moves;
// held after, it moved.
func TestInterleaveCommitSortedVsCommit(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		recs := bulkRecords(100)
		t.Run("race", func(t *testing.T) {
			p := newPauseFixture(t, store, graveler.Config{})
			var id, cz graveler.CommitID
			err := p.race(p.branchOp("setif", "main"), func(ctx context.Context) error {
				var err error
				id, err = p.commitSorted(ctx, recs, graveler.CommitParams{})
				return err
			}, func() { cz = p.commitMeanwhile() })
			if !errors.Is(err, graveler.ErrBranchHeadMoved) {
				t.Fatalf("bulk commit over a head that moved: %s, %v", id, err)
			}
			p.wantHead(cz)
			p.want("main", "z", "1")
			p.wantMissing("main", "bulk/00000")
		})
		for _, tc := range []struct {
			name    string
			when    kvtest.When
			applied bool
		}{{"gives-up-held-before", kvtest.Before, false}, {"gives-up-held-after", kvtest.After, true}} {
			t.Run(tc.name, func(t *testing.T) {
				p := newPauseFixture(t, store, graveler.Config{})
				before := p.head("main")
				var id graveler.CommitID
				err := p.giveUp(tc.when, p.branchOp("setif", "main"), func(ctx context.Context) error {
					var err error
					id, err = p.commitSorted(ctx, recs, graveler.CommitParams{})
					return err
				})
				switch head := p.head("main"); {
				case tc.applied && (err != nil || head != id):
					t.Fatalf("head update applied: bulk commit %s, %v; head %s", id, err, head)
				case !tc.applied && (err == nil || head != before):
					t.Fatalf("head update never sent: bulk commit %s, %v; head %s, was %s", id, err, head, before)
				}
				if tc.applied {
					p.want("main", "bulk/00099", "v99")
				} else {
					p.wantMissing("main", "bulk/00099")
				}
			})
		}
	})
}
