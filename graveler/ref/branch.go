package ref

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"graveler/graveler"
	"graveler/internal/ctxtime"
	"graveler/keys"
	"graveler/kv"
)

func cloneBranch(b *graveler.Branch) *graveler.Branch {
	c := *b
	c.SealedTokens = slices.Clone(b.SealedTokens)
	c.OverrideTokens = slices.Clone(b.OverrideTokens)
	return &c
}

func validateBranch(b *graveler.Branch) error {
	if b == nil {
		return fmt.Errorf("%w: missing branch", graveler.ErrInvalidArgument)
	}
	if err := graveler.ValidateCommitID(b.CommitID); err != nil {
		return err
	}
	if err := validateToken(b.StagingToken); err != nil {
		return err
	}
	for _, t := range b.SealedTokens {
		if err := validateToken(t); err != nil {
			return err
		}
	}
	for _, t := range b.OverrideTokens {
		if !slices.Contains(b.SealedTokens, t) {
			return fmt.Errorf("%w: override token %s is not a sealed token", graveler.ErrInvalidArgument, t)
		}
	}
	return nil
}

// readBranch is one kv read of a branch, with its predicate.
func (m *Manager) readBranch(ctx context.Context, part []byte, repo graveler.RepositoryID, id graveler.BranchID) (*graveler.Branch, kv.Predicate, error) {
	data, pred, err := m.store.Get(ctx, part, keys.Branch(string(id)))
	if errors.Is(err, kv.ErrNotFound) {
		return nil, kv.Absent, fmt.Errorf("%w: %s in repository %s", graveler.ErrBranchNotFound, id, repo)
	}
	if err != nil {
		return nil, kv.Absent, storeErr(err, "get branch %s of repository %s", id, repo)
	}
	b, err := DecodeBranch(data)
	if err != nil {
		return nil, kv.Absent, fmt.Errorf("branch %s of repository %s: %w", id, repo, err)
	}
	return b, pred, nil
}

// GetBranch reads a branch. Concurrent calls for the same branch within
// Config.BranchReadWindow share one kv read; a call never shares a read that
// started before it was made, so it always sees every write that completed
// before it.
func (m *Manager) GetBranch(ctx context.Context, repo *graveler.RepositoryRecord, id graveler.BranchID) (*graveler.Branch, error) {
	part, err := repoPartition(repo)
	if err != nil {
		return nil, err
	}
	if err := graveler.ValidateBranchID(id); err != nil {
		return nil, err
	}
	read := func(ctx context.Context) (*graveler.Branch, error) {
		branchReads.Inc()
		b, _, err := m.readBranch(ctx, part, repo.RepositoryID, id)
		return b, err
	}
	if m.cfg.BranchReadWindow < 0 {
		return read(ctx)
	}
	b, joined, err := m.branches.do(ctx, string(part)+"\x00"+string(id), read)
	if joined {
		branchReadsSaved.Inc()
	}
	if err != nil {
		return nil, err
	}
	return cloneBranch(b), nil
}

// createBranch stores a new branch. Its record says it was created
// (graveler.ChangeCreate), or restored when b says so.
func (m *Manager) createBranch(ctx context.Context, part []byte, repo graveler.RepositoryID, id graveler.BranchID, b *graveler.Branch) error {
	b = cloneBranch(b)
	if b.Change != graveler.ChangeRestore {
		b.Change = graveler.ChangeCreate
	}
	data, err := encodeBranch(b)
	if err != nil {
		return err
	}
	// A ref names the branch before a tag of the same name, so the branch
	// would hide the tag from every read: the tag must be missing, in the
	// same step that creates the branch (CreateTag requires the reverse).
	// A restore copies a repository as it was, such pairs included.
	var tag []kv.KeyRef
	if b.Change != graveler.ChangeRestore {
		tag = []kv.KeyRef{{Partition: part, Key: keys.Tag(string(id))}}
	}
	found, err := m.createClashFree(ctx, part, keys.Branch(string(id)), keys.Tag(string(id)), func() error {
		return kv.SetIfWith(ctx, m.store, part, keys.Branch(string(id)), data, kv.Absent, tag, nil)
	})
	switch {
	case found == existsSelf:
		return fmt.Errorf("%w: %s in repository %s", graveler.ErrBranchExists, id, repo)
	case found == existsOther:
		return fmt.Errorf("%w: branch %s: a tag of that name exists in repository %s, which the branch would hide", graveler.ErrAlreadyExists, id, repo)
	case errors.Is(err, errClashKeptMoving):
		return fmt.Errorf("%w: branch %s of repository %s: a tag of that name kept appearing and going", graveler.ErrConflict, id, repo)
	case err != nil:
		return storeErr(err, "create branch %s of repository %s", id, repo)
	}
	return nil
}

// CreateBranch creates a branch, or fails with ErrBranchExists. An empty
// StagingToken is replaced by a fresh one. The record's Change is
// graveler.ChangeRestore when branch says so, otherwise
// graveler.ChangeCreate. Its write is the operation's decisive one
// (kv.Effect).
func (m *Manager) CreateBranch(ctx context.Context, repo *graveler.RepositoryRecord, id graveler.BranchID, branch graveler.Branch) error {
	part, err := repoPartition(repo)
	if err != nil {
		return err
	}
	if err := graveler.ValidateBranchID(id); err != nil {
		return err
	}
	b := cloneBranch(&branch)
	if b.StagingToken == "" {
		b.StagingToken = m.NewStagingToken(repo.RepositoryID)
	}
	if err := validateBranch(b); err != nil {
		return fmt.Errorf("branch %s of repository %s: %w", id, repo.RepositoryID, err)
	}
	return kv.Effect(ctx, func(ctx context.Context) error {
		return m.createBranch(ctx, part, repo.RepositoryID, id, b)
	})
}

// backoff sleeps before retry number attempt (0-based): a uniformly random
// duration below min(max, base*2^attempt), so that contenders spread out.
func (m *Manager) backoff(ctx context.Context, attempt int) error {
	ceiling := m.cfg.BranchUpdateMaxBackoff
	if attempt < 30 {
		ceiling = min(ceiling, m.cfg.BranchUpdateBackoff<<attempt)
	}
	if !ctxtime.Sleep(ctx, time.Duration(rand.Int64N(int64(ceiling))+1)) {
		return ctx.Err()
	}
	return nil
}

// BranchUpdate applies f to the branch in a read-modify-SetIf loop. An
// update that replaces the branch's staging token also writes the old
// token's seal marker (keys.StagingSealed) in the same atomic step, after
// which no staged write applies to that token. Reads
// go straight to the store (never through the amortized reader, whose
// result may be older than the predicate needs). f may run more than once;
// ErrSkipUpdate from f ends the update without writing. After
// Config.BranchUpdateMaxRetries lost compare-and-swaps it gives up with
// ErrTooManyRetries.
//
// f gets the branch with Change set to graveler.ChangeNone, whatever the
// version read says, so a record says what the write that stored it did,
// never what an earlier one did. A write whose branch has a Change other
// than ChangeNone is the operation's decisive write (kv.Effect).
func (m *Manager) BranchUpdate(ctx context.Context, repo *graveler.RepositoryRecord, id graveler.BranchID, f graveler.BranchUpdateFunc) error {
	part, err := repoPartition(repo)
	if err != nil {
		return err
	}
	if err := graveler.ValidateBranchID(id); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		cur, pred, err := m.readBranch(ctx, part, repo.RepositoryID, id)
		if err != nil {
			return err
		}
		cur.Change = graveler.ChangeNone
		retiring := cur.StagingToken
		next, err := f(cur)
		if errors.Is(err, graveler.ErrSkipUpdate) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := validateBranch(next); err != nil {
			return fmt.Errorf("update branch %s of repository %s: %w", id, repo.RepositoryID, err)
		}
		data, err := encodeBranch(next)
		if err != nil {
			return err
		}
		err = effectIf(ctx, next.Change != graveler.ChangeNone, func(ctx context.Context) error {
			if next.StagingToken == retiring {
				return m.store.SetIf(ctx, part, keys.Branch(string(id)), data, pred)
			}
			// The token stops taking writes in the same step as the
			// branch stops naming it (keys.StagingSealed): a writer that
			// read the branch before this update cannot land in the token
			// after a commit started reading it.
			seal := kv.Write{Partition: keys.StagingPartition(string(retiring)), Key: keys.StagingSealed(), Value: []byte{}}
			return kv.SetIfWith(ctx, m.store, part, keys.Branch(string(id)), data, pred, nil, []kv.Write{seal})
		})
		if err == nil {
			return nil
		}
		if !errors.Is(err, kv.ErrPredicateFailed) {
			return storeErr(err, "update branch %s of repository %s", id, repo.RepositoryID)
		}
		if attempt >= m.cfg.BranchUpdateMaxRetries {
			branchUpdateGiveUps.Inc()
			return fmt.Errorf("update branch %s of repository %s after %d retries: %w", id, repo.RepositoryID, attempt, graveler.ErrTooManyRetries)
		}
		branchUpdateRetries.Inc()
		if err := m.backoff(ctx, attempt); err != nil {
			return err
		}
	}
}

// DeleteBranch deletes a branch. The staging and sealed tokens of the
// version read are queued for the cleaner, then the record is removed with
// DeleteIf at that version, so a crash leaks nothing and the tokens of
// every version removed are queued. The staging token's seal marker is
// written in the same step (none when etcd is out of space), so no staged
// write applies to it after the branch is gone. If the branch changed in between (a
// commit, or a delete and re-create of the name), the newer version is
// read and the same is done for it, with backoff, up to
// Config.BranchUpdateMaxRetries times (then ErrTooManyRetries). A branch
// found gone on a re-read was deleted concurrently: done.
func (m *Manager) DeleteBranch(ctx context.Context, repo *graveler.RepositoryRecord, id graveler.BranchID) error {
	part, err := repoPartition(repo)
	if err != nil {
		return err
	}
	if err := graveler.ValidateBranchID(id); err != nil {
		return err
	}
	if id == repo.DefaultBranchID {
		return fmt.Errorf("%w: %s of repository %s", graveler.ErrDeleteDefaultBranch, id, repo.RepositoryID)
	}
	b, pred, err := m.readBranch(ctx, part, repo.RepositoryID, id)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if err := m.DeleteStagingTokens(ctx, append([]graveler.StagingToken{b.StagingToken}, b.SealedTokens...)); err != nil {
			return fmt.Errorf("delete branch %s of repository %s: %w", id, repo.RepositoryID, err)
		}
		err := kv.Effect(ctx, func(ctx context.Context) error {
			// The staging token stops taking writes in the same step as
			// the branch goes, as when a branch update retires it: a
			// writer that read the branch earlier, and finds the name
			// created again by the time it looks, knows from the marker
			// that its write applied before the delete (done) or not at
			// all (to write into the new branch), instead of not knowing.
			seal := kv.Write{Partition: keys.StagingPartition(string(b.StagingToken)), Key: keys.StagingSealed(), Value: []byte{}}
			err := kv.DeleteIfWith(ctx, m.store, part, keys.Branch(string(id)), pred, []kv.Write{seal})
			if errors.Is(err, kv.ErrQuotaExceeded) {
				// etcd's NOSPACE alarm refuses the marker's put but not a
				// delete, which frees space: delete without it.
				err = m.store.DeleteIf(ctx, part, keys.Branch(string(id)), pred)
			}
			return err
		})
		if err == nil {
			return nil
		}
		if !errors.Is(err, kv.ErrPredicateFailed) {
			return storeErr(err, "delete branch %s of repository %s", id, repo.RepositoryID)
		}
		if attempt >= m.cfg.BranchUpdateMaxRetries {
			branchUpdateGiveUps.Inc()
			return fmt.Errorf("delete branch %s of repository %s after %d retries: %w", id, repo.RepositoryID, attempt, graveler.ErrTooManyRetries)
		}
		branchUpdateRetries.Inc()
		if err := m.backoff(ctx, attempt); err != nil {
			return err
		}
		b, pred, err = m.readBranch(ctx, part, repo.RepositoryID, id)
		if errors.Is(err, graveler.ErrBranchNotFound) {
			return nil // deleted concurrently, by a delete that queued its tokens
		}
		if err != nil {
			return err
		}
	}
}

// ListBranches walks branches by name, or by commit id (then name). By
// commit id the branches are loaded and sorted in memory (a repository has
// few branches compared to commits or entries); After is then
// "<commit id>/<branch id>".
func (m *Manager) ListBranches(ctx context.Context, repo *graveler.RepositoryRecord, opts graveler.ListBranchesOptions) iter.Seq2[*graveler.BranchRecord, error] {
	return func(yield func(*graveler.BranchRecord, error) bool) {
		part, err := repoPartition(repo)
		if err != nil {
			yield(nil, err)
			return
		}
		switch opts.Order {
		case graveler.BranchListByName:
			for rec, err := range m.scanBranches(ctx, part, repo.RepositoryID, opts.After) {
				if !yield(rec, err) || err != nil {
					return
				}
			}
		case graveler.BranchListByCommitID:
			var all []*graveler.BranchRecord
			for rec, err := range m.scanBranches(ctx, part, repo.RepositoryID, "") {
				if err != nil {
					yield(nil, err)
					return
				}
				all = append(all, rec)
			}
			slices.SortFunc(all, func(a, b *graveler.BranchRecord) int {
				return cmp.Or(cmp.Compare(a.CommitID, b.CommitID), cmp.Compare(a.BranchID, b.BranchID))
			})
			for _, rec := range all {
				if opts.After != "" && string(rec.CommitID)+"/"+string(rec.BranchID) <= opts.After {
					continue
				}
				if !yield(rec, nil) {
					return
				}
			}
		default:
			yield(nil, fmt.Errorf("%w: branch list order %d", graveler.ErrInvalidArgument, opts.Order))
		}
	}
}

func (m *Manager) scanBranches(ctx context.Context, part []byte, repo graveler.RepositoryID, afterName string) iter.Seq2[*graveler.BranchRecord, error] {
	return func(yield func(*graveler.BranchRecord, error) bool) {
		for e, err := range m.store.Scan(ctx, part, kv.ScanOptions{Start: after(keys.BranchesPrefix, afterName)}) {
			if err != nil {
				yield(nil, storeErr(err, "list branches of repository %s", repo))
				return
			}
			if !strings.HasPrefix(string(e.Key), keys.BranchesPrefix) {
				return
			}
			name, err := keys.ParseRecord(keys.BranchesPrefix, e.Key)
			if err != nil {
				yield(nil, fmt.Errorf("%w: %w", ErrCorruptRecord, err))
				return
			}
			b, err := DecodeBranch(e.Value)
			if err != nil {
				yield(nil, fmt.Errorf("branch %s of repository %s: %w", name, repo, err))
				return
			}
			if !yield(&graveler.BranchRecord{BranchID: graveler.BranchID(name), Branch: b}, nil) {
				return
			}
		}
	}
}

// DeleteStagingTokens queues tokens for the cleaner, which drops their
// partitions.
func (m *Manager) DeleteStagingTokens(ctx context.Context, tokens []graveler.StagingToken) error {
	for _, t := range tokens {
		if err := validateToken(t); err != nil {
			return err
		}
	}
	for _, t := range tokens {
		if err := m.store.Set(ctx, keys.Deleted(), keys.DeletedToken(string(t)), m.deletedMarker()); err != nil {
			return storeErr(err, "queue staging token %s", t)
		}
	}
	return nil
}

var _ graveler.BranchFencer = (*Manager)(nil)

// BranchFenceReads names the records a staged write reads as its fence:
// the repository's, then the branch's.
func (m *Manager) BranchFenceReads(repo *graveler.RepositoryRecord, id graveler.BranchID) ([]kv.KeyRef, error) {
	part, err := repoPartition(repo)
	if err != nil {
		return nil, err
	}
	if err := graveler.ValidateBranchID(id); err != nil {
		return nil, err
	}
	return []kv.KeyRef{
		{Partition: keys.Graveler(), Key: keys.Repository(string(repo.RepositoryID))},
		{Partition: part, Key: keys.Branch(string(id))},
	}, nil
}

// ParseBranchFence checks the records BranchFenceReads named, as read
// after a staged write: a write into a repository deleted, being deleted
// (ErrRepositoryDeleting), not yet active or created again meanwhile is
// refused, like one into a missing branch.
func (m *Manager) ParseBranchFence(repo *graveler.RepositoryRecord, id graveler.BranchID, got []kv.Entry) (*graveler.RepositoryRecord, *graveler.Branch, error) {
	if len(got) != 2 {
		return nil, nil, fmt.Errorf("ref: branch fence: %d records read, want 2", len(got))
	}
	if got[0].Predicate.IsAbsent() {
		return nil, nil, fmt.Errorf("%w: %s", graveler.ErrRepositoryNotFound, repo.RepositoryID)
	}
	r, err := DecodeRepository(got[0].Value)
	if err != nil {
		return nil, nil, fmt.Errorf("repository %s: %w", repo.RepositoryID, err)
	}
	switch {
	case r.UniqueID != repo.UniqueID:
		return nil, nil, fmt.Errorf("%w: %s was deleted and created again", graveler.ErrRepositoryNotFound, repo.RepositoryID)
	case r.State == graveler.RepositoryStateDeleting:
		return nil, nil, fmt.Errorf("%w: %s", graveler.ErrRepositoryDeleting, repo.RepositoryID)
	case r.State != graveler.RepositoryStateActive:
		return nil, nil, fmt.Errorf("%w: %s (%s)", graveler.ErrRepositoryNotFound, repo.RepositoryID, r.State)
	}
	if got[1].Predicate.IsAbsent() {
		return nil, nil, fmt.Errorf("%w: %s in repository %s", graveler.ErrBranchNotFound, id, repo.RepositoryID)
	}
	b, err := DecodeBranch(got[1].Value)
	if err != nil {
		return nil, nil, fmt.Errorf("branch %s of repository %s: %w", id, repo.RepositoryID, err)
	}
	return &graveler.RepositoryRecord{RepositoryID: repo.RepositoryID, Repository: r}, b, nil
}

// clashRetries bounds the creates of a branch or tag that were refused
// for the other ref of its name, which was gone again when looked at.
const clashRetries = 3

// errClashKeptMoving: a create was refused clashRetries times for the
// other ref of its name, each time gone again when looked at.
var errClashKeptMoving = errors.New("ref: the other ref of the name kept appearing and going")

// exists is which of a ref's key and the other ref's key of its name a
// refused create found.
type exists int

const (
	existsNeither exists = iota
	existsSelf
	existsOther
)

// createClashFree runs create, a create of self in part that requires
// other (the other kind of ref of the same name) to be missing as well,
// and tells why it was refused: existsSelf or existsOther (err nil), as
// read at one instant. A refusal whose cause is gone when looked at (the
// other ref deleted meanwhile) is tried again, up to clashRetries times,
// then errClashKeptMoving. Applied: existsNeither and nil.
func (m *Manager) createClashFree(ctx context.Context, part, self, other []byte, create func() error) (exists, error) {
	for attempt := 0; ; attempt++ {
		err := create()
		if !errors.Is(err, kv.ErrPredicateFailed) {
			return existsNeither, err
		}
		got, err := kv.GetMany(ctx, m.store, []kv.KeyRef{{Partition: part, Key: self}, {Partition: part, Key: other}})
		switch {
		case err != nil:
			return existsNeither, err
		case !got[0].Predicate.IsAbsent():
			return existsSelf, nil
		case !got[1].Predicate.IsAbsent():
			return existsOther, nil
		case attempt >= clashRetries:
			return existsNeither, errClashKeptMoving
		}
	}
}
