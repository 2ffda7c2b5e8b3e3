package ref

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"

	"graveler/graveler"
	"graveler/keys"
	"graveler/kv"
)

// GetTag returns the commit a tag points at, or ErrTagNotFound.
func (m *Manager) GetTag(ctx context.Context, repo *graveler.RepositoryRecord, id graveler.TagID) (graveler.CommitID, error) {
	part, err := repoPartition(repo)
	if err != nil {
		return "", err
	}
	if err := graveler.ValidateTagID(id); err != nil {
		return "", err
	}
	data, _, err := m.store.Get(ctx, part, keys.Tag(string(id)))
	if errors.Is(err, kv.ErrNotFound) {
		return "", fmt.Errorf("%w: %s in repository %s", graveler.ErrTagNotFound, id, repo.RepositoryID)
	}
	if err != nil {
		return "", storeErr(err, "get tag %s of repository %s", id, repo.RepositoryID)
	}
	c, err := decodeTag(data)
	if err != nil {
		return "", fmt.Errorf("tag %s of repository %s: %w", id, repo.RepositoryID, err)
	}
	return c, nil
}

// CreateTag creates an immutable tag, or fails with ErrTagExists, or
// ErrAlreadyExists when a branch of that name exists.
func (m *Manager) CreateTag(ctx context.Context, repo *graveler.RepositoryRecord, id graveler.TagID, commitID graveler.CommitID) error {
	return m.createTag(ctx, repo, id, commitID, true)
}

// RestoreTag creates a tag even where a branch of that name exists (see
// graveler.RefManager.RestoreTag).
func (m *Manager) RestoreTag(ctx context.Context, repo *graveler.RepositoryRecord, id graveler.TagID, commitID graveler.CommitID) error {
	return m.createTag(ctx, repo, id, commitID, false)
}

func (m *Manager) createTag(ctx context.Context, repo *graveler.RepositoryRecord, id graveler.TagID, commitID graveler.CommitID, refuseBranch bool) error {
	part, err := repoPartition(repo)
	if err != nil {
		return err
	}
	if err := graveler.ValidateTagID(id); err != nil {
		return err
	}
	if err := graveler.ValidateCommitID(commitID); err != nil {
		return err
	}
	data, err := encodeTag(commitID)
	if err != nil {
		return err
	}
	// A branch of the same name would hide the tag: it must be missing, in
	// the same step that creates the tag (see createBranch).
	var branch []kv.KeyRef
	if refuseBranch {
		branch = []kv.KeyRef{{Partition: part, Key: keys.Branch(string(id))}}
	}
	found, err := m.createClashFree(ctx, part, keys.Tag(string(id)), keys.Branch(string(id)), func() error {
		return kv.Effect(ctx, func(ctx context.Context) error {
			return kv.SetIfWith(ctx, m.store, part, keys.Tag(string(id)), data, kv.Absent, branch, nil)
		})
	})
	switch {
	case found == existsSelf:
		return fmt.Errorf("%w: %s in repository %s", graveler.ErrTagExists, id, repo.RepositoryID)
	case found == existsOther:
		return fmt.Errorf("%w: tag %s: a branch of that name exists in repository %s, which would hide the tag", graveler.ErrAlreadyExists, id, repo.RepositoryID)
	case errors.Is(err, errClashKeptMoving):
		return fmt.Errorf("%w: tag %s of repository %s: a branch of that name kept appearing and going", graveler.ErrConflict, id, repo.RepositoryID)
	case err != nil:
		return storeErr(err, "create tag %s of repository %s", id, repo.RepositoryID)
	}
	return nil
}

// DeleteTag deletes a tag, or fails with ErrTagNotFound. The record is
// removed with DeleteIf at the version read: tags are never rewritten, so
// a changed version means the tag read was deleted meanwhile (and maybe
// created again, which this delete must not undo). That counts as done.
func (m *Manager) DeleteTag(ctx context.Context, repo *graveler.RepositoryRecord, id graveler.TagID) error {
	part, err := repoPartition(repo)
	if err != nil {
		return err
	}
	if err := graveler.ValidateTagID(id); err != nil {
		return err
	}
	data, pred, err := m.store.Get(ctx, part, keys.Tag(string(id)))
	if errors.Is(err, kv.ErrNotFound) {
		return fmt.Errorf("%w: %s in repository %s", graveler.ErrTagNotFound, id, repo.RepositoryID)
	}
	if err != nil {
		return storeErr(err, "get tag %s of repository %s", id, repo.RepositoryID)
	}
	if _, err := decodeTag(data); err != nil {
		return fmt.Errorf("tag %s of repository %s: %w", id, repo.RepositoryID, err)
	}
	err = kv.Effect(ctx, func(ctx context.Context) error {
		return m.store.DeleteIf(ctx, part, keys.Tag(string(id)), pred)
	})
	if err != nil && !errors.Is(err, kv.ErrPredicateFailed) {
		return storeErr(err, "delete tag %s of repository %s", id, repo.RepositoryID)
	}
	return nil
}

// ListTags walks tags by name, after opts.After.
func (m *Manager) ListTags(ctx context.Context, repo *graveler.RepositoryRecord, opts graveler.ListOptions) iter.Seq2[*graveler.TagRecord, error] {
	return func(yield func(*graveler.TagRecord, error) bool) {
		part, err := repoPartition(repo)
		if err != nil {
			yield(nil, err)
			return
		}
		for e, err := range m.store.Scan(ctx, part, kv.ScanOptions{Start: after(keys.TagsPrefix, opts.After)}) {
			if err != nil {
				yield(nil, storeErr(err, "list tags of repository %s", repo.RepositoryID))
				return
			}
			if !strings.HasPrefix(string(e.Key), keys.TagsPrefix) {
				return
			}
			name, err := keys.ParseRecord(keys.TagsPrefix, e.Key)
			if err != nil {
				yield(nil, fmt.Errorf("%w: %w", ErrCorruptRecord, err))
				return
			}
			c, err := decodeTag(e.Value)
			if err != nil {
				yield(nil, fmt.Errorf("tag %s of repository %s: %w", name, repo.RepositoryID, err))
				return
			}
			if !yield(&graveler.TagRecord{TagID: graveler.TagID(name), CommitID: c}, nil) {
				return
			}
		}
	}
}
