package graveler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// errHeadMoved ends a BranchUpdate whose expectations no longer hold; the
// caller decides what that means (rebase a commit, or fail a merge).
var errHeadMoved = errors.New("branch head or sealed tokens moved")

// overlap returns the longest prefix of toks (newest first) that is a
// suffix of sealed: the part of a commit's tokens no concurrent commit has
// consumed. Commits seal newest-first, so an earlier commit that finished
// first took toks' oldest tokens (its own list is a suffix of toks), and a
// later one that finished first took all of them.
func overlap(toks, sealed []StagingToken) []StagingToken {
	for k := min(len(toks), len(sealed)); k > 0; k-- {
		if slices.Equal(sealed[len(sealed)-k:], toks[:k]) {
			return toks[:k]
		}
	}
	return nil
}

// Commit commits a branch's staged entries with seed 004's lock-free flow:
//
//  1. SetIf the branch to push its staging token onto sealed_tokens and
//     take a fresh one: writers move to the new token at once;
//  2. apply the sealed tokens (newest wins) over the head commit's tree;
//  3. store the commit record (content addressed, so a retry is free);
//  4. SetIf the branch to the new head, removing the tokens it consumed.
//
// If step 4 finds that another commit moved the head first, the overlap
// rule decides: the tokens still sealed on the branch (a prefix of ours)
// are applied again over the new head and the commit retried on top of it,
// so every successful commit stays in the branch's first-parent history
// and nobody's acknowledged writes are reported as "no changes". A commit
// that fails after step 1 leaves its tokens sealed; readers still see
// them, and the next commit absorbs them. No lock or lease is taken.
func (g *Graveler) Commit(ctx context.Context, repoID RepositoryID, branch BranchID, params CommitParams) (CommitID, error) {
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return "", err
	}
	if err := ValidateBranchID(branch); err != nil {
		return "", err
	}
	// Before sealing: a record too large for the store would fail only
	// after the commit had done its work and left its tokens sealed.
	if err := ValidateCommitContent(params.Message, params.Committer, params.Metadata); err != nil {
		return "", err
	}
	start := time.Now()
	id, absorbed, err := g.commit(ctx, repo, branch, params)
	if absorbed && (err == nil || errors.Is(err, ErrNoChanges)) {
		// The branch held MaxSealedTokens from failed commits: they are
		// committed now; commit what was staged since, as asked.
		id2, _, err2 := g.commit(ctx, repo, branch, params)
		switch {
		case err2 == nil:
			id, err = id2, nil
		case !errors.Is(err2, ErrNoChanges) || err != nil:
			id, err = "", err2
		}
	}
	observeCommit(start, err)
	return id, err
}

// contendedUpdateRounds is how many times a commit's branch update starts
// over after the ref manager gave up on lost compare-and-swaps.
const contendedUpdateRounds = 3

// contendedUpdate is BranchUpdate for a commit's two steps. Each lost
// compare-and-swap means another update of the branch succeeded (most
// often another commit's), so a commit keeps going for a few more rounds
// of the ref manager's bounded retries rather than fail its caller while
// the branch is busy, not broken.
func (g *Graveler) contendedUpdate(ctx context.Context, repo *RepositoryRecord, branch BranchID, f BranchUpdateFunc) error {
	for round := 0; ; round++ {
		err := g.refs.BranchUpdate(ctx, repo, branch, f)
		if !errors.Is(err, ErrTooManyRetries) || round+1 >= contendedUpdateRounds || ctx.Err() != nil {
			return err
		}
		commitContention.Inc()
	}
}

// commit is one pass of the flow; absorbed reports that it committed the
// branch's existing sealed tokens without sealing its staging token.
func (g *Graveler) commit(ctx context.Context, repo *RepositoryRecord, branch BranchID, params CommitParams) (CommitID, bool, error) {
	var toks, overrides []StagingToken
	var base CommitID
	absorb, clean := false, false
	err := g.contendedUpdate(ctx, repo, branch, func(cur *Branch) (*Branch, error) {
		base = cur.CommitID
		overrides = cur.OverrideTokens
		if !params.AllowEmpty && len(cur.SealedTokens) == 0 {
			// Nothing staged: every write acknowledged before this commit
			// started is in this token or already committed, so this
			// commit has nothing to do. Sealing the empty token would only
			// send every writer of the branch around again.
			dirty, err := g.isDirty(ctx, repo, cur)
			if err != nil {
				return nil, err
			}
			if clean = !dirty; clean {
				return nil, ErrSkipUpdate
			}
		}
		// At the bound the commit still seals, one token past it: what it
		// lands must include the staging token as of a moment within this
		// call. Committing only the sealed tokens would land a state older
		// than writes acknowledged before the call, and a reset racing the
		// rest of the commit would restore a deleted or overwritten value
		// from it. Only past the bound (a commit that sealed at the bound
		// failed) does a commit absorb the sealed tokens without sealing,
		// so failed commits cannot grow the list further.
		if len(cur.SealedTokens) > g.cfg.MaxSealedTokens {
			absorb, toks = true, slices.Clone(cur.SealedTokens)
			return nil, ErrSkipUpdate
		}
		absorb = false
		toks = tokens(cur)
		return &Branch{CommitID: cur.CommitID, StagingToken: g.refs.NewStagingToken(repo.RepositoryID), SealedTokens: toks, OverrideTokens: cur.OverrideTokens}, nil
	})
	if err != nil {
		return "", false, err
	}
	if clean {
		return "", false, fmt.Errorf("branch %s of repository %s: %w", branch, repo.RepositoryID, ErrNoChanges)
	}
	g.cache.forget(repo, branch)
	baseCommit, err := g.refs.GetCommit(ctx, repo, base)
	if err != nil {
		return "", absorb, err
	}
	baseMR := baseCommit.MetaRangeID
	allowEmpty := params.AllowEmpty
	for attempt := 0; ; attempt++ {
		// Override tokens that correct the head make a change of the
		// branch even where the tree comes out the same (a delete staged
		// over a correction that restored the key): the commit must not
		// answer "no changes" while consuming them, since a later reset
		// would show something else than before.
		corrects, err := g.overridesEffective(ctx, repo, &Branch{CommitID: base, SealedTokens: toks, OverrideTokens: overrides})
		if err != nil {
			return "", absorb, err
		}
		mr, err := g.applyTokens(ctx, repo, baseMR, toks, allowEmpty || corrects)
		noChanges := errors.Is(err, ErrNoChanges)
		if err != nil && !noChanges {
			return "", absorb, err
		}
		if attempt == 0 && !noChanges {
			// Our writes made a change: whatever a rebase finds left to
			// apply, this call must end in a commit of its own.
			allowEmpty = true
		}
		var id CommitID
		if !noChanges {
			id, err = g.refs.AddCommit(ctx, repo, Commit{
				Version:      CurrentCommitVersion,
				Committer:    params.Committer,
				Message:      params.Message,
				MetaRangeID:  mr,
				CreationDate: g.cfg.Now(),
				Parents:      []CommitID{base},
				Metadata:     params.Metadata,
			})
			if err != nil {
				return "", absorb, err
			}
		}
		var moved *Branch
		consumed := toks
		err = g.contendedUpdate(ctx, repo, branch, func(cur *Branch) (*Branch, error) {
			n := len(cur.SealedTokens)
			if cur.CommitID != base || n < len(toks) || !slices.Equal(cur.SealedTokens[n-len(toks):], toks) {
				moved = cloneBranch(cur)
				return nil, errHeadMoved
			}
			nb := cloneBranch(cur)
			nb.SealedTokens = nb.SealedTokens[:n-len(toks)]
			nb.OverrideTokens = liveOverrides(nb)
			if !noChanges {
				nb.CommitID, nb.Change = id, ChangeCommit
			}
			return nb, nil
		})
		if errors.Is(err, errHeadMoved) {
			if attempt >= g.cfg.CommitRetries {
				return "", absorb, fmt.Errorf("commit on branch %s of repository %s: %w", branch, repo.RepositoryID, ErrTooManyRetries)
			}
			commitRebases.Inc()
			toks = overlap(toks, moved.SealedTokens)
			base = moved.CommitID
			c, err := g.refs.GetCommit(ctx, repo, base)
			if err != nil {
				return "", absorb, err
			}
			baseMR = c.MetaRangeID
			continue
		}
		if err != nil {
			return "", absorb, err
		}
		g.cache.forget(repo, branch)
		g.dropTokens(ctx, consumed)
		if noChanges {
			return "", absorb, fmt.Errorf("branch %s of repository %s: %w", branch, repo.RepositoryID, ErrNoChanges)
		}
		return id, absorb, nil
	}
}

// applyTokens applies toks (newest first) over the tree base.
func (g *Graveler) applyTokens(ctx context.Context, repo *RepositoryRecord, base MetaRangeID, toks []StagingToken, allowEmpty bool) (MetaRangeID, error) {
	it, err := g.changesIterator(ctx, toks, repo.StorageNamespace, base)
	if err != nil {
		return "", err
	}
	defer it.Close()
	paced, release := g.pace.iterator(ctx, it)
	defer release()
	mr, _, err := g.committed.Apply(ctx, repo.StorageNamespace, base, paced, ApplyOptions{AllowEmpty: allowEmpty})
	return mr, err
}

// dropTokens hands tokens no branch references any more to the cleaner.
// The caller's operation has already succeeded; a token that cannot be
// queued is found by the cleaner's orphan sweep, so this never fails it.
func (g *Graveler) dropTokens(ctx context.Context, toks []StagingToken) {
	if len(toks) == 0 {
		return
	}
	if err := g.refs.DeleteStagingTokens(context.WithoutCancel(ctx), toks); err != nil {
		tokenQueueFailures.Inc()
	}
}

// isDirty reports whether any of b's change tokens stages anything, or
// one of its override tokens corrects its head (overridesEffective).
func (g *Graveler) isDirty(ctx context.Context, repo *RepositoryRecord, b *Branch) (bool, error) {
	for _, st := range changeTokens(b) {
		its, ranges, err := g.tokenIterators(ctx, []StagingToken{st})
		if err != nil {
			return false, err
		}
		if len(ranges[0]) > 0 {
			its[0].Close()
			return true, nil
		}
		it := its[0]
		found := it.Next()
		err = it.Err()
		it.Close()
		if err != nil {
			return false, err
		}
		if found {
			return true, nil
		}
	}
	return g.overridesEffective(ctx, repo, b)
}

// overridesEffective reports whether an override token of b holds, for a
// key, anything but the key's value in b's head: a correction the next
// commit must carry. Override tokens that hold only the head's values
// correct nothing (the commit whose discarded values they hid never
// landed them) and can be let go with the head's next move.
func (g *Graveler) overridesEffective(ctx context.Context, repo *RepositoryRecord, b *Branch) (bool, error) {
	overrides := liveOverrides(b)
	if len(overrides) == 0 {
		return false, nil
	}
	c, err := g.refs.GetCommit(ctx, repo, b.CommitID)
	if err != nil {
		return false, err
	}
	for _, st := range overrides {
		it, err := g.staging.List(ctx, st)
		if err != nil {
			return false, err
		}
		effective := false
		for !effective && it.Next() {
			rec := it.Value()
			v, err := g.committed.Get(ctx, repo.StorageNamespace, c.MetaRangeID, rec.Key)
			switch {
			case errors.Is(err, ErrEntryNotFound):
				effective = rec.Value != nil
			case err != nil:
				it.Close()
				return false, err
			default:
				effective = rec.Value == nil || !bytes.Equal(rec.Value.Identity, v.Identity)
			}
		}
		err = it.Err()
		it.Close()
		if err != nil || effective {
			return effective, err
		}
	}
	return false, nil
}

// withoutOverrides returns b without its override tokens, and them.
func withoutOverrides(b *Branch) (*Branch, []StagingToken) {
	nb := cloneBranch(b)
	gone := liveOverrides(b)
	nb.SealedTokens = slices.DeleteFunc(nb.SealedTokens, func(st StagingToken) bool { return slices.Contains(gone, st) })
	nb.OverrideTokens = nil
	return nb, gone
}

// Reset discards a branch's staged changes: all, one key, or a prefix.
// Resetting all replaces the branch's tokens at once, in one branch write
// that says so (ChangeReset); resetting a key or a prefix is resetStaged,
// which writes staged entries only, never the branch record.
func (g *Graveler) Reset(ctx context.Context, repoID RepositoryID, branch BranchID, typ ResetType, key Key) error {
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return err
	}
	if err := ValidateBranchID(branch); err != nil {
		return err
	}
	switch typ {
	case ResetTypeAll:
		var old []StagingToken
		err := g.refs.BranchUpdate(ctx, repo, branch, func(cur *Branch) (*Branch, error) {
			// Override tokens stay: they correct the head under changes
			// that earlier resets discarded, and hold no change of their
			// own to discard.
			keep := liveOverrides(cur)
			old = changeTokens(cur)
			return &Branch{CommitID: cur.CommitID, StagingToken: g.refs.NewStagingToken(repoID), SealedTokens: keep, OverrideTokens: keep, Change: ChangeReset}, nil
		})
		if err != nil {
			return err
		}
		g.cache.forget(repo, branch)
		g.dropTokens(ctx, old)
		return nil
	case ResetTypeKey:
		if err := ValidateKey(key); err != nil {
			return err
		}
		return g.resetStaged(ctx, repo, branch, resetScope{key: key})
	case ResetTypePrefix:
		if err := ValidateKey(key); err != nil {
			return fmt.Errorf("prefix: %w", err)
		}
		return g.resetStaged(ctx, repo, branch, resetScope{key: key, prefix: true})
	}
	return fmt.Errorf("%w: reset type %d", ErrInvalidArgument, typ)
}

// resetScope is what a partial reset discards: one key, or every key
// under a prefix.
type resetScope struct {
	key    Key
	prefix bool
}

// covers reports whether a range tombstone of prefix p reaches into sc.
func (sc resetScope) covers(p Key) bool {
	return bytes.HasPrefix(sc.key, p) || sc.prefix && bytes.HasPrefix(p, sc.key)
}

// resetStaged discards what a branch stages for one key or a prefix, as
// durably as a delete: once it returns, reads of the branch never show a
// discarded value again, also when a commit that had already read the
// value lands afterwards. It changes only the staging token, never a
// token a commit may be reading (a sealed one); what sealed tokens stage
// it hides under an override token:
//
//  1. Read the branch fresh, read what its change tokens (all but its
//     override tokens) stage in scope, then read it again, H0. If a token
//     read has left the branch meanwhile, it may have been dropped
//     mid-read: nothing was changed yet, so start again. A range
//     tombstone (DeletePrefix) reaching into the scope is a discarded
//     delete of every key it covers there in the base (H0's override
//     tokens over its head), so those keys count as staged where the
//     range tombstone is.
//  2. Nothing staged: done.
//  3. Only the staging token st stages anything in scope, with no range
//     tombstone there, and H0 still names st: drop the scope from st (a
//     key by a reset record, StagingManager.DropKey; a prefix by one reset
//     range, RangeStager.ResetPrefix, a single write whatever the number
//     of keys). Both are refused, writing nothing, once a range tombstone
//     of st reaches into the scope (a drop cannot undo it: the tombstone
//     would show through) or st is sealed; either way start again, and
//     the next round takes step 4. Otherwise read the branch again. If st
//     is still its staging token, no commit sealed st meanwhile (tokens
//     are never reused), so none read the values: done. If st was retired
//     after the drop applied, its seal marker shows the drop came first
//     and whoever sealed st read it so: done.
//  4. A sealed token stages something in scope (a commit may be reading
//     the discarded values and may land them in the head), or a range
//     tombstone does, or st cannot take a reset range: write a fresh
//     token R with, for every key found, its value in the base (a
//     tombstone where the base lacks it), and publish it in one
//     compare-and-swap of the branch that expects H0 exactly: R becomes
//     the newest sealed token, an override token. When st stages
//     something in scope too, R goes above st, which is sealed behind a
//     new staging token in the same step, so that writes acknowledged
//     after the reset stay above R; otherwise R goes below st, which
//     keeps taking writes. Reads see R's values before and after the
//     commit in flight lands, and the next commit applies R over it. If
//     the branch moved, R is dropped and the reset starts again: a commit
//     that landed meanwhile made the values it carried committed, no
//     longer staged, so the reset no longer discards them.
//
// An override token is not a change: a later reset reads past it and
// takes its values as the base, a reset of everything keeps it, and a
// branch whose override tokens hold only its head's values is clean
// (overridesEffective). A write into the scope that is concurrent with
// the reset may be kept or discarded, and readers see one or the other
// throughout. At most Config.FenceRetries rounds (then ErrTooManyRetries);
// step 4 is refused with ErrTooManyRetries when it would take the branch
// past Config.MaxSealedTokens (a commit of the branch absorbs them). The
// keys found are held in memory: a prefix reset costs memory in the
// number of keys staged under the prefix, and with a commit in flight one
// record per key in R.
func (g *Graveler) resetStaged(ctx context.Context, repo *RepositoryRecord, branch BranchID, sc resetScope) error {
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			resetRetries.Inc()
			if attempt > g.cfg.FenceRetries {
				return g.fenceExhausted(repo, branch)
			}
		}
		done, err := g.resetRound(ctx, repo, branch, sc)
		if done || err != nil {
			return err
		}
	}
}

// resetRound is one round of resetStaged; done is false when the branch
// moved under it and the reset has to start again.
func (g *Graveler) resetRound(ctx context.Context, repo *RepositoryRecord, branch BranchID, sc resetScope) (done bool, err error) {
	// Step 1.
	b, err := g.refs.GetBranch(ctx, repo, branch)
	if err != nil {
		return false, err
	}
	in, err := g.stagedIn(ctx, changeTokens(b), sc)
	if err != nil {
		return false, err
	}
	h0, err := g.refs.GetBranch(ctx, repo, branch)
	if err != nil {
		return false, err
	}
	if !tokensStillHeld(b, h0) {
		return false, nil
	}
	found := in.found
	if len(in.rng) > 0 {
		if err := g.rangeDeletedIn(ctx, repo, h0, sc, in.rng, found); err != nil {
			return false, err
		}
	}
	// Step 2.
	if len(found) == 0 {
		return true, nil
	}
	if in.inSealed || len(in.rng) > 0 {
		// Step 4. Overrides are computed on H0, which holds every token
		// read: the branch must not change before they are published.
		return g.publishOverrides(ctx, repo, branch, h0, found, in.inStaging)
	}
	// Step 3.
	st := b.StagingToken
	if h0.StagingToken != st {
		return false, nil // sealed meanwhile: step 4 next round
	}
	switch {
	case !sc.prefix:
		err = g.staging.DropKey(ctx, st, sc.key)
	case g.ranger != nil:
		// One record write hides the whole scope.
		err = g.ranger.ResetPrefix(ctx, st, sc.key)
	default:
		err = ErrTooManyRangeTombstones
	}
	if errors.Is(err, ErrTooManyRangeTombstones) || errors.Is(err, ErrTooManyRetries) {
		// The token cannot take a reset range (its range record is full,
		// or the staging manager has none), or its range record is too
		// busy to take the reset record: hide the scope under an override
		// token instead.
		return g.publishOverrides(ctx, repo, branch, h0, found, true)
	}
	if errors.Is(err, ErrStagingTokenSealed) || errors.Is(err, ErrRangeInScope) {
		// Sealed since step 1, a commit may be reading st: nothing was
		// written, and the next round finds st sealed. Or a range
		// tombstone was staged into the scope since step 1, which a drop
		// cannot undo: the next round finds it.
		return false, nil
	}
	if err != nil {
		return false, err
	}
	cur, err := g.refs.GetBranch(ctx, repo, branch)
	if err != nil {
		return false, err
	}
	if cur.StagingToken == st {
		return true, nil
	}
	// The write applied, then st was retired: when its marker shows the
	// write came first, whoever sealed st read it. A token retired
	// without a marker and still on the branch was sealed by a release
	// that writes none: go again.
	again, err := g.writeAgain(ctx, repo, branch, st, cur)
	return !again && err == nil, err
}

// publishOverrides is step 4 of resetStaged: it writes the override token
// for the keys of found on h0 and publishes it if the branch is still h0
// (done false otherwise, R dropped): above the staging token, which it
// seals, when above is set, otherwise below it.
func (g *Graveler) publishOverrides(ctx context.Context, repo *RepositoryRecord, branch BranchID, h0 *Branch, found map[string]struct{}, above bool) (bool, error) {
	if err := g.dropMasked(ctx, h0, found); err != nil || len(found) == 0 {
		return err == nil, err
	}
	added := 1
	if above {
		added = 2 // R and the staging token it seals
	}
	if len(h0.SealedTokens)+added > g.cfg.MaxSealedTokens {
		// Past the bound every read pays for them; a commit absorbs
		// sealed tokens.
		return false, fmt.Errorf("reset on branch %s of repository %s: the branch holds %d sealed tokens (at most %d) from commits in flight or failed and from earlier resets: commit the branch, then retry: %w",
			branch, repo.RepositoryID, len(h0.SealedTokens), g.cfg.MaxSealedTokens, ErrTooManyRetries)
	}
	// The cleaner's sweep spares a token no branch names only while it
	// is young: a publication that cannot be sent soon after r is born is
	// not sent at all (a write whose caller gave up is never sent).
	ctx, cancel := context.WithTimeout(ctx, g.cfg.OverridePublishWithin)
	defer cancel()
	keys := slices.Sorted(maps.Keys(found))
	base, err := g.baseValues(ctx, repo, h0, keys)
	if err != nil {
		return false, err
	}
	recs := make([]*ValueRecord, len(keys))
	for i, k := range keys {
		recs[i] = &ValueRecord{Key: Key(k), Value: base[i]}
	}
	r := g.refs.NewStagingToken(repo.RepositoryID)
	if err := g.staging.SetBatch(ctx, r, recs); err != nil {
		// No branch names r: the cleaner's sweep reclaims what was written.
		return false, err
	}
	var published *Branch
	err = g.refs.BranchUpdate(ctx, repo, branch, func(cur *Branch) (*Branch, error) {
		if !sameBranch(cur, h0) {
			return nil, errHeadMoved
		}
		nb := cloneBranch(cur)
		if above {
			nb.StagingToken = g.refs.NewStagingToken(repo.RepositoryID)
			nb.SealedTokens = append([]StagingToken{r}, tokens(cur)...)
		} else {
			nb.SealedTokens = append([]StagingToken{r}, cur.SealedTokens...)
		}
		nb.OverrideTokens = append([]StagingToken{r}, liveOverrides(cur)...)
		published = nb
		return nb, nil
	})
	if errors.Is(err, errHeadMoved) {
		g.dropTokens(ctx, []StagingToken{r})
		return false, nil
	}
	if err != nil {
		// r may be published (an ambiguous write): it stays for the
		// cleaner's sweep to judge.
		g.cache.forget(repo, branch)
		return false, err
	}
	resetOverrideTokens.Inc()
	g.cache.put(repo, branch, published)
	return true, nil
}

// dropMasked removes from found the keys whose newest record on b (in
// its tokens, newest first, a range tombstone counting for the keys it
// covers) is in an override token: what change tokens stage for them lies
// below that token, which already shows the base, so a reset has nothing
// to discard there (and a repeated reset publishes nothing again).
func (g *Graveler) dropMasked(ctx context.Context, b *Branch, found map[string]struct{}) error {
	if len(b.OverrideTokens) == 0 {
		return nil
	}
	toks := tokens(b)
	// masked answers for one key; a prefix reset may ask about many keys,
	// each a round trip per token, so they are asked concurrently.
	masked := func(k string) (bool, error) {
		for _, st := range toks {
			_, err := g.staging.Get(ctx, st, Key(k))
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return false, err
			}
			return slices.Contains(b.OverrideTokens, st), nil
		}
		return false, nil
	}
	keys := slices.Collect(maps.Keys(found))
	drop := make([]bool, len(keys))
	errs := make([]error, min(dropMaskedParallelism, len(keys)))
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range errs {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(keys) || ctx.Err() != nil {
					return
				}
				if drop[i], errs[w] = masked(keys[i]); errs[w] != nil {
					next.Store(int64(len(keys))) // the others stop too
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for i, k := range keys {
		if drop[i] {
			delete(found, k)
		}
	}
	return nil
}

// dropMaskedParallelism bounds the staged reads one reset has in flight
// while it looks for keys an override token already masks.
const dropMaskedParallelism = 16

// baseValues returns the values of keys under b's change tokens: in its
// override tokens, newest first, then in its head (nil: absent there, or a
// tombstone).
func (g *Graveler) baseValues(ctx context.Context, repo *RepositoryRecord, b *Branch, keys []string) ([]*Value, error) {
	c, err := g.refs.GetCommit(ctx, repo, b.CommitID)
	if err != nil {
		return nil, err
	}
	overrides := liveOverrides(b)
	out := make([]*Value, len(keys))
	for i, k := range keys {
		v, found, err := firstStaged(repo, Key(k), overrides, func(_ int, st StagingToken) (*Value, error) {
			return g.staging.Get(ctx, st, Key(k))
		})
		switch {
		case found && errors.Is(err, ErrEntryNotFound):
			continue // an override tombstone
		case err != nil:
			return nil, err
		case found:
			out[i] = v
			continue
		}
		v, err = g.committed.Get(ctx, repo.StorageNamespace, c.MetaRangeID, Key(k))
		switch {
		case err == nil:
			out[i] = v
		case !errors.Is(err, ErrEntryNotFound):
			return nil, err
		}
	}
	return out, nil
}

// stagedScope is what a branch's change tokens stage in a reset's scope.
type stagedScope struct {
	// found holds the keys staged in scope (a value or a tombstone).
	found map[string]struct{}
	// rng holds the prefixes of the range tombstones that reach into
	// the scope.
	rng []Key
	// inStaging: the staging token stages a key or a range in scope;
	// inSealed: a sealed change token does.
	inStaging, inSealed bool
}

// stagedIn reads what toks (the staging token first, then sealed change
// tokens) stage in scope.
func (g *Graveler) stagedIn(ctx context.Context, toks []StagingToken, sc resetScope) (*stagedScope, error) {
	out := &stagedScope{found: map[string]struct{}{}}
	for i, st := range toks {
		its, ranges, err := g.tokenIterators(ctx, []StagingToken{st})
		if err != nil {
			return nil, err
		}
		for _, p := range ranges[0] {
			if sc.covers(p) {
				out.rng = append(out.rng, p)
			}
		}
		n := 0 // keys this token stages in scope
		if !sc.prefix {
			its[0].Close()
			_, err := g.staging.Get(ctx, st, sc.key)
			switch {
			case err == nil:
				out.found[string(sc.key)] = struct{}{}
				n++
			case !errors.Is(err, ErrNotFound):
				return nil, err
			}
		} else {
			it := its[0]
			it.SeekGE(sc.key)
			for it.Next() {
				rec := it.Value()
				if !bytes.HasPrefix(rec.Key, sc.key) {
					break
				}
				out.found[string(rec.Key)] = struct{}{}
				n++
			}
			err = it.Err()
			it.Close()
			if err != nil {
				return nil, err
			}
		}
		if n > 0 || slices.ContainsFunc(ranges[0], sc.covers) {
			if i == 0 {
				out.inStaging = true
			} else {
				out.inSealed = true
			}
		}
	}
	return out, nil
}

// rangeDeletedIn adds to found every key in scope that the base of b (its
// override tokens over its head) holds under one of rng: a discarded
// delete.
func (g *Graveler) rangeDeletedIn(ctx context.Context, repo *RepositoryRecord, b *Branch, sc resetScope, rng []Key, found map[string]struct{}) error {
	if !sc.prefix {
		v, err := g.baseValues(ctx, repo, b, []string{string(sc.key)})
		if err == nil && v[0] != nil {
			found[string(sc.key)] = struct{}{}
		}
		return err
	}
	c, err := g.refs.GetCommit(ctx, repo, b.CommitID)
	if err != nil {
		return err
	}
	its, _, err := g.tokenIterators(ctx, liveOverrides(b))
	if err != nil {
		return err
	}
	cit, err := g.committed.List(ctx, repo.StorageNamespace, c.MetaRangeID)
	if err != nil {
		for _, it := range its {
			it.Close()
		}
		return err
	}
	it := newCombinedIterator(true, append(its, cit)...)
	defer it.Close()
	it.SeekGE(sc.key)
	for it.Next() {
		k := it.Value().Key
		if !bytes.HasPrefix(k, sc.key) {
			break
		}
		if _, ok := covering(rng, k); ok {
			found[string(k)] = struct{}{}
		}
	}
	return it.Err()
}

// ResetHard moves a branch to the commit ref resolves to. Without Force a
// branch with staged changes is ErrDirtyBranch and keeps its tokens; with
// Force its staged changes are discarded.
func (g *Graveler) ResetHard(ctx context.Context, repoID RepositoryID, branch BranchID, ref Ref, opts ResetHardOptions) (*BranchRecord, error) {
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return nil, err
	}
	if err := ValidateBranchID(branch); err != nil {
		return nil, err
	}
	if opts.ExpectedCommitID != "" {
		if err := ValidateCommitID(opts.ExpectedCommitID); err != nil {
			return nil, fmt.Errorf("expected head: %w", err)
		}
	}
	res, err := g.resolve(ctx, repo, ref)
	if err != nil {
		return nil, err
	}
	var old []StagingToken
	var out *Branch
	err = g.refs.BranchUpdate(ctx, repo, branch, func(cur *Branch) (*Branch, error) {
		if opts.ExpectedCommitID != "" && cur.CommitID != opts.ExpectedCommitID {
			return nil, fmt.Errorf("%w: %s of repository %s is at %s, not %s", ErrBranchHeadMoved, branch, repoID, cur.CommitID, opts.ExpectedCommitID)
		}
		nb := cloneBranch(cur)
		nb.CommitID, nb.Change = res.CommitID, ChangeResetHard
		old = nil
		if opts.Force {
			old = tokens(cur)
			nb.StagingToken, nb.SealedTokens, nb.OverrideTokens = g.refs.NewStagingToken(repoID), nil, nil
		} else if dirty, err := g.isDirty(ctx, repo, cur); err != nil {
			return nil, err
		} else if dirty {
			return nil, fmt.Errorf("%w: %s of repository %s", ErrDirtyBranch, branch, repoID)
		} else {
			// Override tokens that correct nothing in the head would
			// mask the new one.
			nb, old = withoutOverrides(nb)
			nb.CommitID, nb.Change = res.CommitID, ChangeResetHard
		}
		out = nb
		return nb, nil
	})
	if err != nil {
		return nil, err
	}
	g.cache.forget(repo, branch)
	g.dropTokens(ctx, old)
	return &BranchRecord{BranchID: branch, Branch: out}, nil
}

// moveHead sets a clean branch's head from expected to id, in a write
// that says change did it: the last step of merge (also a fast-forward),
// revert and cherry-pick. Staged writes that land meanwhile stay staged on
// top of the new head; a commit in flight rebases onto it.
func (g *Graveler) moveHead(ctx context.Context, repo *RepositoryRecord, branch BranchID, expected, id CommitID, change BranchChange) error {
	var dropped []StagingToken
	err := g.refs.BranchUpdate(ctx, repo, branch, func(cur *Branch) (*Branch, error) {
		if cur.CommitID != expected {
			return nil, fmt.Errorf("%w: %s of repository %s moved from %s to %s", ErrBranchHeadMoved, branch, repo.RepositoryID, expected, cur.CommitID)
		}
		nb := cloneBranch(cur)
		dropped = nil
		if len(cur.OverrideTokens) > 0 {
			// Override tokens correct the head they were computed on
			// and would mask the new one: they go if they correct
			// nothing and hide no sealed change (no commit in flight),
			// otherwise the branch is not clean any more.
			effective, err := g.overridesEffective(ctx, repo, cur)
			if err != nil {
				return nil, err
			}
			if effective || sealedChanges(cur) {
				return nil, fmt.Errorf("%w: %s of repository %s (a reset staged corrections of its head meanwhile)", ErrDirtyBranch, branch, repo.RepositoryID)
			}
			nb, dropped = withoutOverrides(cur)
		}
		nb.CommitID, nb.Change = id, change
		return nb, nil
	})
	g.cache.forget(repo, branch)
	if err == nil {
		g.dropTokens(ctx, dropped)
	}
	return err
}
