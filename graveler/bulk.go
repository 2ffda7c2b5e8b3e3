package graveler

import (
	"bytes"
	"context"
	"fmt"
)

// CommitSorted records on a clean branch a commit whose content is exactly
// the entries of a sorted stream, written straight into the committed
// store (CommittedManager.WriteMetaRangeByIterator) without staging them:
// building a head of millions of entries costs one pass over the stream and
// its object writes, not millions of staged etcd writes and a commit that
// reads them back. It is the basis of bulk import, and what tests and
// benchmarks use to build large heads quickly.
//
// entries must yield keys in strictly ascending byte order, each with a
// valid value (no tombstones: this is a whole tree, not a change set);
// otherwise ErrInvalidArgument and the branch is left as it was. Keys of
// the head that the stream lacks are absent from the new commit. The
// caller keeps ownership of entries and closes it.
//
// The flow is merge's, for a one-parent commit:
//
//  1. read the branch; one with staged changes (staged or sealed tokens,
//     a commit in flight) is refused with ErrDirtyBranch, a
//     failed-precondition error, as they would otherwise be neither in
//     the new commit nor discarded;
//  2. write the tree from the stream;
//  3. store the commit record, its parent the head read in step 1;
//  4. move the branch from that head to the new commit with a
//     compare-and-swap (ChangeCommit).
//
// A commit, merge or reset that moves the head between steps 1 and 4 wins:
// CommitSorted fails with ErrBranchHeadMoved and the branch keeps the
// other operation's head. Objects already written are left to the
// cleaner's collection of unreferenced objects. Writes staged on the branch
// meanwhile stay staged on top of the new head, as they do over a merge.
// A cancelled ctx stops the build between entries and never moves the
// branch unless step 4 has reached the store. ErrNoChanges when the
// stream's tree is the head's and !params.AllowEmpty.
func (g *Graveler) CommitSorted(ctx context.Context, repoID RepositoryID, branch BranchID, entries ValueIterator, params CommitParams) (CommitID, error) {
	// Before the tree is built: a record too large for the store would
	// fail only after every entry was written.
	if err := ValidateCommitContent(params.Message, params.Committer, params.Metadata); err != nil {
		return "", err
	}
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return "", err
	}
	b, head, err := g.cleanBranch(ctx, repo, branch)
	if err != nil {
		return "", err
	}
	it := &sortedInput{ValueIterator: entries, ctx: ctx}
	mr, err := g.committed.WriteMetaRangeByIterator(ctx, repo.StorageNamespace, it)
	if it.err != nil {
		// The store saw the iterator end early; say why.
		err = it.err
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return "", fmt.Errorf("bulk commit on branch %s of repository %s: %w", branch, repoID, err)
	}
	if mr == head.MetaRangeID && !params.AllowEmpty {
		return "", fmt.Errorf("bulk commit on branch %s of repository %s: %w", branch, repoID, ErrNoChanges)
	}
	return g.commitOnto(ctx, repo, branch, b.CommitID, mr, params, ChangeCommit)
}

// sortedCheckEvery is how many entries sortedInput passes between looks at
// its context: often enough to stop a large build promptly, rarely enough
// to cost nothing per entry.
const sortedCheckEvery = 1024

// sortedInput checks CommitSorted's stream as the committed store reads
// it: keys strictly ascending, values valid, the caller still waiting. It
// ends the stream at the first fault and keeps it in err, so the fault is
// reported as the caller's whatever the store makes of a short stream.
type sortedInput struct {
	ValueIterator
	ctx  context.Context
	last Key
	n    int
	err  error
}

func (s *sortedInput) Next() bool {
	if s.err != nil || !s.ValueIterator.Next() {
		return false
	}
	if s.n++; s.n%sortedCheckEvery == 0 {
		if s.err = s.ctx.Err(); s.err != nil {
			return false
		}
	}
	rec := s.ValueIterator.Value()
	switch {
	case rec == nil || rec.IsTombstone():
		s.err = fmt.Errorf("%w: entry %d is a tombstone; a bulk commit takes whole entries", ErrInvalidArgument, s.n)
	case s.n > 1 && bytes.Compare(rec.Key, s.last) <= 0:
		s.err = fmt.Errorf("%w: key %s does not sort after %s; a bulk commit takes keys in strictly ascending order", ErrInvalidArgument, Echo(rec.Key), Echo(s.last))
	default:
		if err := ValidateKey(rec.Key); err != nil {
			s.err = fmt.Errorf("entry %d: %w", s.n, err)
		} else if err := ValidateValue(rec.Value); err != nil {
			s.err = fmt.Errorf("key %s: %w", Echo(rec.Key), err)
		}
	}
	if s.err != nil {
		return false
	}
	s.last = append(s.last[:0], rec.Key...)
	return true
}

func (s *sortedInput) Err() error {
	if s.err != nil {
		return s.err
	}
	return s.ValueIterator.Err()
}

// SeekGE is refused: the store reads the stream once, in order.
func (s *sortedInput) SeekGE(Key) {
	s.err = fmt.Errorf("%w: a bulk commit's stream cannot be sought", ErrInvalidArgument)
}
