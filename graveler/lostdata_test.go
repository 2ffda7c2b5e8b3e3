package graveler_test

import (
	"errors"
	"strings"
	"testing"

	"graveler/graveler"
	"graveler/graveler/gravelertest"
	"graveler/kv"
)

// TestLostTreeIsNotAnAbsentEntry: a repository restored onto a namespace
// that lacks the commits' trees (or one whose blobs were lost) holds
// commits whose data is missing. A Get of a key there is answered
// METARANGE_NOT_FOUND, not "no such entry": a put --if-absent must not
// then overwrite the key, nor a delete be refused as of a missing key.
func TestLostTreeIsNotAnAbsentEntry(t *testing.T) {
	f := newFixture(t, kv.NewMemoryStore(), graveler.Config{})
	f.set("main", "a", "1")
	f.commit("main", "one")
	// An empty namespace: the dump's trees are not there.
	if err := f.restoreCopy("copy", gravelertest.Namespace(), f.dump()); err != nil {
		t.Fatal(err)
	}
	lost := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, graveler.ErrMetaRangeNotFound) || errors.Is(err, graveler.ErrEntryNotFound) {
			t.Errorf("%s: %v, want the tree reported missing (ErrMetaRangeNotFound), not ErrEntryNotFound", what, err)
		}
	}
	_, err := f.g.Get(f.ctx, "copy", "main", graveler.Key("a"))
	lost("get on the branch", err)
	head, err := f.g.GetCommit(f.ctx, "copy", "main")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.g.Get(f.ctx, "copy", graveler.Ref(head.CommitID), graveler.Key("a"))
	lost("get at the commit", err)
	err = f.g.Set(f.ctx, "copy", "main", graveler.Key("a"), graveler.Value{Identity: []byte("i2"), Data: []byte("2")}, graveler.SetOptions{IfAbsent: true})
	lost("put --if-absent", err)
	err = f.g.Delete(f.ctx, "copy", "main", graveler.Key("a"))
	lost("delete", err)
	// Nothing was staged by the refused calls.
	if _, err := f.g.Get(f.ctx, "copy", "main", graveler.Key("a")); errors.Is(err, graveler.ErrEntryNotFound) || err == nil {
		t.Fatalf("after the refused writes, get: %v", err)
	}
}

// TestEntryNotFoundNamesRef: a missing key is reported with the ref it
// was looked up at, beside the repository and the key, on a branch (its
// staged entries and head) and at a commit alike.
func TestEntryNotFoundNamesRef(t *testing.T) {
	f := newFixture(t, kv.NewMemoryStore(), graveler.Config{})
	f.set("main", "a", "1")
	c := f.commit("main", "one")
	for _, ref := range []graveler.Ref{"main", graveler.Ref(c)} {
		_, err := f.g.Get(f.ctx, f.repo, ref, graveler.Key("nope"))
		if !errors.Is(err, graveler.ErrEntryNotFound) {
			t.Fatalf("get at %s: %v", ref, err)
		}
		for _, want := range []string{`"nope"`, string(f.repo), "at " + string(ref)} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("get at %s: %q does not name %s", ref, err, want)
			}
		}
	}
	err := f.g.Delete(f.ctx, f.repo, "main", graveler.Key("nope"))
	if !errors.Is(err, graveler.ErrEntryNotFound) || !strings.Contains(err.Error(), "at main") {
		t.Errorf("delete of a missing key: %v", err)
	}
}

// dump is DumpRefs of the fixture's repository.
func (f *fixture) dump() []*graveler.RefsRecord {
	f.t.Helper()
	var recs []*graveler.RefsRecord
	for r, err := range f.g.DumpRefs(f.ctx, f.repo) {
		if err != nil {
			f.t.Fatal(err)
		}
		recs = append(recs, r)
	}
	return recs
}

// restoreCopy creates bare repository repo on ns and restores recs into it.
func (f *fixture) restoreCopy(repo graveler.RepositoryID, ns graveler.StorageNamespace, recs []*graveler.RefsRecord) error {
	if _, err := f.g.CreateBareRepository(f.ctx, repo, ns, "main"); err != nil {
		return err
	}
	return f.g.RestoreRefs(f.ctx, repo, func(yield func(*graveler.RefsRecord, error) bool) {
		for _, r := range recs {
			if !yield(r, nil) {
				return
			}
		}
	})
}
