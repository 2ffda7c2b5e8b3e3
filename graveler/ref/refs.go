package ref

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"graveler/graveler"
)

// maxRefModifierValue bounds N in "~N" and "^N"; a longer walk is almost
// certainly a typo, and the bound keeps a resolve from walking unboundedly.
const maxRefModifierValue = 1 << 20

// ParseRef parses a reference expression:
//
//	ref      = base ["@"] { ("~" | "^") [digits] }
//	base     = branch | tag | commit id | commit id prefix
//
// "~N" is the Nth first-parent ancestor (N defaults to 1), "^N" the Nth
// parent ("^0" is the commit itself), and "@" right after a branch selects
// its committed head without staged entries. Modifiers chain left to
// right: "main~2^2" is the second parent of main's grandparent. An
// expression longer than graveler.MaxRefLen is invalid.
func (m *Manager) ParseRef(ref graveler.Ref) (graveler.RawRef, error) {
	return ParseRef(ref)
}

// ParseRef is Manager.ParseRef; it needs no store.
func ParseRef(ref graveler.Ref) (graveler.RawRef, error) {
	if err := graveler.ValidateRef(ref); err != nil {
		return graveler.RawRef{}, err
	}
	s := string(ref)
	i := 0
	for i < len(s) && s[i] != '~' && s[i] != '^' && s[i] != '@' {
		i++
	}
	raw := graveler.RawRef{BaseRef: s[:i]}
	if err := validateBaseRef(raw.BaseRef); err != nil {
		return graveler.RawRef{}, fmt.Errorf("%w: %s: %w", graveler.ErrInvalidRef, graveler.Echo(s), err)
	}
	if i < len(s) && s[i] == '@' {
		raw.Modifiers = append(raw.Modifiers, graveler.RefModifier{Type: graveler.RefModTypeAt})
		i++
	}
	for i < len(s) {
		var typ graveler.RefModType
		switch s[i] {
		case '~':
			typ = graveler.RefModTypeTilde
		case '^':
			typ = graveler.RefModTypeCaret
		default:
			return graveler.RawRef{}, fmt.Errorf("%w: %s: unexpected %q at %d", graveler.ErrInvalidRef, graveler.Echo(s), s[i], i)
		}
		i++
		j := i
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		n := 1
		if j > i {
			v, err := strconv.Atoi(s[i:j])
			if err != nil || v > maxRefModifierValue {
				return graveler.RawRef{}, fmt.Errorf("%w: %s: modifier %s out of range (max %d)", graveler.ErrInvalidRef, graveler.Echo(s), graveler.Echo(s[i:j]), maxRefModifierValue)
			}
			n = v
		}
		raw.Modifiers = append(raw.Modifiers, graveler.RefModifier{Type: typ, Value: n})
		i = j
	}
	return raw, nil
}

func validateBaseRef(base string) error {
	if base == "" {
		return errors.New("empty base")
	}
	if isCommitPrefix(base) || graveler.ValidateBranchID(graveler.BranchID(base)) == nil {
		return nil
	}
	return errors.New("base is neither a branch or tag name nor a commit id")
}

func isCommitPrefix(s string) bool {
	return len(s) >= graveler.MinCommitPrefixLen && len(s) <= graveler.CommitIDLen && isHex(s)
}

// ResolveRawRef resolves a parsed reference. The base is looked up as a
// branch, then a tag, then a commit id or unique prefix: a branch or tag
// named like a commit prefix shadows the commit, as in git. The result
// carries the commit id and its metarange; for a branch without "~"/"^"
// modifiers it also carries the branch record (its staging tokens), with
// ResolvedBranchModifierCommitted when "@" was given.
func (m *Manager) ResolveRawRef(ctx context.Context, repo *graveler.RepositoryRecord, raw graveler.RawRef) (*graveler.ResolvedRef, error) {
	part, err := repoPartition(repo)
	if err != nil {
		return nil, err
	}
	if err := validateBaseRef(raw.BaseRef); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", graveler.ErrInvalidRef, graveler.Echo(raw.BaseRef), err)
	}
	at := false
	for i, mod := range raw.Modifiers {
		if mod.Type == graveler.RefModTypeAt {
			if i != 0 {
				return nil, fmt.Errorf("%w: %s: '@' must follow the branch name", graveler.ErrInvalidRef, graveler.Echo(raw.BaseRef))
			}
			at = true
		}
	}
	res := &graveler.ResolvedRef{Type: graveler.RefTypeCommit}
	var commit *graveler.Commit
	resolved := false

	if graveler.ValidateBranchID(graveler.BranchID(raw.BaseRef)) == nil {
		id := graveler.BranchID(raw.BaseRef)
		b, err := m.GetBranch(ctx, repo, id)
		switch {
		case err == nil:
			res.Type = graveler.RefTypeBranch
			res.BranchRecord = graveler.BranchRecord{BranchID: id, Branch: b}
			res.CommitID = b.CommitID
			resolved = true
		case !errors.Is(err, graveler.ErrBranchNotFound):
			return nil, err
		}
	}
	if !resolved && graveler.ValidateTagID(graveler.TagID(raw.BaseRef)) == nil {
		c, err := m.GetTag(ctx, repo, graveler.TagID(raw.BaseRef))
		switch {
		case err == nil:
			res.Type = graveler.RefTypeTag
			res.CommitID = c
			resolved = true
		case !errors.Is(err, graveler.ErrTagNotFound):
			return nil, err
		}
	}
	if !resolved && isCommitPrefix(raw.BaseRef) {
		c, id, err := m.GetCommitByPrefix(ctx, repo, graveler.CommitID(raw.BaseRef))
		switch {
		case err == nil:
			res.CommitID, commit = id, c
			resolved = true
		case !errors.Is(err, graveler.ErrCommitNotFound):
			return nil, err
		}
	}
	if !resolved {
		return nil, fmt.Errorf("%w: %s in repository %s", graveler.ErrRefNotFound, raw.BaseRef, repo.RepositoryID)
	}
	if at {
		if res.Type != graveler.RefTypeBranch {
			return nil, fmt.Errorf("%w: %s: '@' applies only to a branch", graveler.ErrInvalidRef, graveler.Echo(raw.BaseRef))
		}
		res.ResolvedBranchModifier = graveler.ResolvedBranchModifierCommitted
	}
	if commit == nil {
		if commit, err = m.getCommit(ctx, part, repo.RepositoryID, res.CommitID); err != nil {
			return nil, err
		}
	}
	for _, mod := range raw.Modifiers {
		if mod.Type == graveler.RefModTypeAt {
			continue
		}
		if mod.Value < 0 {
			return nil, fmt.Errorf("%w: %s: negative modifier %d", graveler.ErrInvalidRef, graveler.Echo(raw.BaseRef), mod.Value)
		}
		// Any ancestry step turns the result into a plain commit.
		res.Type = graveler.RefTypeCommit
		res.ResolvedBranchModifier = graveler.ResolvedBranchModifierNone
		res.BranchRecord = graveler.BranchRecord{}
		steps, parent := mod.Value, 1
		if mod.Type == graveler.RefModTypeCaret {
			steps, parent = min(mod.Value, 1), mod.Value
		}
		for range steps {
			if len(commit.Parents) < parent {
				return nil, fmt.Errorf("%w: commit %s has no parent %d (resolving %s in repository %s)",
					graveler.ErrRefNotFound, res.CommitID, parent, raw.BaseRef, repo.RepositoryID)
			}
			res.CommitID = commit.Parents[parent-1]
			if commit, err = m.getCommit(ctx, part, repo.RepositoryID, res.CommitID); err != nil {
				return nil, err
			}
		}
	}
	res.MetaRangeID = commit.MetaRangeID
	return res, nil
}
