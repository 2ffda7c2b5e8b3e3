package graveler

import (
	"bytes"
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
)

// DiffUncommitted iterates a branch's staged changes against its head
// commit, in key order, each key at most once, with the reader's fence
// (see fencedDiffIterator): a staging token dropped by the cleaner
// mid-diff never silently shortens it. Each difference is as of some
// moment during the iteration: a diff that overlaps a commit may show
// changes that were just committed, and after the commit no longer shows
// those it had not reached. One that outlives Config.FenceRetries changes
// of the branch's tokens fails with ErrTooManyRetries.
func (g *Graveler) DiffUncommitted(ctx context.Context, repoID RepositoryID, branch BranchID) (DiffIterator, error) {
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return nil, err
	}
	b, err := g.refs.GetBranch(ctx, repo, branch)
	if err != nil {
		return nil, err
	}
	d := &fencedDiffIterator{g: g, ctx: ctx, repo: repo, id: branch, b: b}
	if err := d.open(); err != nil {
		return nil, err
	}
	return d, nil
}

// diffUncommittedChunk is how many differences an uncommitted diff reads
// ahead before it checks its fence and hands them out.
const diffUncommittedChunk = 256

// fencedDiffIterator is the reader's fence around a streaming diff of
// staged changes. It reads up to diffUncommittedChunk differences ahead,
// then re-reads the branch (amortized, never the cache): if every token it
// read from is still on the branch, none can have been dropped while it
// read (a token is dropped only after it left the branch), so the chunk,
// and the end of the diff when it got there, are whole, and it hands the
// chunk out. Otherwise it discards the chunk and reads it again from the
// branch as it is now, from just after the last difference handed out.
// Every difference handed out was checked this way; consecutive chunks
// may come from different states of the branch, as consecutive pages of a
// listing do. Memory is bounded by one chunk.
type fencedDiffIterator struct {
	g    *Graveler
	ctx  context.Context
	repo *RepositoryRecord
	id   BranchID
	b    *Branch

	inner *uncommittedDiffIterator
	from  Key // where a redo starts: just after the last difference handed out, or the SeekGE key
	buf   []*Diff
	pos   int
	ended bool // inner is exhausted and its end was fenced
	tries int
	val   *Diff
	err   error
}

// open starts inner on d.b, from d.from.
func (d *fencedDiffIterator) open() error {
	c, err := d.g.refs.GetCommit(d.ctx, d.repo, d.b.CommitID)
	if err != nil {
		return err
	}
	stagedIt, err := d.g.changesIterator(d.ctx, tokens(d.b), d.repo.StorageNamespace, c.MetaRangeID)
	if err != nil {
		return err
	}
	committedIt, err := d.g.committed.List(d.ctx, d.repo.StorageNamespace, c.MetaRangeID)
	if err != nil {
		stagedIt.Close()
		return err
	}
	d.inner = &uncommittedDiffIterator{staged: stagedIt, committed: committedIt}
	if d.from != nil {
		d.inner.SeekGE(d.from)
	}
	return nil
}

func (d *fencedDiffIterator) Next() bool {
	d.val = nil
	if d.err != nil {
		return false
	}
	if d.pos == len(d.buf) && (d.ended || !d.fill()) {
		return false
	}
	d.val = d.buf[d.pos]
	d.pos++
	d.from = append(bytes.Clone(d.val.Key), 0)
	return true
}

// fill reads the next chunk and checks the fence, reading again from the
// current branch until it holds; false at the end or on error.
func (d *fencedDiffIterator) fill() bool {
	for {
		d.buf, d.pos = d.buf[:0], 0
		for len(d.buf) < diffUncommittedChunk && d.inner.Next() {
			v := d.inner.Value()
			d.buf = append(d.buf, &Diff{Type: v.Type, Key: bytes.Clone(v.Key), Value: cloneValue(v.Value), LeftIdentity: bytes.Clone(v.LeftIdentity)})
		}
		if d.err = d.inner.Err(); d.err != nil {
			return false
		}
		cur, err := d.g.refs.GetBranch(d.ctx, d.repo, d.id)
		if err != nil {
			d.err = err
			return false
		}
		if tokensStillHeld(d.b, cur) {
			d.ended = len(d.buf) < diffUncommittedChunk
			return len(d.buf) > 0
		}
		diffRetries.Inc()
		if d.tries++; d.tries > d.g.cfg.FenceRetries {
			d.err = d.g.fenceExhausted(d.repo, d.id)
			return false
		}
		d.inner.Close()
		d.inner, d.b = nil, cur
		if d.err = d.open(); d.err != nil {
			return false
		}
	}
}

func (d *fencedDiffIterator) Value() *Diff { return d.val }

func (d *fencedDiffIterator) SeekGE(key Key) {
	d.from = bytes.Clone(key)
	d.buf, d.pos, d.ended, d.val = d.buf[:0], 0, false, nil
	if d.inner != nil {
		d.inner.SeekGE(key)
	}
}

func (d *fencedDiffIterator) Err() error { return d.err }

func (d *fencedDiffIterator) Close() {
	if d.inner != nil {
		d.inner.Close()
		d.inner = nil
	}
}

// Diff iterates the differences between the commits two refs resolve to
// (a branch contributes its head commit; DiffUncommitted shows staging).
func (g *Graveler) Diff(ctx context.Context, repoID RepositoryID, left, right Ref) (DiffIterator, error) {
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return nil, err
	}
	l, err := g.resolve(ctx, repo, left)
	if err != nil {
		return nil, err
	}
	r, err := g.resolve(ctx, repo, right)
	if err != nil {
		return nil, err
	}
	return g.committed.Diff(ctx, repo.StorageNamespace, l.MetaRangeID, r.MetaRangeID)
}

// cleanBranch reads a branch and fails with ErrDirtyBranch if it stages
// anything: merge, revert and cherry-pick write commits onto clean
// branches only, as in lakeFS.
func (g *Graveler) cleanBranch(ctx context.Context, repo *RepositoryRecord, branch BranchID) (*Branch, *Commit, error) {
	if err := ValidateBranchID(branch); err != nil {
		return nil, nil, err
	}
	b, err := g.refs.GetBranch(ctx, repo, branch)
	if err != nil {
		return nil, nil, err
	}
	dirty, err := g.isDirty(ctx, repo, b)
	if err != nil {
		return nil, nil, err
	}
	if dirty {
		return nil, nil, fmt.Errorf("%w: %s of repository %s", ErrDirtyBranch, branch, repo.RepositoryID)
	}
	c, err := g.refs.GetCommit(ctx, repo, b.CommitID)
	if err != nil {
		return nil, nil, err
	}
	return b, c, nil
}

// Merge merges source into a clean destination branch. The merge base is
// the best common ancestor by generation. ErrNothingToMerge when source is
// the destination's head or an ancestor of it.
//
// When the destination's head is an ancestor of source, the destination
// moves to source's commit and no commit is written (fastForward), unless
// params.NoFastForward. The move is a compare-and-swap that checks the
// head is still the one the merge read, as a merge commit's is: a commit
// that lands on the destination in between fails the merge with
// ErrBranchHeadMoved.
//
// Otherwise it writes a two-parent commit (destination head first);
// *MergeConflictError (wrapping ErrMergeConflict) names conflicting keys
// under MergeStrategyNone.
func (g *Graveler) Merge(ctx context.Context, repoID RepositoryID, destination BranchID, source Ref, params MergeParams) (id CommitID, fastForward bool, err error) {
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return "", false, err
	}
	b, destCommit, err := g.cleanBranch(ctx, repo, destination)
	if err != nil {
		return "", false, err
	}
	src, err := g.resolve(ctx, repo, source)
	if err != nil {
		return "", false, err
	}
	base, err := g.refs.FindMergeBase(ctx, repo, b.CommitID, src.CommitID)
	if amb, ok := errors.AsType[*AmbiguousMergeBaseError](err); ok {
		base, err = g.virtualBase(ctx, repo, amb)
	}
	if err != nil {
		return "", false, err
	}
	if base.CommitID == src.CommitID {
		return "", false, fmt.Errorf("%w: %s into %s", ErrNothingToMerge, source, destination)
	}
	if base.CommitID == b.CommitID && !params.NoFastForward {
		if err := g.moveHead(ctx, repo, destination, b.CommitID, src.CommitID, ChangeMerge); err != nil {
			return "", false, err
		}
		return src.CommitID, true, nil
	}
	id, err = g.mergeCommit(ctx, repo, destination, source, b, destCommit, src, base, params)
	return id, false, err
}

// virtualBase is the base of a merge whose histories cross (two best
// common ancestors with different trees): the merge of those two over
// their own base, as git's recursive merge makes it, a tree no commit
// names. Three or more such ancestors, ancestors that cross again, or
// ancestors whose merge conflicts: the ambiguity stands (amb).
func (g *Graveler) virtualBase(ctx context.Context, repo *RepositoryRecord, amb *AmbiguousMergeBaseError) (*CommitRecord, error) {
	if len(amb.Bases) != 2 {
		return nil, amb
	}
	var trees [2]MetaRangeID
	for i, id := range amb.Bases {
		c, err := g.refs.GetCommit(ctx, repo, id)
		if err != nil {
			return nil, err
		}
		trees[i] = c.MetaRangeID
	}
	inner, err := g.refs.FindMergeBase(ctx, repo, amb.Bases[0], amb.Bases[1])
	if err != nil {
		if errors.Is(err, ErrAmbiguousMergeBase) || errors.Is(err, ErrNoMergeBase) {
			return nil, amb
		}
		return nil, err
	}
	mr, _, err := g.committed.Merge(ctx, repo.StorageNamespace, trees[0], trees[1], inner.MetaRangeID, MergeStrategyNone)
	switch {
	case errors.Is(err, ErrNoChanges):
		mr = trees[0]
	case errors.Is(err, ErrMergeConflict):
		return nil, fmt.Errorf("%w: its best common ancestors conflict with each other: %w", amb, err)
	case err != nil:
		return nil, err
	}
	return &CommitRecord{Commit: &Commit{MetaRangeID: mr}}, nil
}

// mergeCommit writes the two-parent commit of a merge and moves the
// destination's head, read as b, to it.
func (g *Graveler) mergeCommit(ctx context.Context, repo *RepositoryRecord, destination BranchID, source Ref, b *Branch, destCommit *Commit, src *ResolvedRef, base *CommitRecord, params MergeParams) (CommitID, error) {
	if params.Message == "" {
		params.Message = fmt.Sprintf("Merge '%s' into '%s'", source, destination)
	}
	// Before the merged tree is written; a fast-forward, which writes no
	// record, is not refused for what it would have held.
	if err := ValidateCommitContent(params.Message, params.Committer, params.Metadata); err != nil {
		return "", err
	}
	mr, _, err := g.committed.Merge(ctx, repo.StorageNamespace, destCommit.MetaRangeID, src.MetaRangeID, base.MetaRangeID, params.Strategy)
	if errors.Is(err, ErrNoChanges) {
		// Source's changes are already in the destination's tree: still
		// record the merge, so history says source was merged.
		mr, err = destCommit.MetaRangeID, nil
	}
	if err != nil {
		return "", err
	}
	id, err := g.refs.AddCommit(ctx, repo, Commit{
		Version:      CurrentCommitVersion,
		Committer:    params.Committer,
		Message:      params.Message,
		MetaRangeID:  mr,
		CreationDate: g.cfg.Now(),
		Parents:      []CommitID{b.CommitID, src.CommitID},
		Metadata:     params.Metadata,
	})
	if err != nil {
		return "", err
	}
	if err := g.moveHead(ctx, repo, destination, b.CommitID, id, ChangeMerge); err != nil {
		return "", err
	}
	return id, nil
}

// pickParent returns the parent of c that revert and cherry-pick compare
// against: parentNumber is 1-based, and 0 is allowed only for a commit
// with a single parent.
func pickParent(c *CommitRecord, parentNumber int) (CommitID, error) {
	switch {
	case parentNumber < 0:
		return "", fmt.Errorf("%w: %d", ErrInvalidParentNumber, parentNumber)
	case len(c.Parents) == 0:
		return "", fmt.Errorf("%w: commit %s is a root commit with no parent to compare with", ErrInvalidArgument, c.CommitID)
	case parentNumber == 0 && len(c.Parents) > 1:
		return "", fmt.Errorf("%w: commit %s has %d parents", ErrRevertMergeNoParent, c.CommitID, len(c.Parents))
	case parentNumber > len(c.Parents):
		return "", fmt.Errorf("%w: commit %s has %d parents, not %d", ErrInvalidParentNumber, c.CommitID, len(c.Parents), parentNumber)
	}
	return c.Parents[max(parentNumber, 1)-1], nil
}

// applyCommitDelta applies to a clean branch the change from `from` to
// `to` (a three-way merge with `from` as base), as a one-parent commit
// whose head update says change did it. what names the operation for
// ErrNoChanges ("cherry-pick of commit <id>").
func (g *Graveler) applyCommitDelta(ctx context.Context, repo *RepositoryRecord, branch BranchID, from, to MetaRangeID, params CommitParams, change BranchChange, what string) (CommitID, error) {
	b, head, err := g.cleanBranch(ctx, repo, branch)
	if err != nil {
		return "", err
	}
	mr, _, err := g.committed.Merge(ctx, repo.StorageNamespace, head.MetaRangeID, to, from, MergeStrategyNone)
	if errors.Is(err, ErrNoChanges) {
		if params.AllowEmpty {
			mr, err = head.MetaRangeID, nil
		} else {
			// As Commit's and Merge's: the client sees which branch.
			err = fmt.Errorf("%s onto branch %s of repository %s: %w", what, branch, repo.RepositoryID, err)
		}
	}
	if err != nil {
		return "", err
	}
	return g.commitOnto(ctx, repo, branch, b.CommitID, mr, params, change)
}

// commitOnto records a commit of tree mr whose one parent is the branch's
// head (parent, as read), and moves the branch to it with the head's
// compare-and-swap: ErrBranchHeadMoved if the head moved meanwhile.
func (g *Graveler) commitOnto(ctx context.Context, repo *RepositoryRecord, branch BranchID, parent CommitID, mr MetaRangeID, params CommitParams, change BranchChange) (CommitID, error) {
	id, err := g.refs.AddCommit(ctx, repo, Commit{
		Version:      CurrentCommitVersion,
		Committer:    params.Committer,
		Message:      params.Message,
		MetaRangeID:  mr,
		CreationDate: g.cfg.Now(),
		Parents:      []CommitID{parent},
		Metadata:     params.Metadata,
	})
	if err != nil {
		return "", err
	}
	if err := g.moveHead(ctx, repo, branch, parent, id, change); err != nil {
		return "", err
	}
	return id, nil
}

// pick resolves ref to a commit and the parent parentNumber names.
func (g *Graveler) pick(ctx context.Context, repoID RepositoryID, ref Ref, parentNumber int) (*RepositoryRecord, *CommitRecord, *Commit, error) {
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return nil, nil, nil, err
	}
	res, err := g.resolve(ctx, repo, ref)
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := g.refs.GetCommit(ctx, repo, res.CommitID)
	if err != nil {
		return nil, nil, nil, err
	}
	rec := &CommitRecord{CommitID: res.CommitID, Commit: c}
	pid, err := pickParent(rec, parentNumber)
	if err != nil {
		return nil, nil, nil, err
	}
	parent, err := g.refs.GetCommit(ctx, repo, pid)
	if err != nil {
		return nil, nil, nil, err
	}
	return repo, rec, parent, nil
}

// Revert commits the inverse of ref's changes (against parent parentNumber,
// 1-based; 0 for a commit with one parent) onto a clean branch.
func (g *Graveler) Revert(ctx context.Context, repoID RepositoryID, branch BranchID, ref Ref, parentNumber int, params CommitParams) (CommitID, error) {
	repo, c, parent, err := g.pick(ctx, repoID, ref, parentNumber)
	if err != nil {
		return "", err
	}
	if params.Message == "" {
		params.Message = fmt.Sprintf("Revert %s", c.CommitID)
	}
	if err := ValidateCommitContent(params.Message, params.Committer, params.Metadata); err != nil {
		return "", err
	}
	return g.applyCommitDelta(ctx, repo, branch, c.MetaRangeID, parent.MetaRangeID, params, ChangeRevert, "revert of commit "+string(c.CommitID))
}

// CherryPick commits ref's changes (against parent parentNumber) onto a
// clean branch.
func (g *Graveler) CherryPick(ctx context.Context, repoID RepositoryID, branch BranchID, ref Ref, parentNumber int, params CommitParams) (CommitID, error) {
	repo, c, parent, err := g.pick(ctx, repoID, ref, parentNumber)
	if err != nil {
		return "", err
	}
	if params.Message == "" {
		params.Message = c.Message
	}
	// After taking the picked commit's message, which with the request's
	// metadata may be too large together.
	if err := ValidateCommitContent(params.Message, params.Committer, params.Metadata); err != nil {
		return "", err
	}
	return g.applyCommitDelta(ctx, repo, branch, parent.MetaRangeID, c.MetaRangeID, params, ChangeCherryPick, "cherry-pick of commit "+string(c.CommitID))
}

// dumpWindow bounds the commit records DumpRefs holds at once.
var dumpWindow = 10000

// DumpRefs streams every commit, branch and tag of a repository: commits
// first, parents before children (by generation, then id), so a restore
// can replay them in order. Commits are stored by id, not generation, so
// the dump sorts them in windows of at most dumpWindow records: each window
// is one scan of all commits that keeps the smallest dumpWindow after the
// last one sent. Memory stays bounded by the window whatever the size of
// history; a history of n commits costs ceil(n/dumpWindow) scans (one up
// to 10,000 commits). A commit added during the dump is sent if its
// place is after the window being sent.
func (g *Graveler) DumpRefs(ctx context.Context, repoID RepositoryID) iter.Seq2[*RefsRecord, error] {
	return func(yield func(*RefsRecord, error) bool) {
		repo, err := g.refs.GetRepository(ctx, repoID)
		if err != nil {
			yield(nil, err)
			return
		}
		var last *CommitRecord
		for {
			window, err := g.dumpCommits(ctx, repo, last, dumpWindow)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, c := range window {
				if !yield(&RefsRecord{Commit: c}, nil) {
					return
				}
			}
			if len(window) < dumpWindow {
				break
			}
			last = window[len(window)-1]
		}
		for b, err := range g.refs.ListBranches(ctx, repo, ListBranchesOptions{}) {
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(&RefsRecord{Branch: b}, nil) {
				return
			}
		}
		for t, err := range g.refs.ListTags(ctx, repo, ListOptions{}) {
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(&RefsRecord{Tag: t}, nil) {
				return
			}
		}
	}
}

func dumpOrder(a, b *CommitRecord) int {
	return cmp.Or(cmp.Compare(a.Generation, b.Generation), cmp.Compare(a.CommitID, b.CommitID))
}

// dumpHeap is a max-heap in dump order: its top is the window's last.
type dumpHeap []*CommitRecord

func (h dumpHeap) Len() int           { return len(h) }
func (h dumpHeap) Less(i, j int) bool { return dumpOrder(h[i], h[j]) > 0 }
func (h dumpHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dumpHeap) Push(x any)        { *h = append(*h, x.(*CommitRecord)) }
func (h *dumpHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// dumpCommits scans every commit and returns, in dump order, the first n
// that come after last (nil: from the first).
func (g *Graveler) dumpCommits(ctx context.Context, repo *RepositoryRecord, last *CommitRecord, n int) ([]*CommitRecord, error) {
	h := make(dumpHeap, 0, min(n, 1024))
	for c, err := range g.refs.ListCommits(ctx, repo, ListCommitsOptions{}) {
		if err != nil {
			return nil, err
		}
		switch {
		case last != nil && dumpOrder(c, last) <= 0:
		case len(h) < n:
			heap.Push(&h, c)
		case dumpOrder(c, h[0]) < 0:
			h[0] = c
			heap.Fix(&h, 0)
		}
	}
	slices.SortFunc(h, dumpOrder)
	return h, nil
}

// restoreRecentIDs bounds the ids of restored commits a restore remembers
// (twice this at most: about 100 bytes each).
var restoreRecentIDs = 1 << 15

// recentIDs remembers the ids added last, at least n and at most 2n of
// them, in two generations that take turns.
type recentIDs struct {
	n          int
	cur, older map[CommitID]struct{}
}

func newRecentIDs(n int) *recentIDs {
	return &recentIDs{n: n, cur: make(map[CommitID]struct{})}
}

func (r *recentIDs) add(id CommitID) {
	if len(r.cur) >= r.n {
		r.older, r.cur = r.cur, make(map[CommitID]struct{}, r.n)
	}
	r.cur[id] = struct{}{}
}

func (r *recentIDs) has(id CommitID) bool {
	if _, ok := r.cur[id]; ok {
		return true
	}
	_, ok := r.older[id]
	return ok
}

// restoredParents checks that every parent of c was restored or is in the
// repository. A dump lists commits by generation, so a parent is nearly
// always among the commits restored last, which restored remembers: a
// valid dump costs no read for it, and only a parent further back (a wide
// history) or missing is read from the store, through the commit cache.
func (g *Graveler) restoredParents(ctx context.Context, repo *RepositoryRecord, c *CommitRecord, restored *recentIDs) error {
	for _, p := range c.Parents {
		if restored.has(p) {
			continue
		}
		// GetCommit refuses a malformed id as such, not as not found.
		_, err := g.refs.GetCommit(ctx, repo, p)
		if errors.Is(err, ErrCommitNotFound) {
			return fmt.Errorf("%w: commit %s: its parent %s is neither earlier in the dump nor in the repository (a dump lists parents first: this one was cut short or altered)", ErrInvalidArgument, c.CommitID, p)
		}
		if err != nil {
			return fmt.Errorf("commit %s: parent: %w", c.CommitID, err)
		}
	}
	return nil
}

// RestoreRefs loads a dump into a bare repository (no branch, no commit).
// Commits keep their ids and creation dates, which are checked before a
// commit is stored; branches get fresh, empty staging tokens. A commit
// whose parent is neither earlier in the dump nor in the repository is
// refused (ErrInvalidArgument): DumpRefs writes parents first, so the dump
// was cut or altered, and history restored on it would end in a commit
// no client asked for. Every commit comes before the first branch or tag, as
// DumpRefs writes them (ErrInvalidArgument otherwise): the collector
// leaves a namespace alone only while its repository has no branch, and
// from the first branch on it keeps what the commits stored so far
// reference, so a commit restored after that may find its objects
// collected. A failed restore can be repeated into a new bare repository;
// records already stored are left for the cleaner with it.
func (g *Graveler) RestoreRefs(ctx context.Context, repoID RepositoryID, records iter.Seq2[*RefsRecord, error]) error {
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return err
	}
	for _, err := range g.refs.ListBranches(ctx, repo, ListBranchesOptions{}) {
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: %s has branches", ErrNotBareRepository, repoID)
	}
	for _, err := range g.refs.ListCommits(ctx, repo, ListCommitsOptions{}) {
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: %s has commits", ErrNotBareRepository, repoID)
	}
	n := 0
	refsStarted := false
	restored := newRecentIDs(restoreRecentIDs)
	for r, err := range records {
		if err != nil {
			return err
		}
		n++
		switch {
		case r == nil:
			return fmt.Errorf("%w: restore record %d is empty", ErrInvalidArgument, n)
		case r.Commit != nil && r.Commit.Commit != nil && refsStarted:
			return fmt.Errorf("%w: restore record %d: commit %s after a branch or tag (every commit comes first, as a dump writes them)", ErrInvalidArgument, n, r.Commit.CommitID)
		case r.Commit != nil && r.Commit.Commit != nil:
			if err := g.restoredParents(ctx, repo, r.Commit, restored); err != nil {
				return fmt.Errorf("restore record %d: %w", n, err)
			}
			if err := g.refs.RestoreCommit(ctx, repo, r.Commit.CommitID, *r.Commit.Commit); err != nil {
				return fmt.Errorf("restore record %d: %w", n, err)
			}
			restored.add(r.Commit.CommitID)
		case r.Branch != nil && r.Branch.Branch != nil:
			if _, err := g.refs.GetCommit(ctx, repo, r.Branch.CommitID); err != nil {
				return fmt.Errorf("restore record %d (branch %s): %w", n, r.Branch.BranchID, err)
			}
			refsStarted = true
			b := Branch{CommitID: r.Branch.CommitID, StagingToken: g.refs.NewStagingToken(repoID), Change: ChangeRestore}
			if err := g.refs.CreateBranch(ctx, repo, r.Branch.BranchID, b); err != nil {
				return fmt.Errorf("restore record %d: %w", n, err)
			}
		case r.Tag != nil:
			if _, err := g.refs.GetCommit(ctx, repo, r.Tag.CommitID); err != nil {
				return fmt.Errorf("restore record %d (tag %s): %w", n, r.Tag.TagID, err)
			}
			refsStarted = true
			if err := g.refs.RestoreTag(ctx, repo, r.Tag.TagID, r.Tag.CommitID); err != nil {
				return fmt.Errorf("restore record %d: %w", n, err)
			}
		default:
			return fmt.Errorf("%w: restore record %d has no commit, branch or tag", ErrInvalidArgument, n)
		}
	}
	return nil
}
