package graveler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
)

// ---- writer flow (seed 004) ----

// writeBranch runs seed 004's writer flow around write: read the branch
// (the short cache will do), write to its staging token, re-read the
// branch (amortized, never the cache), and write again if the token
// changed meanwhile. A commit seals a token before reading it, so a write
// that completed before the re-read saw the token still current is seen
// by any commit that seals it; a write that raced a seal is repeated into
// the new token, where the same identity makes it idempotent.
//
// fenced, when not nil, is a write that reads the branch itself, after
// the write took effect and in the same round trip (stageFenced); it
// replaces write followed by recheck.
func (g *Graveler) writeBranch(ctx context.Context, repo *RepositoryRecord, id BranchID, write func(StagingToken) error, fenced func(StagingToken) (*RepositoryRecord, *Branch, error)) (err error) {
	// The writers' latency is what paces commits (pace.go).
	start := g.pace.writeStarted()
	defer func() { g.pace.writeDone(start, err) }()
	b, ok := g.cache.get(repo, id)
	if !ok {
		var err error
		if b, err = g.refs.GetBranch(ctx, repo, id); err != nil {
			return err
		}
		g.cache.put(repo, id, b)
	}
	for attempt := 0; ; attempt++ {
		var cur *Branch
		var err error
		// sealed: the token was retired before the write could apply, so
		// nothing was written and the write must go to the new token.
		var sealed bool
		if fenced != nil {
			var r *RepositoryRecord
			r, cur, err = fenced(b.StagingToken)
			if sealed = errors.Is(err, ErrStagingTokenSealed) && cur != nil; sealed {
				err = nil
			}
			if err == nil {
				g.repos.put(r)
			} else {
				g.repos.forget(repo.RepositoryID)
			}
		} else {
			if err := write(b.StagingToken); err != nil {
				if !errors.Is(err, ErrStagingTokenSealed) {
					return err
				}
				sealed = true
			}
			cur, err = g.recheck(ctx, repo, id)
			if err == nil && !sealed && cur.StagingToken != b.StagingToken {
				// The write applied, then the token was retired: unlike
				// the fenced write, whose fence is read with it, this
				// one cannot tell from cur alone whether it came first.
				var again bool
				if again, err = g.writeAgain(ctx, repo, id, b.StagingToken, cur); err == nil && !again {
					g.cache.put(repo, id, cur)
					return nil
				}
			}
		}
		if err != nil {
			g.cache.forget(repo, id)
			return err
		}
		g.cache.put(repo, id, cur)
		if cur.StagingToken == b.StagingToken {
			if sealed {
				return retiredButNamed(repo, id, b.StagingToken)
			}
			return nil
		}
		writeRetries.Inc()
		if attempt >= g.cfg.FenceRetries {
			return fmt.Errorf("write to branch %s of repository %s: staging token kept changing: %w", id, repo.RepositoryID, ErrTooManyRetries)
		}
		b = cur
	}
}

// writeAgain decides what became of a write that applied to token st
// when the branch, cur as re-read after it, no longer names st as its
// staging token, and reports whether it must be written again into cur's
// token:
//
//   - st carries its seal marker: the marker was written with the branch
//     update that retired st, after the write applied (staged writes
//     apply only while it is missing), so the commit that sealed st reads
//     the write, or the reset that replaced st discards it, as it would a
//     write acknowledged just before. It is done; writing it again would
//     apply it a second time, after writes acknowledged since, and undo
//     them.
//   - no marker, and st is among cur's sealed tokens: a release that
//     writes no marker sealed it (during an upgrade), and the write may
//     have landed after that commit read st. It goes again, as in that
//     release.
//   - no marker, and st has left the branch: st was retired and dropped
//     since. The write applied before its retirement, or into the dropped
//     partition, and nothing left in the store tells which: ErrAmbiguous
//     (the caller may retry; nothing is written again here).
func (g *Graveler) writeAgain(ctx context.Context, repo *RepositoryRecord, id BranchID, st StagingToken, cur *Branch) (bool, error) {
	sealed, err := g.staging.Sealed(ctx, st)
	if err != nil || sealed {
		return false, err
	}
	if slices.Contains(cur.SealedTokens, st) {
		// cur was read before the marker: st may have left the branch
		// and been dropped since. A branch read after the marker that
		// still holds st proves st was not dropped when its marker was
		// found missing (a token is dropped only once no branch holds
		// it), so it never had one.
		if cur, err = g.refs.GetBranch(ctx, repo, id); err != nil {
			return false, err
		}
		if slices.Contains(cur.SealedTokens, st) {
			return true, nil
		}
	}
	writesUnknown.Inc()
	return false, fmt.Errorf("write to branch %s of repository %s: its staging token %s was retired and dropped while the write was in flight, and whether the write came first cannot be told: %w",
		id, repo.RepositoryID, st, ErrAmbiguous)
}

// retiredButNamed is the answer to a write refused by its token's seal
// marker while the branch still names the token. The marker is written in
// the same step as the branch update that stops naming it, so this means
// the two are kept in different stores, or a branch was restored with a
// retired token; the write is not applied, and saying so is all a writer
// can do.
func retiredButNamed(repo *RepositoryRecord, id BranchID, st StagingToken) error {
	return fmt.Errorf("write to branch %s of repository %s: its staging token %s is sealed but the branch still names it: %w",
		id, repo.RepositoryID, st, ErrStagingTokenSealed)
}

// stageFenced returns writeBranch's fenced write of one entry (nil value:
// a tombstone), or nil when the stores cannot read the fence with it. A
// write refused because its token is retired returns the fence read with
// it and ErrStagingTokenSealed.
func (g *Graveler) stageFenced(ctx context.Context, repo *RepositoryRecord, id BranchID, key Key, value *Value) func(StagingToken) (*RepositoryRecord, *Branch, error) {
	if g.fstager == nil {
		return nil
	}
	return func(st StagingToken) (*RepositoryRecord, *Branch, error) {
		reads, err := g.fencer.BranchFenceReads(repo, id)
		if err != nil {
			return nil, nil, err
		}
		got, err := g.fstager.SetAndRead(ctx, st, key, value, reads)
		sealed := errors.Is(err, ErrStagingTokenSealed) && len(got) == len(reads)
		if err != nil && !sealed {
			return nil, nil, err
		}
		r, cur, perr := g.fencer.ParseBranchFence(repo, id, got)
		if perr != nil {
			return nil, nil, perr
		}
		return r, cur, err
	}
}

// recheck is the writer's fence: it re-reads the branch (amortized, never
// the cache) and, concurrently so it costs no extra round trip, the
// repository. The writer took the repository from a short cache, so this
// is where a write into a repository deleted (or re-created) meanwhile is
// refused instead of acknowledged.
func (g *Graveler) recheck(ctx context.Context, repo *RepositoryRecord, id BranchID) (*Branch, error) {
	repoErr := make(chan error, 1)
	go func() {
		cur, err := g.refs.GetRepository(ctx, repo.RepositoryID)
		if err == nil && cur.UniqueID != repo.UniqueID {
			err = fmt.Errorf("%w: %s was deleted and created again", ErrRepositoryNotFound, repo.RepositoryID)
		}
		if err == nil {
			g.repos.put(cur)
		} else {
			g.repos.forget(repo.RepositoryID)
		}
		repoErr <- err
	}()
	cur, err := g.refs.GetBranch(ctx, repo, id)
	if rerr := <-repoErr; rerr != nil {
		return nil, rerr
	}
	return cur, err
}

// withRepository runs op on the repository: from the short repository
// cache when it can, since op's fence re-reads the repository record. If
// the cached record turns out stale (op finds the repository gone, or
// deleted and created again), op runs once more on a fresh read, so a
// repository created again is not reported missing for the cache's TTL.
func (g *Graveler) withRepository(ctx context.Context, id RepositoryID, op func(*RepositoryRecord) error) error {
	r, cached := g.repos.get(id)
	if !cached {
		var err error
		if r, err = g.refs.GetRepository(ctx, id); err != nil {
			return err
		}
		g.repos.put(r)
	}
	err := op(r)
	if !cached || !errors.Is(err, ErrRepositoryNotFound) {
		return err
	}
	g.repos.forget(id)
	if r, err = g.refs.GetRepository(ctx, id); err != nil {
		return err
	}
	g.repos.put(r)
	return op(r)
}

// Set stages an entry on a branch.
func (g *Graveler) Set(ctx context.Context, repoID RepositoryID, branch BranchID, key Key, value Value, opts SetOptions) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := ValidateValue(&value); err != nil {
		return err
	}
	if err := ValidateBranchID(branch); err != nil {
		return err
	}
	if opts.IfAbsent {
		// Best effort, as in lakeFS: a concurrent writer of the same key
		// may still win between this read and the write below.
		_, err := g.Get(ctx, repoID, Ref(branch), key)
		switch {
		case err == nil:
			return fmt.Errorf("%w: %s on branch %s of repository %s", ErrEntryExists, Echo(key), branch, repoID)
		case !errors.Is(err, ErrEntryNotFound):
			return err
		}
	}
	return g.withRepository(ctx, repoID, func(repo *RepositoryRecord) error {
		return g.writeBranch(ctx, repo, branch, func(st StagingToken) error {
			return g.staging.Set(ctx, st, key, &value)
		}, g.stageFenced(ctx, repo, branch, key, &value))
	})
}

// SetBatch stages many entries on a branch (nil Value: delete). It is not
// atomic: on error some records may be staged; repeating it is safe.
// EntryError is the refusal of one entry of a batch (SetBatch), naming
// its place, so that a client finds it among many. It wraps the reason.
type EntryError struct {
	Index int
	Key   Key
	Err   error
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("entry %d (key %s): %v", e.Index, Echo(e.Key), e.Err)
}

func (e *EntryError) Unwrap() error { return e.Err }

func (g *Graveler) SetBatch(ctx context.Context, repoID RepositoryID, branch BranchID, records []*ValueRecord) error {
	for i, r := range records {
		if r == nil {
			return &EntryError{Index: i, Err: fmt.Errorf("%w: missing record", ErrInvalidArgument)}
		}
		if err := ValidateKey(r.Key); err != nil {
			return &EntryError{Index: i, Key: r.Key, Err: err}
		}
		if r.Value != nil {
			if err := ValidateValue(r.Value); err != nil {
				return &EntryError{Index: i, Key: r.Key, Err: err}
			}
		}
	}
	if err := ValidateBranchID(branch); err != nil {
		return err
	}
	return g.withRepository(ctx, repoID, func(repo *RepositoryRecord) error {
		if len(records) == 0 {
			return nil
		}
		// pending is what no token took yet: after a refusal part way,
		// only the records the retired token did not take go on.
		pending := records
		return g.writeBranch(ctx, repo, branch, func(st StagingToken) error {
			err := g.staging.SetBatch(ctx, st, pending)
			if pe, ok := errors.AsType[*PartlyStagedError](err); ok {
				pending = pe.Unapplied
			}
			return err
		}, nil)
	})
}

// Delete stages a tombstone for key; ErrEntryNotFound if it is not visible.
func (g *Graveler) Delete(ctx context.Context, repoID RepositoryID, branch BranchID, key Key) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if _, err := g.Get(ctx, repoID, Ref(branch), key); err != nil {
		return err
	}
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return err
	}
	return g.writeBranch(ctx, repo, branch, func(st StagingToken) error {
		return g.staging.Set(ctx, st, key, nil)
	}, g.stageFenced(ctx, repo, branch, key, nil))
}

// DeletePrefix stages the deletion of every key under prefix ("": every
// key) as one range tombstone in the branch's staging token (RangeStager),
// through the writer's flow: if a commit seals the token meanwhile, the
// tombstone is written again into the new one. Keys written after it
// survive it. ErrTooManyRangeTombstones once the token holds its limit.
func (g *Graveler) DeletePrefix(ctx context.Context, repoID RepositoryID, branch BranchID, prefix Key) error {
	if err := ValidatePrefix("prefix", prefix); err != nil {
		return err
	}
	if err := ValidateBranchID(branch); err != nil {
		return err
	}
	if g.ranger == nil {
		return fmt.Errorf("delete prefix: the staging store has no range tombstones: %w", ErrFailedPrecondition)
	}
	return g.withRepository(ctx, repoID, func(repo *RepositoryRecord) error {
		return g.writeBranch(ctx, repo, branch, func(st StagingToken) error {
			return g.ranger.DeletePrefix(ctx, st, prefix)
		}, nil)
	})
}

// ---- reader flow (seed 004) ----

// resolveForRead resolves ref; a plain branch name is served from the
// writer's branch cache when it can be (cached reports it). The reader's
// fence then demands that the branch re-read from the store is exactly the
// cached one: a cached branch may predate a token that already holds
// acknowledged writes (another replica's commit sealed the cached token
// and its writers moved on), which only a fresh read names.
func (g *Graveler) resolveForRead(ctx context.Context, repo *RepositoryRecord, ref Ref) (res *ResolvedRef, cached bool, err error) {
	raw, err := g.refs.ParseRef(ref)
	if err != nil {
		return nil, false, err
	}
	if len(raw.Modifiers) == 0 && ValidateBranchID(BranchID(raw.BaseRef)) == nil {
		id := BranchID(raw.BaseRef)
		if b, ok := g.cache.get(repo, id); ok {
			if c, err := g.refs.GetCommit(ctx, repo, b.CommitID); err == nil {
				return &ResolvedRef{Type: RefTypeBranch, BranchRecord: BranchRecord{BranchID: id, Branch: b},
					CommitID: b.CommitID, MetaRangeID: c.MetaRangeID}, true, nil
			}
		}
	}
	res, err = g.refs.ResolveRawRef(ctx, repo, raw)
	if err != nil {
		return nil, false, err
	}
	if staged(res) {
		g.cache.put(repo, res.BranchRecord.BranchID, res.BranchRecord.Branch)
	}
	return res, false, nil
}

// staged reports whether a resolved ref reads a branch's staged entries.
func staged(res *ResolvedRef) bool {
	return res.Type == RefTypeBranch && res.ResolvedBranchModifier == ResolvedBranchModifierNone && res.BranchRecord.Branch != nil
}

// readFenced runs read over a branch's tokens and head, then re-reads the
// branch (amortized, never the cache). If a token read from has left the
// branch meanwhile, it may have been dropped mid-read; if the branch read
// came from the cache and the store's differs, the read may have missed a
// newer token (resolveForRead). Either way it reads again from the branch
// as it is now, which is fresh: a token created after that read began
// holds only writes that were not acknowledged before the read began.
func (g *Graveler) readFenced(ctx context.Context, repo *RepositoryRecord, res *ResolvedRef, cached bool, read func(b *Branch, mr MetaRangeID) error) error {
	b, mr := res.BranchRecord.Branch, res.MetaRangeID
	id := res.BranchRecord.BranchID
	for attempt := 0; ; attempt++ {
		if err := read(b, mr); err != nil {
			return err
		}
		cur, err := g.refs.GetBranch(ctx, repo, id)
		if err != nil {
			return err
		}
		g.cache.put(repo, id, cur)
		if tokensStillHeld(b, cur) && (!cached || sameBranch(b, cur)) {
			return nil
		}
		readRetries.Inc()
		if attempt >= g.cfg.FenceRetries {
			return g.fenceExhausted(repo, id)
		}
		c, err := g.refs.GetCommit(ctx, repo, cur.CommitID)
		if err != nil {
			return err
		}
		b, mr, cached = cur, c.MetaRangeID, false
	}
}

// sameBranch reports whether two reads of a branch found the same head
// and tokens (tokens are never reused).
func sameBranch(a, b *Branch) bool {
	return a.CommitID == b.CommitID && a.StagingToken == b.StagingToken && slices.Equal(a.SealedTokens, b.SealedTokens)
}

// Get reads an entry at ref (a branch ref sees its staged entries).
func (g *Graveler) Get(ctx context.Context, repoID RepositoryID, ref Ref, key Key) (*Value, error) {
	v, err := g.get(ctx, repoID, ref, key)
	if err != nil && errors.Is(err, ErrEntryNotFound) {
		// The lookups below know the repository and the key, not the ref
		// the caller named: an answer should say where the key is missing.
		err = fmt.Errorf("%w (at %s)", err, ref)
	}
	return v, err
}

func (g *Graveler) get(ctx context.Context, repoID RepositoryID, ref Ref, key Key) (*Value, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if g.freader != nil {
		return g.getAtOnce(ctx, repoID, ref, key)
	}
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return nil, err
	}
	res, cached, err := g.resolveForRead(ctx, repo, ref)
	if err != nil {
		return nil, err
	}
	if !staged(res) {
		return g.getCommitted(ctx, repo, res.MetaRangeID, key)
	}
	var out *Value
	var getErr error
	err = g.readFenced(ctx, repo, res, cached, func(b *Branch, mr MetaRangeID) error {
		out, getErr = g.getStaged(ctx, repo, b, mr, key)
		if errors.Is(getErr, ErrEntryNotFound) {
			// "Not found" is an answer, and needs the fence as much as a
			// value does: the token read may have been dropped mid-read.
			return nil
		}
		return getErr
	})
	if err != nil {
		return nil, err
	}
	return out, getErr
}

// getAtOnce is Get on a branch in one round trip: the repository and
// branch records and the key in each of the branch's tokens, all read at
// one instant (FencedReader). If the branch read is the one the tokens came
// from, everything read is consistent, which is the fence; otherwise it
// reads again with the branch just read.
func (g *Graveler) getAtOnce(ctx context.Context, repoID RepositoryID, ref Ref, key Key) (*Value, error) {
	var v *Value
	err := g.withRepository(ctx, repoID, func(repo *RepositoryRecord) error {
		var err error
		v, err = g.getAtOnceIn(ctx, repo, ref, key)
		return err
	})
	return v, err
}

func (g *Graveler) getAtOnceIn(ctx context.Context, repo *RepositoryRecord, ref Ref, key Key) (*Value, error) {
	// A ref that is not a branch the cache knows (a commit, a tag, "~N")
	// reads committed data only, after the repository read every other
	// operation starts with. That read is started now, beside resolving
	// the ref, so it costs no round trip of its own: commit records come
	// from the commit cache, and a tag or branch record, which can change,
	// is read while the repository is.
	check := g.repoCheck(ctx, repo, ref)
	defer check.cancel()
	res, _, err := g.resolveForRead(ctx, repo, ref)
	if err != nil {
		return nil, err
	}
	if !staged(res) {
		if repo, err = check.wait(ctx, g, repo); err != nil {
			return nil, err
		}
		return g.getCommitted(ctx, repo, res.MetaRangeID, key)
	}
	id, b := res.BranchRecord.BranchID, res.BranchRecord.Branch
	if g.reads != nil {
		a := g.groupedGet(ctx, repo, id, b, key)
		if a.final {
			return a.v, a.err
		}
		c, err := g.refs.GetCommit(ctx, repo, a.cur.CommitID)
		if err != nil {
			return nil, err
		}
		return g.getCommitted(ctx, a.repo, c.MetaRangeID, key)
	}
	for attempt := 0; ; attempt++ {
		reads, err := g.fencer.BranchFenceReads(repo, id)
		if err != nil {
			return nil, err
		}
		toks := tokens(b)
		for _, st := range toks {
			r, err := g.freader.EntryRef(st, key)
			if err != nil {
				return nil, err
			}
			reads = append(reads, r)
		}
		got, err := g.freader.ReadAt(ctx, reads)
		if err != nil {
			return nil, err
		}
		r, cur, err := g.fencer.ParseBranchFence(repo, id, got[:2])
		if err != nil {
			g.repos.forget(repo.RepositoryID)
			g.cache.forget(repo, id)
			return nil, err
		}
		g.repos.put(r)
		g.cache.put(repo, id, cur)
		if !sameBranch(b, cur) {
			readRetries.Inc()
			if attempt >= g.cfg.FenceRetries {
				return nil, g.fenceExhausted(repo, id)
			}
			b = cur
			continue
		}
		v, found, err := firstStaged(repo, key, toks, func(i int, st StagingToken) (*Value, error) {
			return g.freader.ParseEntry(st, key, got[2+i])
		})
		if found || err != nil {
			return v, err
		}
		c, err := g.refs.GetCommit(ctx, repo, cur.CommitID)
		if err != nil {
			return nil, err
		}
		return g.getCommitted(ctx, r, c.MetaRangeID, key)
	}
}

func (g *Graveler) getCommitted(ctx context.Context, repo *RepositoryRecord, mr MetaRangeID, key Key) (*Value, error) {
	v, err := g.committed.Get(ctx, repo.StorageNamespace, mr, key)
	// Only a key the tree does not hold is an absent entry. A tree or a
	// range missing from the blob store (METARANGE_NOT_FOUND, a blob not
	// found) is lost data: answered as "no such entry" it would let a
	// put --if-absent overwrite the key and refuse its delete.
	if errors.Is(err, ErrEntryNotFound) {
		return nil, fmt.Errorf("%w: %s in repository %s", ErrEntryNotFound, Echo(key), repo.RepositoryID)
	}
	return v, err
}

// getStaged looks key up in the staging token, the sealed tokens newest
// first, then the head commit: the first that knows the key decides.
func (g *Graveler) getStaged(ctx context.Context, repo *RepositoryRecord, b *Branch, mr MetaRangeID, key Key) (*Value, error) {
	v, found, err := firstStaged(repo, key, tokens(b), func(_ int, st StagingToken) (*Value, error) {
		return g.staging.Get(ctx, st, key)
	})
	if found || err != nil {
		return v, err
	}
	return g.getCommitted(ctx, repo, mr, key)
}

// firstStaged looks key up in toks, newest first, through lookup (which
// answers as StagingManager.Get does): the first token that knows the key
// decides, a tombstone as ErrEntryNotFound. found is false when none does.
func firstStaged(repo *RepositoryRecord, key Key, toks []StagingToken, lookup func(i int, st StagingToken) (*Value, error)) (v *Value, found bool, err error) {
	for i, st := range toks {
		v, err := lookup(i, st)
		switch {
		case err == nil && v == nil:
			return nil, true, fmt.Errorf("%w: %s in repository %s (deleted)", ErrEntryNotFound, Echo(key), repo.RepositoryID)
		case err == nil:
			return v, true, nil
		case !errors.Is(err, ErrNotFound):
			return nil, true, err
		}
	}
	return nil, false, nil
}

// tokenIterators opens one iterator per staging token, newest first, and
// returns with them the prefixes of each token's range tombstones (when
// the StagingManager has them); on error it closes what it opened.
func (g *Graveler) tokenIterators(ctx context.Context, toks []StagingToken) ([]ValueIterator, [][]Key, error) {
	its := make([]ValueIterator, 0, len(toks))
	ranges := make([][]Key, 0, len(toks))
	for _, st := range toks {
		var it ValueIterator
		var rs []Key
		var err error
		if g.ranger != nil {
			it, rs, err = g.ranger.ListRanged(ctx, st)
		} else {
			it, err = g.staging.List(ctx, st)
		}
		if err != nil {
			for _, it := range its {
				it.Close()
			}
			return nil, nil, err
		}
		its = append(its, it)
		ranges = append(ranges, rs)
	}
	return its, ranges, nil
}

// filterByNewer hides in each token's iterator what a newer token's range
// tombstones delete, and returns every token's prefixes together.
func filterByNewer(its []ValueIterator, ranges [][]Key) []Key {
	var newer []Key
	for i := range its {
		its[i] = newRangeFilter(its[i], newer)
		newer = append(newer, ranges[i]...)
	}
	return newer
}

// branchIterator is the branch as a reader sees it: its tokens over its
// head commit, tombstones hiding what they delete. With budget, every
// source counts the records it reads there.
func (g *Graveler) branchIterator(ctx context.Context, repo *RepositoryRecord, b *Branch, mr MetaRangeID, budget *readBudget) (*combinedIterator, error) {
	its, ranges, err := g.tokenIterators(ctx, tokens(b))
	if err != nil {
		return nil, err
	}
	cit, err := g.committed.List(ctx, repo.StorageNamespace, mr)
	if err != nil {
		for _, it := range its {
			it.Close()
		}
		return nil, err
	}
	if budget != nil {
		for i := range its {
			// A page that may stop at its budget must not have the
			// store stream the rest of a token past it.
			if bp, ok := its[i].(interface{ BoundPages() }); ok && budget.limit > 0 {
				bp.BoundPages()
			}
			its[i] = budget.count(its[i])
		}
		cit = budget.count(cit)
	}
	all := filterByNewer(its, ranges)
	its = append(its, newRangeFilter(cit, all))
	return newCombinedIterator(true, its...), nil
}

// changesIterator is what toks stage, newest first winning, tombstones
// included: the changes a commit applies over the tree base (in ns), and
// what DiffUncommitted compares with it. A range tombstone contributes a
// tombstone for each key under its prefix in base.
func (g *Graveler) changesIterator(ctx context.Context, toks []StagingToken, ns StorageNamespace, base MetaRangeID) (*combinedIterator, error) {
	its, ranges, err := g.tokenIterators(ctx, toks)
	if err != nil {
		return nil, err
	}
	if all := filterByNewer(its, ranges); len(all) > 0 {
		cit, err := g.committed.List(ctx, ns, base)
		if err != nil {
			for _, it := range its {
				it.Close()
			}
			return nil, err
		}
		its = append(its, &rangeDeletes{it: cit, prefixes: minimalPrefixes(all)})
	}
	return newCombinedIterator(false, its...), nil
}

// ListEntries returns a full page of the entries visible at ref (Limit
// rows unless the listing ends), and whether more follow. It reads as many
// bounded pages (ListEntriesPage) as it takes, so its work grows with the
// tombstones it passes; API pages use ListEntriesPage.
func (g *Graveler) ListEntries(ctx context.Context, repoID RepositoryID, ref Ref, opts ListEntriesOptions) ([]*EntryListing, bool, error) {
	var rows []*EntryListing
	for {
		page, err := g.ListEntriesPage(ctx, repoID, ref, opts)
		if err != nil {
			return nil, false, err
		}
		rows = append(rows, page.Rows...)
		if !page.More || len(rows) >= opts.Limit {
			return rows, page.More, nil
		}
		opts.Limit -= len(page.Rows)
		if page.ResumeAfter != nil {
			opts.After, opts.Resume = page.ResumeAfter, true
		} else {
			opts.After, opts.Resume = page.Rows[len(page.Rows)-1].Key, false
		}
	}
}

// ListEntriesPage returns one page of the entries visible at ref. A page
// costs about one page of work in every source: each is sought to the
// page's start, a common prefix is skipped by seeking past it, and a range
// tombstone by seeking past its prefix. It reads at most
// Config.ListPageBudget stored records (and the page's rows): where
// tombstones use that up, the page ends short, possibly empty, with More
// and ResumeAfter set (AIP-158), so no page reads a long run of deleted
// keys whole.
func (g *Graveler) ListEntriesPage(ctx context.Context, repoID RepositoryID, ref Ref, opts ListEntriesOptions) (*EntriesPage, error) {
	if opts.Limit <= 0 {
		return nil, fmt.Errorf("%w: list limit %d must be positive", ErrInvalidArgument, opts.Limit)
	}
	if err := ValidatePrefix("prefix", opts.Prefix); err != nil {
		return nil, err
	}
	if err := ValidatePrefix("delimiter", opts.Delimiter); err != nil {
		return nil, err
	}
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return nil, err
	}
	res, cached, err := g.resolveForRead(ctx, repo, ref)
	if err != nil {
		return nil, err
	}
	if !staged(res) {
		it, err := g.committed.List(ctx, repo.StorageNamespace, res.MetaRangeID)
		if err != nil {
			return nil, err
		}
		defer it.Close()
		counted := &countingIterator{ValueIterator: it}
		page, err := listPage(counted, nil, opts)
		if page != nil {
			page.RecordsRead = counted.RecordsRead()
		}
		return page, err
	}
	var page *EntriesPage
	err = g.readFenced(ctx, repo, res, cached, func(b *Branch, mr MetaRangeID) error {
		budget := &readBudget{limit: g.cfg.ListPageBudget}
		it, err := g.branchIterator(ctx, repo, b, mr, budget)
		if err != nil {
			return err
		}
		defer it.Close()
		it.stop = budget.exhausted
		page, err = listPage(it, budget, opts)
		if page != nil {
			page.RecordsRead = budget.read()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return page, nil
}

// listStart is where a page starts: strictly after opts.After (past every
// key under it when it is a common prefix), and never before the prefix.
// ok is false when nothing can follow.
func listStart(opts ListEntriesOptions) (start Key, ok bool) {
	start = opts.Prefix
	if len(opts.After) == 0 {
		return start, true
	}
	var s Key
	rest, under := bytes.CutPrefix(opts.After, opts.Prefix)
	if i := bytes.Index(rest, opts.Delimiter); !opts.Resume && under && len(opts.Delimiter) > 0 && i >= 0 {
		cp := opts.After[:len(opts.Prefix)+i+len(opts.Delimiter)]
		if s = keySuccessor(cp); s == nil {
			return nil, false
		}
	} else {
		s = append(bytes.Clone(opts.After), 0)
	}
	if bytes.Compare(s, start) > 0 {
		start = s
	}
	return start, true
}

func cloneValue(v *Value) *Value {
	if v == nil {
		return nil
	}
	return &Value{Identity: bytes.Clone(v.Identity), Data: bytes.Clone(v.Data)}
}

// listPage reads one page from it (tombstones already hidden). With
// budget, it is the combined iterator stopping at budget.exhausted: the
// page then ends once the budget is spent, after a row or at a tombstone.
func listPage(it ValueIterator, budget *readBudget, opts ListEntriesOptions) (*EntriesPage, error) {
	start, ok := listStart(opts)
	if !ok {
		return &EntriesPage{}, nil
	}
	it.SeekGE(start)
	page := &EntriesPage{}
	done := false
	// next returns the next row, or nil at the end of the prefix or where
	// the budget stopped it.
	next := func() *EntryListing {
		for !done && it.Next() {
			rec := it.Value()
			if !bytes.HasPrefix(rec.Key, opts.Prefix) {
				return nil
			}
			if len(opts.Delimiter) > 0 {
				if i := bytes.Index(rec.Key[len(opts.Prefix):], opts.Delimiter); i >= 0 {
					cp := bytes.Clone(rec.Key[:len(opts.Prefix)+i+len(opts.Delimiter)])
					if succ := keySuccessor(cp); succ != nil {
						it.SeekGE(succ)
					} else {
						done = true // no key sorts after every key under cp
					}
					return &EntryListing{Key: cp, CommonPrefix: true}
				}
			}
			return &EntryListing{Key: bytes.Clone(rec.Key), Value: cloneValue(rec.Value)}
		}
		return nil
	}
	// stopped reports where the budget ended the iteration inside the
	// prefix, if it did.
	stopped := func() Key {
		if c, ok := it.(*combinedIterator); ok && c.stoppedAt != nil && bytes.HasPrefix(c.stoppedAt, opts.Prefix) {
			return c.stoppedAt
		}
		return nil
	}
	size := 0
	for len(page.Rows) < opts.Limit {
		row := next()
		if row == nil {
			if at := stopped(); at != nil {
				page.More, page.ResumeAfter = true, at
			}
			return page, it.Err()
		}
		page.Rows = append(page.Rows, row)
		size += len(row.Key)
		if row.Value != nil {
			size += len(row.Value.Identity) + len(row.Value.Data)
		}
		if budget.exhausted() || opts.MaxBytes > 0 && size >= opts.MaxBytes {
			page.More = true
			return page, it.Err()
		}
	}
	page.More = next() != nil || stopped() != nil
	return page, it.Err()
}
