package ref_test

import (
	"context"
	"errors"
	"testing"

	"graveler/graveler"
	"graveler/keys"
	"graveler/kv"
)

// tagGoneStore deletes the clashing tag right after CreateBranch's
// conditional write is refused for it (another client's DeleteTag landing
// between the write and createBranch's follow-up read).
type tagGoneStore struct {
	kv.Store
	after func()
}

func (s *tagGoneStore) SetIfWith(ctx context.Context, p, k, v []byte, pred kv.Predicate, absent []kv.KeyRef, also []kv.Write) error {
	err := kv.SetIfWith(ctx, s.Store, p, k, v, pred, absent, also)
	if errors.Is(err, kv.ErrPredicateFailed) && s.after != nil {
		s.after()
		s.after = nil
	}
	return err
}

// TestCreateBranchRefusedForATagSinceDeleted: a branch create is refused
// only because a tag of its name exists, and that tag is deleted before
// the create looks at why. It must neither report the branch as existing
// (no branch of that name exists) nor fail: the name is free again, and
// the create is tried again.
func TestCreateBranchRefusedForATagSinceDeleted(t *testing.T) {
	base := memoryStore(t)
	st := &tagGoneStore{Store: base}
	e := newEnv(t, st, nil)
	r := e.createRepo("repo1")
	head, err := e.m.GetBranch(e.ctx, r, "main")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.m.CreateTag(e.ctx, r, "v1", head.CommitID); err != nil {
		t.Fatal(err)
	}
	st.after = func() {
		if err := e.m.DeleteTag(e.ctx, r, "v1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.m.CreateBranch(e.ctx, r, "v1", graveler.Branch{CommitID: head.CommitID}); err != nil {
		t.Fatalf("CreateBranch refused for a tag since deleted: %v", err)
	}
	if st.after != nil {
		t.Fatal("the tag was never deleted between the refusal and the look: the ordering under test did not happen")
	}
	if _, err := e.m.GetBranch(e.ctx, r, "v1"); err != nil {
		t.Fatal(err)
	}
}

// errGetStore fails reads of one key.
type errGetStore struct {
	kv.Store
	fail []byte
}

func (s *errGetStore) SetIfWith(ctx context.Context, p, k, v []byte, pred kv.Predicate, absent []kv.KeyRef, also []kv.Write) error {
	return kv.SetIfWith(ctx, s.Store, p, k, v, pred, absent, also)
}

func (s *errGetStore) Get(ctx context.Context, p, k []byte) ([]byte, kv.Predicate, error) {
	if s.fail != nil && string(k) == string(s.fail) {
		return nil, kv.Absent, kv.ErrUnavailable
	}
	return s.Store.Get(ctx, p, k)
}

// TestCreateTagClashReadFails: CreateTag is refused because a branch of
// its name exists, and reading why fails (unavailable). The answer is
// that failure, not "the tag exists" (no tag does) nor a name clash it
// could not see.
func TestCreateTagClashReadFails(t *testing.T) {
	st := &errGetStore{Store: memoryStore(t)}
	e := newEnv(t, st, nil)
	r := e.createRepo("repo1")
	head, err := e.m.GetBranch(e.ctx, r, "main")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.m.CreateBranch(e.ctx, r, "dev", graveler.Branch{CommitID: head.CommitID}); err != nil {
		t.Fatal(err)
	}
	st.fail = keys.Branch("dev")
	err = e.m.CreateTag(e.ctx, r, "dev", head.CommitID)
	st.fail = nil
	if err == nil || errors.Is(err, graveler.ErrAlreadyExists) {
		t.Fatalf("CreateTag whose look at the refusal failed: %v, want the read's failure", err)
	}
	if _, err := e.m.GetTag(e.ctx, r, "dev"); !errors.Is(err, graveler.ErrTagNotFound) {
		t.Fatalf("tag dev: %v, want ErrTagNotFound", err)
	}
}

func (s *tagGoneStore) DeleteIfWith(ctx context.Context, p, k []byte, pred kv.Predicate, also []kv.Write) error {
	return kv.DeleteIfWith(ctx, s.Store, p, k, pred, also)
}
func (s *tagGoneStore) SetAndReadUnless(ctx context.Context, absent []kv.KeyRef, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, bool, error) {
	return kv.SetAndReadUnless(ctx, s.Store, absent, writes, reads)
}
func (s *errGetStore) DeleteIfWith(ctx context.Context, p, k []byte, pred kv.Predicate, also []kv.Write) error {
	return kv.DeleteIfWith(ctx, s.Store, p, k, pred, also)
}
func (s *errGetStore) SetAndReadUnless(ctx context.Context, absent []kv.KeyRef, writes []kv.Write, reads []kv.KeyRef) ([]kv.Entry, bool, error) {
	return kv.SetAndReadUnless(ctx, s.Store, absent, writes, reads)
}

var _ kv.CondWriter = (*tagGoneStore)(nil)
var _ kv.CondWriter = (*errGetStore)(nil)
