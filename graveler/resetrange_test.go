package graveler_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/proto"

	"graveler/graveler"
	"graveler/graveler/gravelertest"
	"graveler/graveler/staging"
	"graveler/graveler/staging/stagingpb"
	"graveler/keys"
	"graveler/kv"
	"graveler/kv/kvtest"
)

// Reset of a prefix with no commit in flight: one reset range
// (RangeStager.ResetPrefix) instead of a delete per staged key.

// writeCounter counts the kv writes made through it (each key written
// counts once). It passes the optional abilities through, so fenced and
// conditional paths stay what they are on the store it wraps.
type writeCounter struct {
	kv.Store
	writes atomic.Int64
}

func (s *writeCounter) Set(ctx context.Context, partition, key, value []byte) error {
	s.writes.Add(1)
	return s.Store.Set(ctx, partition, key, value)
}

func (s *writeCounter) SetIf(ctx context.Context, partition, key, value []byte, pred kv.Predicate) error {
	s.writes.Add(1)
	return s.Store.SetIf(ctx, partition, key, value, pred)
}

func (s *writeCounter) Delete(ctx context.Context, partition, key []byte) error {
	s.writes.Add(1)
	return s.Store.Delete(ctx, partition, key)
}

func (s *writeCounter) DeleteIf(ctx context.Context, partition, key []byte, pred kv.Predicate) error {
	s.writes.Add(1)
	return s.Store.DeleteIf(ctx, partition, key, pred)
}

func (s *writeCounter) GetMany(ctx context.Context, reads []kv.KeyRef) ([]kv.Entry, error) {
	return kv.GetMany(ctx, s.Store, reads)
}

func (s *writeCounter) SetAndRead(ctx context.Context, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, error) {
	s.writes.Add(int64(len(writes)))
	return kv.SetAndRead(ctx, s.Store, writes, reads)
}

func (s *writeCounter) SetAndReadUnless(ctx context.Context, absent []kv.KeyRef, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, bool, error) {
	s.writes.Add(int64(len(writes)))
	return kv.SetAndReadUnless(ctx, s.Store, absent, writes, reads)
}

func (s *writeCounter) DeleteIfWith(ctx context.Context, partition, key []byte, pred kv.Predicate, also []kv.Write) error {
	s.writes.Add(int64(1 + len(also)))
	return kv.DeleteIfWith(ctx, s.Store, partition, key, pred, also)
}

func (s *writeCounter) SetIfWith(ctx context.Context, partition, key, value []byte, pred kv.Predicate, absent []kv.KeyRef, also []kv.Write) error {
	s.writes.Add(int64(1 + len(also)))
	return kv.SetIfWith(ctx, s.Store, partition, key, value, pred, absent, also)
}

func (s *writeCounter) DropPartition(ctx context.Context, partition []byte) (int64, error) {
	s.writes.Add(1)
	return kv.DropPartition(ctx, s.Store, partition)
}

var (
	_ kv.MultiGetter      = (*writeCounter)(nil)
	_ kv.SetReader        = (*writeCounter)(nil)
	_ kv.CondWriter       = (*writeCounter)(nil)
	_ kv.PartitionDropper = (*writeCounter)(nil)
)

func (f *fixture) setBatch(branch string, recs []*graveler.ValueRecord) {
	f.t.Helper()
	if err := f.g.SetBatch(f.ctx, f.repo, graveler.BranchID(branch), recs); err != nil {
		f.t.Fatalf("set batch of %d on %s: %v", len(recs), branch, err)
	}
}

func (f *fixture) resetPrefix(branch, prefix string) {
	f.t.Helper()
	if err := f.g.Reset(f.ctx, f.repo, graveler.BranchID(branch), graveler.ResetTypePrefix, graveler.Key(prefix)); err != nil {
		f.t.Fatalf("reset prefix %q on %s: %v", prefix, branch, err)
	}
}

func records(v string, keys ...string) []*graveler.ValueRecord {
	out := make([]*graveler.ValueRecord, len(keys))
	for i, k := range keys {
		vv := val(v)
		out[i] = &graveler.ValueRecord{Key: graveler.Key(k), Value: &vv}
	}
	return out
}

// rangesIn describes the ranges record of token st as stored: "prefix"
// for a range tombstone, "prefix(reset)" for a reset range; nil when
// there is none.
func rangesIn(t *testing.T, store kv.Store, st graveler.StagingToken) []string {
	t.Helper()
	data, _, err := store.Get(t.Context(), keys.StagingPartition(string(st)), keys.StagingRanges())
	if errors.Is(err, kv.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var m stagingpb.RangeTombstones
	if err := proto.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range m.GetTombstones() {
		s := string(r.GetPrefix())
		if r.GetResetRange() {
			s += "(reset)"
		}
		out = append(out, s)
	}
	return out
}

// storedUnder lists the entry keys token st holds under prefix, as stored
// (hidden or not).
func storedUnder(t *testing.T, store kv.Store, st graveler.StagingToken, prefix string) []string {
	t.Helper()
	var out []string
	kp := keys.Entry([]byte(prefix))
	for e, err := range store.Scan(t.Context(), keys.StagingPartition(string(st)), kv.ScanOptions{Start: kp}) {
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(e.Key, kp) {
			break
		}
		k, _ := keys.ParseEntry(e.Key)
		var rec stagingpb.Entry
		if err := proto.Unmarshal(e.Value, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.GetReset_() {
			k = append(k, "(reset)"...)
		}
		out = append(out, string(k))
	}
	return out
}

// TestResetPrefixOneWrite: with 10,000 keys staged under a prefix and no
// commit in flight, a reset of the prefix is a constant number of kv
// writes, and afterwards every reader shows the head under the prefix:
// Get, listing, DiffUncommitted and the next commit. A key written under
// the prefix after the reset survives.
func TestResetPrefixOneWrite(t *testing.T) {
	const staged, committed = 10_000, 10
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		cs := &writeCounter{Store: store}
		f := newFixture(t, cs, graveler.Config{})
		name := func(i int) string { return fmt.Sprintf("p/%05d", i) }
		var base, over []string
		for i := range committed {
			base = append(base, name(i))
		}
		f.setBatch("main", records("old", append(slices.Clone(base), "q")...))
		f.commit("main", "base")
		for i := range staged {
			over = append(over, name(i))
		}
		f.setBatch("main", records("new", over...))
		f.set("main", "q", "new")
		if err := f.g.Delete(f.ctx, f.repo, "main", graveler.Key(name(3))); err != nil {
			t.Fatal(err)
		}
		f.want("main", name(0), "new")
		f.wantMissing("main", name(3))

		before := cs.writes.Load()
		f.resetPrefix("main", "p/")
		if n := cs.writes.Load() - before; n > 2 {
			t.Fatalf("reset of a prefix over %d staged keys made %d kv writes, want at most 2", staged, n)
		}

		check := func(ref string) {
			t.Helper()
			for _, k := range base {
				f.want(ref, k, "old")
			}
			f.wantMissing(ref, name(committed))
			f.wantMissing(ref, name(staged-1))
			f.want(ref, "q", "new")
		}
		check("main")
		wantRows(t, "list", f.treeKeys("main"), append(slices.Clone(base), "q")...)
		wantRows(t, "diff", f.diffUncommitted("main"), "changed q")

		f.set("main", "p/after", "after")
		f.want("main", "p/after", "after")
		wantRows(t, "diff with a key written after", f.diffUncommitted("main"), "added p/after", "changed q")
		c := f.commit("main", "after the reset")
		check(string(c))
		f.want(string(c), "p/after", "after")
		wantRows(t, "committed", f.treeKeys(string(c)), append(slices.Clone(base), "p/after", "q")...)
	})
}

// TestResetPrefixLeavesBranchClean: a branch whose only staged entries a
// reset range hides has nothing to commit.
func TestResetPrefixLeavesBranchClean(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		f := newFixture(t, store, graveler.Config{})
		f.set("main", "a", "1")
		f.commit("main", "base")
		f.set("main", "p/1", "1")
		f.set("main", "p/2", "2")
		f.resetPrefix("main", "p/")
		if got := f.diffUncommitted("main"); len(got) != 0 {
			t.Fatalf("diff after reset: %v", got)
		}
		if _, err := f.g.Commit(f.ctx, f.repo, "main", graveler.CommitParams{Message: "nothing"}); !errors.Is(err, graveler.ErrNoChanges) {
			t.Fatalf("commit of a reset branch: %v, want ErrNoChanges", err)
		}
	})
}

// TestResetPrefixCommitInFlight: with a commit holding a sealed token, a
// reset of a prefix takes the override path: one override token with an
// override per key, published above the sealed token and below the
// staging token (which stages nothing under the prefix and keeps taking
// writes), no reset range anywhere; the discard outlives the commit.
func TestResetPrefixCommitInFlight(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		p := newPauseFixture(t, store, graveler.Config{})
		p.set("main", "p/1", "old")
		p.commit("main", "base")
		for _, k := range []string{"p/1", "p/2", "q"} {
			p.set("main", k, "new")
		}
		sealed := p.branch("main").StagingToken
		hold, commit, _ := p.holdCommit("main")
		st := p.branch("main").StagingToken
		if err := p.reset(p.ctx, graveler.ResetTypePrefix, "p/"); err != nil {
			t.Fatal(err)
		}
		if r := rangesIn(t, p.inner, st); r != nil {
			t.Fatalf("staging token took ranges %q, want overrides", r)
		}
		if r := rangesIn(t, p.inner, sealed); r != nil {
			t.Fatalf("sealed token took ranges %q", r)
		}
		b := p.branch("main")
		if len(b.OverrideTokens) != 1 || b.StagingToken != st || !slices.Equal(b.SealedTokens, []graveler.StagingToken{b.OverrideTokens[0], sealed}) {
			t.Fatalf("branch %+v, want the override token above the commit's token, below the staging token (which stages nothing in scope)", b)
		}
		wantRows(t, "overrides", storedUnder(t, p.inner, b.OverrideTokens[0], "p/"), "p/1", "p/2")
		check := func(ref string) {
			t.Helper()
			p.want(ref, "p/1", "old")
			p.wantMissing(ref, "p/2")
			p.want(ref, "q", "new")
		}
		check("main")
		p.release(hold, commit)
		check("main")
		p.commit("main", "next")
		check("main")
		check("main@")
	})
}

// TestResetPrefixRangeRacesSeal: a reset finds no commit in flight and is
// held just before its reset range reaches the store; a commit seals the
// token, reads it and is held before its head update. Released, the reset
// range is refused by the seal (the sealed token takes no write), and the
// reset falls back to the path that outlives the commit.
func TestResetPrefixRangeRacesSeal(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		p := newPauseFixture(t, store, graveler.Config{})
		p.set("main", "p/1", "old")
		p.commit("main", "base")
		p.set("main", "p/1", "new")
		p.set("main", "p/2", "new")
		st := p.branch("main").StagingToken
		var hold *kvtest.PausePoint
		var commit <-chan error
		err := p.race(p.rangesOf("setif"), func(ctx context.Context) error { return p.reset(ctx, graveler.ResetTypePrefix, "p/") }, func() {
			hold, commit, _ = p.holdCommit("main")
		})
		if err != nil {
			t.Fatal(err)
		}
		if r := rangesIn(t, p.inner, st); r != nil {
			t.Fatalf("the sealed token took ranges %q after its seal", r)
		}
		check := func(ref string) {
			t.Helper()
			p.want(ref, "p/1", "old")
			p.wantMissing(ref, "p/2")
		}
		check("main")
		p.release(hold, commit)
		check("main")
		p.commit("main", "next")
		check("main")
		check("main@")
	})
}

// TestResetPrefixRangeThenSeal: the reset range lands, then a commit seals
// the token before the reset re-reads the branch. The commit reads the
// token with the range (it carries none of the discarded values), and the
// reset, seeing its token gone, makes the discard outlive the commit.
func TestResetPrefixRangeThenSeal(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		p := newPauseFixture(t, store, graveler.Config{})
		p.set("main", "p/1", "old")
		p.commit("main", "base")
		p.set("main", "p/1", "new")
		p.set("main", "p/2", "new")
		p.set("main", "q", "new")
		st := p.branch("main").StagingToken
		hold := p.ps.Pause(kvtest.After, p.rangesOf("setif"))
		reset := async(func() error { return p.reset(p.ctx, graveler.ResetTypePrefix, "p/") })
		hold.Wait(t, holdTimeout)
		c := p.commit("main", "meanwhile")
		hold.Release()
		if err := await(t, reset); err != nil {
			t.Fatal(err)
		}
		wantRows(t, "ranges of the sealed token", rangesIn(t, p.inner, st), "p/(reset)")
		check := func(ref string) {
			t.Helper()
			p.want(ref, "p/1", "old")
			p.wantMissing(ref, "p/2")
			p.want(ref, "q", "new")
		}
		check(string(c))
		check("main")
		p.set("main", "z", "1")
		p.commit("main", "next")
		check("main@")
	})
}

// TestResetPrefixDeleteRangeMeanwhile: a range tombstone staged into the
// prefix after the reset read the branch's tokens makes the token refuse
// the reset range (hiding entries would not undo the tombstone). The next
// round finds the tombstone and publishes an override token above the
// token, which it seals: the reset takes effect after the prefix delete
// and discards it too, so every key under the prefix shows its head
// value.
func TestResetPrefixDeleteRangeMeanwhile(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		p := newPauseFixture(t, store, graveler.Config{})
		p.set("main", "p/x/1", "old")
		p.set("main", "p/y/1", "old")
		p.commit("main", "base")
		p.set("main", "p/x/2", "new")
		p.set("main", "p/y/1", "new")
		st := p.branch("main").StagingToken
		err := p.race(p.rangesOf("get_many"), func(ctx context.Context) error { return p.reset(ctx, graveler.ResetTypePrefix, "p/") }, func() {
			p.deletePrefix("main", "p/x/")
		})
		if err != nil {
			t.Fatal(err)
		}
		wantRows(t, "ranges", rangesIn(t, p.inner, st), "p/x/")
		wantRows(t, "stored under p/", storedUnder(t, p.inner, st, "p/"), "p/x/2", "p/y/1")
		b := p.branch("main")
		if len(b.OverrideTokens) != 1 || !slices.Equal(b.SealedTokens, []graveler.StagingToken{b.OverrideTokens[0], st}) {
			t.Fatalf("branch %+v, want an override token above the sealed token", b)
		}
		wantRows(t, "overrides", storedUnder(t, p.inner, b.OverrideTokens[0], "p/"), "p/x/1", "p/x/2", "p/y/1")
		check := func(ref string) {
			t.Helper()
			p.want(ref, "p/x/1", "old")
			p.wantMissing(ref, "p/x/2")
			p.want(ref, "p/y/1", "old")
		}
		check("main")
		p.commitAllowEmpty("main")
		check("main@")
	})
}

// TestResetPrefixTokenFull: a token at its limit of ranges takes no reset
// range; the reset hides the staged entries under an override token
// instead, above the token, which it seals.
func TestResetPrefixTokenFull(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store kv.Store) {
		g := gravelertest.New(t, store, gravelertest.Options{Staging: staging.Config{MaxRangeTombstones: 1}})
		f := &fixture{t: t, g: g, ctx: context.Background(), repo: "repo"}
		if _, err := g.CreateRepository(f.ctx, f.repo, gravelertest.Namespace(), "main"); err != nil {
			t.Fatal(err)
		}
		f.set("main", "a/1", "old")
		f.set("main", "b/1", "old")
		f.commit("main", "base")
		for _, k := range []string{"a/1", "a/2", "b/1", "b/2"} {
			f.set("main", k, "new")
		}
		f.resetPrefix("main", "a/")
		f.resetPrefix("main", "b/")
		b, err := g.GetBranch(f.ctx, f.repo, "main")
		if err != nil {
			t.Fatal(err)
		}
		if len(b.OverrideTokens) != 1 || len(b.SealedTokens) != 2 || b.SealedTokens[0] != b.OverrideTokens[0] {
			t.Fatalf("branch %+v, want an override token above the sealed token", b.Branch)
		}
		wantRows(t, "ranges", rangesIn(t, store, b.SealedTokens[1]), "a/(reset)")
		wantRows(t, "overrides", storedUnder(t, store, b.OverrideTokens[0], ""), "b/1", "b/2")
		for _, ref := range []string{"main", string(f.commitAllowEmpty("main"))} {
			f.want(ref, "a/1", "old")
			f.wantMissing(ref, "a/2")
			f.want(ref, "b/1", "old")
			f.wantMissing(ref, "b/2")
		}
	})
}

func (f *fixture) commitAllowEmpty(branch string) graveler.CommitID {
	f.t.Helper()
	id, err := f.g.Commit(f.ctx, f.repo, graveler.BranchID(branch), graveler.CommitParams{Committer: "t", Message: "m", AllowEmpty: true})
	if err != nil {
		f.t.Fatal(err)
	}
	return id
}
