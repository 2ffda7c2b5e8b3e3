package ref

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"

	"graveler/graveler"
	"graveler/keys"
	"graveler/kv"
)

var hexDigits = func() (t [256]bool) {
	for _, c := range "0123456789abcdef" {
		t[c] = true
	}
	return t
}()

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !hexDigits[s[i]] {
			return false
		}
	}
	return s != ""
}

func (m *Manager) getCommit(ctx context.Context, part []byte, repo graveler.RepositoryID, id graveler.CommitID) (*graveler.Commit, error) {
	ckey := string(part) + "\x00" + string(id)
	if c, ok := m.commits.get(ckey); ok {
		commitCacheHits.Inc()
		return c, nil
	}
	c, err := m.readCommit(ctx, part, repo, id)
	if err != nil {
		return nil, err
	}
	m.commits.add(ckey, c)
	return cloneCommit(c), nil
}

func (m *Manager) readCommit(ctx context.Context, part []byte, repo graveler.RepositoryID, id graveler.CommitID) (*graveler.Commit, error) {
	data, _, err := m.store.Get(ctx, part, keys.Commit(string(id)))
	if errors.Is(err, kv.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s in repository %s", graveler.ErrCommitNotFound, id, repo)
	}
	if err != nil {
		return nil, storeErr(err, "get commit %s of repository %s", id, repo)
	}
	c, err := decodeCommit(data)
	if err != nil {
		return nil, fmt.Errorf("commit %s of repository %s: %w", id, repo, err)
	}
	return c, nil
}

// GetCommit reads a commit by its full id.
func (m *Manager) GetCommit(ctx context.Context, repo *graveler.RepositoryRecord, id graveler.CommitID) (*graveler.Commit, error) {
	part, err := repoPartition(repo)
	if err != nil {
		return nil, err
	}
	if err := graveler.ValidateCommitID(id); err != nil {
		return nil, err
	}
	return m.getCommit(ctx, part, repo.RepositoryID, id)
}

// GetCommitByPrefix finds the one commit whose id starts with prefix (at
// least graveler.MinCommitPrefixLen hex digits). Two matches are
// ErrRefAmbiguous. It costs one bounded scan of at most two keys.
func (m *Manager) GetCommitByPrefix(ctx context.Context, repo *graveler.RepositoryRecord, prefix graveler.CommitID) (*graveler.Commit, graveler.CommitID, error) {
	part, err := repoPartition(repo)
	if err != nil {
		return nil, "", err
	}
	p := string(prefix)
	if len(p) < graveler.MinCommitPrefixLen || len(p) > graveler.CommitIDLen || !isHex(p) {
		return nil, "", fmt.Errorf("%w: prefix %s must be %d to %d lower-case hex digits", graveler.ErrInvalidCommitID, graveler.Echo(p), graveler.MinCommitPrefixLen, graveler.CommitIDLen)
	}
	if len(p) == graveler.CommitIDLen {
		c, err := m.getCommit(ctx, part, repo.RepositoryID, prefix)
		return c, prefix, err
	}
	start := keys.Commit(p)
	var found graveler.CommitID
	var commit *graveler.Commit
	for e, err := range m.store.Scan(ctx, part, kv.ScanOptions{Start: start, Limit: 2}) {
		if err != nil {
			return nil, "", storeErr(err, "find commit %s in repository %s", p, repo.RepositoryID)
		}
		if !strings.HasPrefix(string(e.Key), string(start)) {
			break
		}
		if found != "" {
			return nil, "", fmt.Errorf("%w: %s in repository %s", graveler.ErrRefAmbiguous, p, repo.RepositoryID)
		}
		id, err := keys.ParseRecord(keys.CommitsPrefix, e.Key)
		if err != nil {
			return nil, "", fmt.Errorf("%w: %w", ErrCorruptRecord, err)
		}
		if commit, err = decodeCommit(e.Value); err != nil {
			return nil, "", fmt.Errorf("commit %s of repository %s: %w", id, repo.RepositoryID, err)
		}
		found = graveler.CommitID(id)
	}
	if found == "" {
		return nil, "", fmt.Errorf("%w: prefix %s in repository %s", graveler.ErrCommitNotFound, p, repo.RepositoryID)
	}
	return commit, found, nil
}

// AddCommit stores a commit under ComputeCommitID and returns the id.
// Storing the same content again is a no-op. Fields the caller leaves zero
// are filled: Version (CurrentCommitVersion), CreationDate (now) and
// Generation (1 + the largest generation of the parents, which must exist).
// Fields the caller sets are kept, so a restore reproduces the original ids;
// CreationDate is truncated to CommitDatePrecision and stored in UTC.
func (m *Manager) AddCommit(ctx context.Context, repo *graveler.RepositoryRecord, commit graveler.Commit) (graveler.CommitID, error) {
	part, err := repoPartition(repo)
	if err != nil {
		return "", err
	}
	return m.addCommit(ctx, part, repo.RepositoryID, commit, "")
}

// RestoreCommit stores a commit of a dump under id, the id its content must
// hash to; a commit that does not is refused before anything is stored, so
// that a refused record leaves a bare repository bare. A commit without a
// creation date is refused too: AddCommit would date it now, and no id
// computed at restore could match the dump's. So is one whose metarange
// id the committed store could not read: a dump is input, and the ids the
// service writes itself are always valid.
func (m *Manager) RestoreCommit(ctx context.Context, repo *graveler.RepositoryRecord, id graveler.CommitID, commit graveler.Commit) error {
	part, err := repoPartition(repo)
	if err != nil {
		return err
	}
	if commit.CreationDate.IsZero() {
		return fmt.Errorf("%w: commit %s has no create_time", graveler.ErrInvalidArgument, id)
	}
	if err := graveler.ValidateMetaRangeID(commit.MetaRangeID); err != nil {
		return fmt.Errorf("commit %s: %w", id, err)
	}
	_, err = m.addCommit(ctx, part, repo.RepositoryID, commit, id)
	return err
}

// addCommit stores c; with want set, only if c hashes to it.
func (m *Manager) addCommit(ctx context.Context, part []byte, repo graveler.RepositoryID, c graveler.Commit, want graveler.CommitID) (graveler.CommitID, error) {
	if err := graveler.ValidateCommitContent(c.Message, c.Committer, c.Metadata); err != nil {
		return "", err
	}
	for _, p := range c.Parents {
		if err := graveler.ValidateCommitID(p); err != nil {
			return "", fmt.Errorf("parent: %w", err)
		}
	}
	if c.Generation < 0 || c.Version < 0 {
		return "", fmt.Errorf("%w: commit generation %d, version %d", graveler.ErrInvalidArgument, c.Generation, c.Version)
	}
	if c.Version == 0 {
		c.Version = graveler.CurrentCommitVersion
	}
	if c.CreationDate.IsZero() {
		c.CreationDate = m.now()
	}
	c.CreationDate = c.CreationDate.Truncate(CommitDatePrecision).UTC()
	if c.Generation == 0 {
		c.Generation = 1
		for _, p := range c.Parents {
			pc, err := m.getCommit(ctx, part, repo, p)
			if err != nil {
				return "", fmt.Errorf("parent of new commit: %w", err)
			}
			c.Generation = max(c.Generation, pc.Generation+1)
		}
	}
	if len(c.Metadata) == 0 {
		c.Metadata = nil
	}
	id := ComputeCommitID(&c)
	if want != "" && id != want {
		return "", fmt.Errorf("%w: commit %s hashes to %s", graveler.ErrInvalidArgument, want, id)
	}
	data, err := encodeCommit(&c)
	if err != nil {
		return "", err
	}
	if err := m.store.Set(ctx, part, keys.Commit(string(id)), data); err != nil {
		return "", storeErr(err, "add commit %s to repository %s", id, repo)
	}
	return id, nil
}

// commitQueue is a max-heap of commits by generation, then creation date,
// then id (for a deterministic order), with the ids it holds.
type commitQueue struct {
	items []*graveler.CommitRecord
	ids   map[graveler.CommitID]int // id -> caller's flags (FindMergeBase) or 0
}

func newCommitQueue() *commitQueue {
	return &commitQueue{ids: make(map[graveler.CommitID]int)}
}

func (q *commitQueue) Len() int { return len(q.items) }
func (q *commitQueue) Less(i, j int) bool {
	a, b := q.items[i], q.items[j]
	if a.Generation != b.Generation {
		return a.Generation > b.Generation
	}
	if !a.CreationDate.Equal(b.CreationDate) {
		return a.CreationDate.After(b.CreationDate)
	}
	return a.CommitID < b.CommitID
}
func (q *commitQueue) Swap(i, j int) { q.items[i], q.items[j] = q.items[j], q.items[i] }
func (q *commitQueue) Push(x any)    { q.items = append(q.items, x.(*graveler.CommitRecord)) }
func (q *commitQueue) Pop() any {
	n := len(q.items) - 1
	x := q.items[n]
	q.items[n] = nil
	q.items = q.items[:n]
	return x
}

func (q *commitQueue) push(rec *graveler.CommitRecord) { heap.Push(q, rec) }
func (q *commitQueue) pop() *graveler.CommitRecord     { return heap.Pop(q).(*graveler.CommitRecord) }

// Log walks history from a commit, newest first by generation, then
// creation date. It holds only the frontier of the walk: a commit is queued
// once, when the first of its children is visited, and since a parent's
// generation is below all its children's, every child is visited before the
// parent leaves the queue, so no set of visited commits is kept and memory
// does not grow with the length of history. FirstParent follows first
// parents only; commits created before Since end their line of the walk.
//
// The frontier is the whole state of the walk, so opts.Position can report
// it (the queue after the commit being yielded, plus that commit's
// parents) and opts.Resume can rebuild it: a resumed walk reads each
// pending commit once and then goes on exactly as the first would have,
// whatever the length of the history already walked.
func (m *Manager) Log(ctx context.Context, repo *graveler.RepositoryRecord, from graveler.CommitID, opts graveler.LogOptions) iter.Seq2[*graveler.CommitRecord, error] {
	return func(yield func(*graveler.CommitRecord, error) bool) {
		part, err := repoPartition(repo)
		if err != nil {
			yield(nil, err)
			return
		}
		start := []graveler.CommitID{from}
		if len(opts.Resume) > 0 {
			start = opts.Resume
		}
		for _, id := range start {
			if err := graveler.ValidateCommitID(id); err != nil {
				yield(nil, err)
				return
			}
		}
		q := newCommitQueue()
		enqueue := func(id graveler.CommitID) error {
			if _, ok := q.ids[id]; ok {
				return nil
			}
			c, err := m.getCommit(ctx, part, repo.RepositoryID, id)
			if err != nil {
				return err
			}
			q.ids[id] = 0
			q.push(&graveler.CommitRecord{CommitID: id, Commit: c})
			return nil
		}
		for _, id := range start {
			if err := enqueue(id); err != nil {
				yield(nil, err)
				return
			}
		}
		parentsOf := func(rec *graveler.CommitRecord) []graveler.CommitID {
			if opts.FirstParent && len(rec.Parents) > 1 {
				return rec.Parents[:1]
			}
			return rec.Parents
		}
		for q.Len() > 0 {
			rec := q.pop()
			delete(q.ids, rec.CommitID)
			if !opts.Since.IsZero() && rec.CreationDate.Before(opts.Since) {
				continue
			}
			if opts.Position != nil {
				opts.Position.Pending = func() []graveler.CommitID {
					pending := make([]graveler.CommitID, 0, len(q.ids)+len(rec.Parents))
					for id := range q.ids {
						pending = append(pending, id)
					}
					for _, p := range parentsOf(rec) {
						if _, ok := q.ids[p]; !ok && !slices.Contains(pending, p) {
							pending = append(pending, p)
						}
					}
					slices.Sort(pending)
					return pending
				}
			}
			ok := yield(rec, nil)
			if opts.Position != nil {
				opts.Position.Pending = nil
			}
			if !ok {
				return
			}
			for _, p := range parentsOf(rec) {
				if err := enqueue(p); err != nil {
					yield(nil, err)
					return
				}
			}
		}
	}
}

// FindMergeBase returns the best common ancestor of left and right: it
// walks both histories together, highest generation first, marking which
// side reached each commit; the first commit reached from both is a common
// ancestor with no other common ancestor below it in either walk (as
// lakeFS's FindLowestCommonAncestor). ErrNoMergeBase when they share none.
// The walk goes on, marking the ancestors of each common ancestor found,
// until every commit left is such an ancestor: any other common ancestor
// found meanwhile is a best one as well (a criss-cross history). If any
// of those has another tree than the first, no one of them serves as the
// base of a three-way merge (over one, what the other side changed back
// would be dropped): an *AmbiguousMergeBaseError naming them all.
func (m *Manager) FindMergeBase(ctx context.Context, repo *graveler.RepositoryRecord, left, right graveler.CommitID) (*graveler.CommitRecord, error) {
	part, err := repoPartition(repo)
	if err != nil {
		return nil, err
	}
	for _, id := range []graveler.CommitID{left, right} {
		if err := graveler.ValidateCommitID(id); err != nil {
			return nil, err
		}
	}
	const fromLeft, fromRight, below = 1, 2, 4
	q := newCommitQueue()
	reach := func(id graveler.CommitID, side int) error {
		if flags, ok := q.ids[id]; ok {
			q.ids[id] = flags | side
			return nil
		}
		c, err := m.getCommit(ctx, part, repo.RepositoryID, id)
		if err != nil {
			return err
		}
		q.ids[id] = side
		q.push(&graveler.CommitRecord{CommitID: id, Commit: c})
		return nil
	}
	if err := reach(left, fromLeft); err != nil {
		return nil, err
	}
	if err := reach(right, fromRight); err != nil {
		return nil, err
	}
	var base *graveler.CommitRecord
	var others []graveler.CommitID // best common ancestors with other trees
	// live counts the queued commits not below a common ancestor found.
	live := 0
	for _, f := range q.ids {
		if f&below == 0 {
			live++
		}
	}
	reachCounted := func(id graveler.CommitID, side int) error {
		before, queued := q.ids[id]
		if err := reach(id, side); err != nil {
			return err
		}
		after := q.ids[id]
		switch {
		case !queued && after&below == 0:
			live++
		case queued && before&below == 0 && after&below != 0:
			live--
		}
		return nil
	}
	for q.Len() > 0 && (base == nil || live > 0) {
		rec := q.pop()
		flags := q.ids[rec.CommitID]
		delete(q.ids, rec.CommitID)
		if flags&below == 0 {
			live--
		}
		if flags == fromLeft|fromRight {
			switch {
			case base == nil:
				base = rec
			case rec.MetaRangeID != base.MetaRangeID:
				others = append(others, rec.CommitID)
			}
			flags |= below
		}
		for _, p := range rec.Parents {
			if err := reachCounted(p, flags); err != nil {
				return nil, err
			}
		}
	}
	if base == nil {
		return nil, fmt.Errorf("%w: %s and %s in repository %s", graveler.ErrNoMergeBase, left, right, repo.RepositoryID)
	}
	if len(others) > 0 {
		return nil, &graveler.AmbiguousMergeBaseError{Left: left, Right: right, Bases: append([]graveler.CommitID{base.CommitID}, others...)}
	}
	return base, nil
}

// ListCommits walks every commit of the repository by id, after
// opts.After. With NotFirstParentOnly it lists only commits that are no
// commit's first parent (the tips of history lines, as garbage collection
// needs): that takes a first pass over all commits to collect the first
// parents, holding one id per commit in memory.
func (m *Manager) ListCommits(ctx context.Context, repo *graveler.RepositoryRecord, opts graveler.ListCommitsOptions) iter.Seq2[*graveler.CommitRecord, error] {
	return func(yield func(*graveler.CommitRecord, error) bool) {
		part, err := repoPartition(repo)
		if err != nil {
			yield(nil, err)
			return
		}
		var firstParents map[graveler.CommitID]struct{}
		if opts.NotFirstParentOnly {
			firstParents = make(map[graveler.CommitID]struct{})
			for rec, err := range m.scanCommits(ctx, part, repo.RepositoryID, "") {
				if err != nil {
					yield(nil, err)
					return
				}
				if len(rec.Parents) > 0 {
					firstParents[rec.Parents[0]] = struct{}{}
				}
			}
		}
		for rec, err := range m.scanCommits(ctx, part, repo.RepositoryID, opts.After) {
			if err != nil {
				yield(nil, err)
				return
			}
			if _, skip := firstParents[rec.CommitID]; skip {
				continue
			}
			if !yield(rec, nil) {
				return
			}
		}
	}
}

func (m *Manager) scanCommits(ctx context.Context, part []byte, repo graveler.RepositoryID, afterID string) iter.Seq2[*graveler.CommitRecord, error] {
	return func(yield func(*graveler.CommitRecord, error) bool) {
		for e, err := range m.store.Scan(ctx, part, kv.ScanOptions{Start: after(keys.CommitsPrefix, afterID)}) {
			if err != nil {
				yield(nil, storeErr(err, "list commits of repository %s", repo))
				return
			}
			if !strings.HasPrefix(string(e.Key), keys.CommitsPrefix) {
				return
			}
			id, err := keys.ParseRecord(keys.CommitsPrefix, e.Key)
			if err != nil {
				yield(nil, fmt.Errorf("%w: %w", ErrCorruptRecord, err))
				return
			}
			c, err := decodeCommit(e.Value)
			if err != nil {
				yield(nil, fmt.Errorf("commit %s of repository %s: %w", id, repo, err))
				return
			}
			if !yield(&graveler.CommitRecord{CommitID: graveler.CommitID(id), Commit: c}, nil) {
				return
			}
		}
	}
}
