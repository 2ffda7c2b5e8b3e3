package graveler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
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
	var toks []StagingToken
	var base CommitID
	absorb, clean := false, false
	err := g.contendedUpdate(ctx, repo, branch, func(cur *Branch) (*Branch, error) {
		base = cur.CommitID
		if !params.AllowEmpty && len(cur.SealedTokens) == 0 {
			// Nothing staged: every write acknowledged before this commit
			// started is in this token or already committed, so this
			// commit has nothing to do. Sealing the empty token would only
			// send every writer of the branch around again.
			dirty, err := g.isDirty(ctx, cur)
			if err != nil {
				return nil, err
			}
			if clean = !dirty; clean {
				return nil, ErrSkipUpdate
			}
		}
		if len(cur.SealedTokens) >= g.cfg.MaxSealedTokens {
			absorb, toks = true, slices.Clone(cur.SealedTokens)
			return nil, ErrSkipUpdate
		}
		absorb = false
		toks = tokens(cur)
		return &Branch{CommitID: cur.CommitID, StagingToken: g.refs.NewStagingToken(repo.RepositoryID), SealedTokens: toks}, nil
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
		mr, err := g.applyTokens(ctx, repo, baseMR, toks, allowEmpty)
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

// isDirty reports whether any of b's tokens stages anything.
func (g *Graveler) isDirty(ctx context.Context, b *Branch) (bool, error) {
	for _, st := range tokens(b) {
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
	return false, nil
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
			old = tokens(cur)
			return &Branch{CommitID: cur.CommitID, StagingToken: g.refs.NewStagingToken(repoID), Change: ChangeReset}, nil
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

// resetStaged discards what a branch stages for one key or a prefix, as
// durably as a delete: once it returns, reads of the branch never show a
// discarded value again, also when a commit that had already read the
// value lands afterwards. It drops entries only from a staging token no
// commit had sealed when it looked, and when one sealed it meanwhile it
// stages overrides instead of touching the tokens a commit may have read:
//
//  1. Read the branch fresh, read what its tokens stage in scope (the
//     discarded values), then re-read it. If a token read has left the
//     branch meanwhile, it may have been dropped mid-read: nothing was
//     changed yet, so start again from the branch just read.
//  2. Nothing staged: done. H0, the head of that second read, is the tree
//     without the discarded values: every token read was still on the
//     branch, so no commit had applied any of them.
//  3. Fast path, when the branch has no sealed token (no commit in
//     flight): drop the scope from the staging token st (a prefix by one
//     reset range, RangeStager.ResetPrefix, a single write whatever the
//     number of keys; key by key where st cannot take one), then re-read
//     the branch. If st is still its staging token, no commit sealed st
//     meanwhile (tokens are never reused), so none read the values: done.
//     The branch stays clean when nothing else is staged.
//  4. Otherwise (sealed tokens present in step 1, or st sealed during the
//     drop) a commit may have read the discarded values and may land them
//     in the head later. Then, for every key found in step 1, write into
//     the current staging token an override: the key's value in H, the
//     branch's current head, or a tombstone if H lacks it. Staged on top
//     of every older token and of the head, the override is what reads
//     see, before and after that commit lands, and what the next commit
//     applies. Keys found in step 1 are kept across rounds: a commit that
//     landed meanwhile consumed their tokens, but its tree may hold their
//     discarded values.
//  5. If H holds a key's discarded value (one of the values found in
//     step 1, matched by identity; absent for a discarded tombstone), a
//     commit landed it: the override is the key's value in H0 instead,
//     the tree without it. Any other value in H came from a change the
//     reset does not discard (a merge, a write concurrent with the reset
//     that a commit took), and is kept.
//  6. The overrides go through the writer's path (stageFenced, or
//     SetBatch then recheck). Those written while their token was the
//     staging token, or before the update that retired it (its seal
//     marker shows it: the commit that sealed it carries them), stand
//     and are never written again, which would undo writes of their keys
//     acknowledged since; those the token refused are computed again
//     from the branch the fence read and go to its token. When the token
//     is still current but the head moved, a new head may change step
//     5's choice, and every override is computed again from it and
//     written once more. At most Config.FenceRetries rounds
//     (ErrTooManyRetries).
//
// Overrides are staged entries: until the next commit they make the
// branch dirty (merge refuses it), though they change nothing against the
// head. A reset of everything (ResetTypeAll, ResetHard with Force) that
// follows discards them with everything staged, as it would a delete.
// A write into the scope that is concurrent with the reset may be kept or
// discarded, and readers see one or the other throughout: step 3's drop,
// like any staged write, does not apply to a token a commit has sealed
// (the commit then carries the write, and the overrides decide). A range
// tombstone (DeletePrefix) reaching into
// the scope is a discarded delete of every key of H0 it covers there:
// those keys join the ones found in step 1, and the reset takes steps 4 to
// 6 (dropping entries cannot undo it), so a reset of a key or a prefix
// under a deleted prefix stages one override per such key.
// The keys found in step 1 are held in memory:
// a prefix reset costs memory in the number of keys staged under the
// prefix, and with a commit in flight one write per key.
func (g *Graveler) resetStaged(ctx context.Context, repo *RepositoryRecord, branch BranchID, sc resetScope) error {
	b, err := g.refs.GetBranch(ctx, repo, branch)
	if err != nil {
		return err
	}
	attempt := 0
	retry := func() error {
		resetRetries.Inc()
		if attempt++; attempt > g.cfg.FenceRetries {
			return g.fenceExhausted(repo, branch)
		}
		return nil
	}
	// Steps 1 and 2.
	var found map[string][]*Value
	var rng []Key
	var h0 *Branch
	for {
		if found, rng, err = g.stagedIn(ctx, tokens(b), sc); err != nil {
			return err
		}
		if h0, err = g.refs.GetBranch(ctx, repo, branch); err != nil {
			return err
		}
		if tokensStillHeld(b, h0) {
			break
		}
		if err := retry(); err != nil {
			return err
		}
		b = h0
	}
	if len(rng) > 0 {
		// Range tombstones delete keys in scope that no token stages: each
		// such key of H0 is a discarded delete, overridden like one.
		if err := g.rangeDeletedIn(ctx, repo, h0.CommitID, sc, rng, found); err != nil {
			return err
		}
	}
	if len(found) == 0 {
		return nil
	}
	// Step 3: b is the branch whose tokens were read, h0 the one read
	// after them. Dropping entries cannot undo a range tombstone.
	if len(b.SealedTokens) == 0 && h0.StagingToken == b.StagingToken && len(rng) == 0 {
		st := b.StagingToken
		perKey := false // reset record by record: a seal may refuse part of it
		switch {
		case !sc.prefix:
			err = g.staging.DropKey(ctx, st, sc.key)
		case g.ranger != nil:
			// One record write hides the whole scope. Where the token
			// cannot take it (a range tombstone staged into the scope
			// since step 1, the token's limit), entries are dropped as
			// without one: what follows decides as it does after any
			// drop. A token sealed since step 1 takes neither (a commit
			// may be reading it): the re-read below finds the new token
			// and the overrides of steps 4 to 6 do the reset.
			err = g.ranger.ResetPrefix(ctx, st, sc.key)
			switch {
			case errors.Is(err, ErrRangeInScope), errors.Is(err, ErrTooManyRangeTombstones):
				perKey = true
				err = g.staging.DropByPrefix(ctx, st, sc.key)
			}
		default:
			perKey = true
			err = g.staging.DropByPrefix(ctx, st, sc.key)
		}
		sealed := errors.Is(err, ErrStagingTokenSealed)
		if sealed {
			// A commit sealed the token since step 1 and may be reading
			// it: nothing was dropped after the seal (a prefix may be
			// dropped in part before it, which the commit then reads).
			// The re-read below finds the new token, and the overrides of
			// steps 4 to 6 do the reset.
			err = nil
		}
		if err != nil {
			return err
		}
		dropped := !sealed
		if b, err = g.refs.GetBranch(ctx, repo, branch); err != nil {
			return err
		}
		if b.StagingToken == st {
			return nil
		}
		if sealed && perKey {
			// Reset key by key, the token may have taken part of the
			// reset before the seal refused the rest: the commit that
			// sealed it read those keys reset, and only the others need
			// overrides (one for a key reset already would undo writes
			// of it acknowledged since).
			if err := g.keepUnreset(ctx, repo, branch, st, found); err != nil || len(found) == 0 {
				return err
			}
		}
		if dropped {
			// The drop applied, then st was retired: when its marker
			// shows the drop came first, the commit that sealed st read
			// it without the discarded values, and overrides now would
			// undo writes acknowledged since.
			again, err := g.writeAgain(ctx, repo, branch, st, b)
			if err != nil || !again {
				return err
			}
		}
	} else {
		b = h0
	}
	// Steps 4 to 6.
	keys := slices.Sorted(maps.Keys(found))
	base, err := g.valuesAt(ctx, repo, h0.CommitID, keys)
	if err != nil {
		return err
	}
	baseOf := make(map[string]*Value, len(keys))
	for i, k := range keys {
		baseOf[k] = base[i]
	}
	for {
		head, err := g.valuesAt(ctx, repo, b.CommitID, keys)
		if err != nil {
			return err
		}
		recs := make([]*ValueRecord, 0, len(keys))
		for i, k := range keys {
			v := head[i]
			if discarded(found[k], v) {
				v = baseOf[k]
			}
			recs = append(recs, &ValueRecord{Key: Key(k), Value: v})
		}
		cur, rest, err := g.stageOverrides(ctx, repo, branch, b.StagingToken, recs)
		if err != nil {
			return err
		}
		g.cache.put(repo, branch, cur)
		if len(rest) == 0 && cur.StagingToken == b.StagingToken && cur.CommitID != b.CommitID {
			// Written into the token still current, but the head moved
			// meanwhile (a commit of a token the reset did not read, a
			// merge, a reset hard): step 5's choice may differ on the new
			// head, so the overrides are computed again from it.
			rest = recs
		}
		if len(rest) == 0 {
			return nil
		}
		if err := retry(); err != nil {
			return err
		}
		keys = keys[:0]
		for _, r := range rest {
			keys = append(keys, string(r.Key))
		}
		b = cur
	}
}

// keepUnreset removes from found the keys that st, a token a commit
// sealed during a reset's drop, holds reset records for. Every key of
// found was staged in st when the reset read it, so such a record was
// written since, before the seal. A token whose marker is gone was
// dropped meanwhile, and which of its keys were reset cannot be told:
// ErrAmbiguous.
func (g *Graveler) keepUnreset(ctx context.Context, repo *RepositoryRecord, branch BranchID, st StagingToken, found map[string][]*Value) error {
	ks := make([]Key, 0, len(found))
	for k := range found {
		ks = append(ks, Key(k))
	}
	reset, sealed, err := g.staging.ResetIn(ctx, st, ks)
	if err != nil {
		return err
	}
	if !sealed {
		writesUnknown.Inc()
		return fmt.Errorf("reset on branch %s of repository %s: its staging token %s was retired and dropped while the reset was in flight: %w",
			branch, repo.RepositoryID, st, ErrAmbiguous)
	}
	for i, k := range ks {
		if reset[i] {
			delete(found, string(k))
		}
	}
	return nil
}

// stagedIn returns what toks stage in scope: for each key, the values
// staged for it (nil: a tombstone), newest token first; and the prefixes
// of the range tombstones that reach into scope.
func (g *Graveler) stagedIn(ctx context.Context, toks []StagingToken, sc resetScope) (map[string][]*Value, []Key, error) {
	found := map[string][]*Value{}
	var rng []Key
	for _, st := range toks {
		its, ranges, err := g.tokenIterators(ctx, []StagingToken{st})
		if err != nil {
			return nil, nil, err
		}
		for _, p := range ranges[0] {
			if bytes.HasPrefix(sc.key, p) || sc.prefix && bytes.HasPrefix(p, sc.key) {
				rng = append(rng, p)
			}
		}
		if !sc.prefix {
			its[0].Close()
			v, err := g.staging.Get(ctx, st, sc.key)
			switch {
			case err == nil:
				found[string(sc.key)] = append(found[string(sc.key)], cloneValue(v))
			case !errors.Is(err, ErrNotFound):
				return nil, nil, err
			}
			continue
		}
		it := its[0]
		it.SeekGE(sc.key)
		for it.Next() {
			rec := it.Value()
			if !bytes.HasPrefix(rec.Key, sc.key) {
				break
			}
			found[string(rec.Key)] = append(found[string(rec.Key)], cloneValue(rec.Value))
		}
		err = it.Err()
		it.Close()
		if err != nil {
			return nil, nil, err
		}
	}
	return found, rng, nil
}

// rangeDeletedIn adds to found a discarded tombstone for every key in
// scope that the tree of commit id holds under one of rng.
func (g *Graveler) rangeDeletedIn(ctx context.Context, repo *RepositoryRecord, id CommitID, sc resetScope, rng []Key, found map[string][]*Value) error {
	c, err := g.refs.GetCommit(ctx, repo, id)
	if err != nil {
		return err
	}
	if !sc.prefix {
		_, err := g.committed.Get(ctx, repo.StorageNamespace, c.MetaRangeID, sc.key)
		switch {
		case err == nil:
			found[string(sc.key)] = append(found[string(sc.key)], nil)
		case !errors.Is(err, ErrNotFound):
			return err
		}
		return nil
	}
	it, err := g.committed.List(ctx, repo.StorageNamespace, c.MetaRangeID)
	if err != nil {
		return err
	}
	defer it.Close()
	it.SeekGE(sc.key)
	for it.Next() {
		k := it.Value().Key
		if !bytes.HasPrefix(k, sc.key) {
			break
		}
		if _, ok := covering(rng, k); ok {
			found[string(k)] = append(found[string(k)], nil)
		}
	}
	return it.Err()
}

// valuesAt returns the values of keys in a commit's tree (nil: absent).
func (g *Graveler) valuesAt(ctx context.Context, repo *RepositoryRecord, id CommitID, keys []string) ([]*Value, error) {
	c, err := g.refs.GetCommit(ctx, repo, id)
	if err != nil {
		return nil, err
	}
	out := make([]*Value, len(keys))
	for i, k := range keys {
		v, err := g.committed.Get(ctx, repo.StorageNamespace, c.MetaRangeID, Key(k))
		switch {
		case err == nil:
			out[i] = v
		case !errors.Is(err, ErrNotFound):
			return nil, err
		}
	}
	return out, nil
}

// discarded reports whether v, a key's value in a head (nil: absent), is
// one of the values a reset discarded for it (nil: a tombstone).
func discarded(values []*Value, v *Value) bool {
	return slices.ContainsFunc(values, func(d *Value) bool {
		if d == nil || v == nil {
			return d == nil && v == nil
		}
		return bytes.Equal(d.Identity, v.Identity)
	})
}

// stageOverrides writes a reset's overrides into st through the writer's
// path. It returns the branch its fence read and the overrides that still
// have to be written into that branch's token: none when every override
// stands (written into st while st was the staging token, or before the
// update that retired it, which its seal marker shows: the commit that
// sealed st carries them); those st refused otherwise. An override that
// stands is never written again, which would undo writes of its key
// acknowledged since.
func (g *Graveler) stageOverrides(ctx context.Context, repo *RepositoryRecord, branch BranchID, st StagingToken, recs []*ValueRecord) (*Branch, []*ValueRecord, error) {
	if len(recs) == 1 {
		if fenced := g.stageFenced(ctx, repo, branch, recs[0].Key, recs[0].Value); fenced != nil {
			r, cur, err := fenced(st)
			sealed := errors.Is(err, ErrStagingTokenSealed) && cur != nil
			if err != nil && !sealed {
				g.repos.forget(repo.RepositoryID)
				return nil, nil, err
			}
			g.repos.put(r)
			switch {
			case sealed && cur.StagingToken == st:
				return nil, nil, retiredButNamed(repo, branch, st)
			case !sealed && cur.StagingToken == st:
				return cur, nil, nil
			}
			// Refused, or written while the branch, read with the
			// write, named another token: st was retired without a
			// marker and dropped, or sealed by a release that writes
			// none, and the override must go again.
			return cur, recs, nil
		}
	}
	err := g.staging.SetBatch(ctx, st, recs)
	pe, partly := errors.AsType[*PartlyStagedError](err)
	if err != nil && !partly {
		return nil, nil, err
	}
	cur, err := g.recheck(ctx, repo, branch)
	switch {
	case err != nil:
		return nil, nil, err
	case cur.StagingToken == st && partly:
		return nil, nil, retiredButNamed(repo, branch, st)
	case cur.StagingToken == st:
		return cur, nil, nil
	case partly:
		return cur, pe.Unapplied, nil
	}
	again, err := g.writeAgain(ctx, repo, branch, st, cur)
	if err != nil || !again {
		return cur, nil, err
	}
	return cur, recs, nil
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
			nb.StagingToken, nb.SealedTokens = g.refs.NewStagingToken(repoID), nil
		} else if dirty, err := g.isDirty(ctx, cur); err != nil {
			return nil, err
		} else if dirty {
			return nil, fmt.Errorf("%w: %s of repository %s", ErrDirtyBranch, branch, repoID)
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
	err := g.refs.BranchUpdate(ctx, repo, branch, func(cur *Branch) (*Branch, error) {
		if cur.CommitID != expected {
			return nil, fmt.Errorf("%w: %s of repository %s moved from %s to %s", ErrBranchHeadMoved, branch, repo.RepositoryID, expected, cur.CommitID)
		}
		nb := cloneBranch(cur)
		nb.CommitID, nb.Change = id, change
		return nb, nil
	})
	g.cache.forget(repo, branch)
	return err
}
