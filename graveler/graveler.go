package graveler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"time"
)

// Graveler is the versioning service: it composes a RefManager, a
// StagingManager and a CommittedManager into the operations the API serves.
// Every operation first gets the repository, so a deleted repository is
// invisible. Safe for concurrent use; holds no locks across kv calls.
type Graveler struct {
	refs      RefManager
	staging   StagingManager
	committed CommittedManager
	cfg       Config
	cache     *branchCache
	repos     *repoCache
	// fencer and fstager are set when the writer's fence can be read in
	// the same round trip as a single-entry write.
	fencer  BranchFencer
	fstager FencedStager
	// freader is set when a Get can read its entry and its fence at one
	// instant, in one round trip.
	freader FencedReader
	// reads groups concurrent Gets of a branch (nil: each reads alone).
	reads *readGroups
	// ranger is set when the StagingManager stages range tombstones.
	ranger RangeStager
	// pace paces commits' reads of their staged entries.
	pace *pacer
}

// Config tunes the service. Zero values take the defaults noted.
type Config struct {
	// BranchCacheTTL bounds how stale the writer's first branch read may be
	// (default 100ms; negative disables the cache). A stale entry costs a
	// second write, never a lost one: the writer re-reads the branch after
	// writing and writes again if the staging token changed.
	BranchCacheTTL time.Duration
	// BranchCacheSize bounds the cached branches (default 10,000).
	BranchCacheSize int
	// MaxSealedTokens bounds a branch's sealed tokens (left by failed
	// commits, commits in flight and resets), give or take one: a commit
	// at the bound seals one more, and one that finds more than this (a
	// commit at the bound failed) first commits them without sealing
	// another (default 10).
	MaxSealedTokens int
	// OverridePublishWithin bounds the time from a reset's writing of an
	// override token to its publication in the branch record (default 5
	// minutes): a publication not sent by then is never sent. No branch
	// names the token before, so it must stay well inside the cleaner's
	// sweep grace for young partitions (one hour by default).
	OverridePublishWithin time.Duration
	// CommitRetries bounds the overlap-rule retries of a commit: each one
	// means another commit on the branch finished first (default 50).
	CommitRetries int
	// FenceRetries bounds how often a writer writes again, or a reader
	// reads again, because a commit changed the branch's staging tokens
	// meanwhile (default 1000). Each retry means another commit sealed the
	// token in the moment between the write and its check, so this is a
	// safety net against a storm of commits far faster than a write (seen
	// only with in-memory stores under the race detector), not a limit
	// a real workload meets; graveler_write_retries_total counts them.
	FenceRetries int
	// SeparateFenceRead keeps the writer's and the reader's fences a
	// separate, amortized branch read even when the stores can read it in
	// the same round trip as a single-entry write or a Get (the default on
	// etcd). For comparison and as an escape hatch; both are correct.
	SeparateFenceRead bool
	// UngroupedReads sends one etcd transaction per Get of a branch
	// instead of grouping the Gets of a branch that arrive while one is in
	// flight into the next (readgroup.go). For comparison; both are
	// linearizable.
	UngroupedReads bool
	// CommitReadRate bounds a commit's read of its staged entries to this
	// many entries a second (0: no bound). With CommitPacing.Off it is a
	// fixed rate, as fast as it goes when 0: a big commit then takes
	// longer, and the branch's writers, which never wait for a commit, no
	// longer queue behind it for CPU and store capacity; see
	// docs/performance.md for the trade measured.
	CommitReadRate float64
	// CommitPacing tunes the default adaptive pacing of that read by the
	// latency of the staged writes (see pace.go).
	CommitPacing CommitPacing
	// ListPageBudget bounds the stored records (staged entries and
	// tombstones, committed entries) one ListEntriesPage reads (default
	// DefaultListPageBudget; negative: no bound). A page that reaches it
	// among tombstones ends short, even empty, and says where to resume.
	ListPageBudget int
	// Now returns the current time (default time.Now), for tests.
	Now func() time.Time
}

// Defaults for Config's zero values.
const (
	DefaultBranchCacheTTL  = 100 * time.Millisecond
	DefaultBranchCacheSize = 10_000
	DefaultMaxSealedTokens = 10
	DefaultCommitRetries   = 50
	DefaultFenceRetries    = 1000
	DefaultListPageBudget  = 10_000
	// DefaultOverridePublishWithin is Config.OverridePublishWithin's
	// default.
	DefaultOverridePublishWithin = 5 * time.Minute
)

func (c Config) withDefaults() Config {
	if c.BranchCacheTTL == 0 {
		c.BranchCacheTTL = DefaultBranchCacheTTL
	}
	if c.BranchCacheSize <= 0 {
		c.BranchCacheSize = DefaultBranchCacheSize
	}
	if c.MaxSealedTokens <= 0 {
		c.MaxSealedTokens = DefaultMaxSealedTokens
	}
	if c.CommitRetries <= 0 {
		c.CommitRetries = DefaultCommitRetries
	}
	if c.OverridePublishWithin <= 0 {
		c.OverridePublishWithin = DefaultOverridePublishWithin
	}
	if c.FenceRetries <= 0 {
		c.FenceRetries = DefaultFenceRetries
	}
	if c.ListPageBudget == 0 {
		c.ListPageBudget = DefaultListPageBudget
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// New returns a Graveler. It starts no goroutines.
func New(refs RefManager, staging StagingManager, committed CommittedManager, cfg Config) *Graveler {
	cfg = cfg.withDefaults()
	g := &Graveler{refs: refs, staging: staging, committed: committed, cfg: cfg,
		cache: &branchCache{ttl: cfg.BranchCacheTTL, size: cfg.BranchCacheSize, m: map[string]branchCacheEntry{}, now: cfg.Now},
		repos: &repoCache{ttl: cfg.BranchCacheTTL, size: cfg.BranchCacheSize, m: map[RepositoryID]repoCacheEntry{}, now: cfg.Now},
		pace:  newPacer(cfg, wallClock{})}
	g.ranger, _ = staging.(RangeStager)
	if !cfg.SeparateFenceRead {
		f, ok1 := refs.(BranchFencer)
		s, ok2 := staging.(FencedStager)
		if ok1 && ok2 && s.FencedWrites() {
			g.fencer, g.fstager = f, s
		}
		if r, ok := staging.(FencedReader); ok1 && ok && r.FencedReads() {
			g.fencer, g.freader = f, r
			if !cfg.UngroupedReads {
				g.reads = newReadGroups()
			}
		}
	}
	return g
}

// FencedWrites reports whether single-entry writes read their fence in
// the same round trip (see Config.SeparateFenceRead).
func (g *Graveler) FencedWrites() bool { return g.fstager != nil }

// CommitParams describe a new commit.
type CommitParams struct {
	Committer string
	Message   string
	Metadata  Metadata
	// AllowEmpty permits a commit with no changes.
	AllowEmpty bool
}

// MergeParams describe a merge commit.
type MergeParams struct {
	CommitParams
	Strategy MergeStrategy
	// NoFastForward writes a merge commit even when the destination's head
	// is an ancestor of the source, which Merge otherwise fast-forwards.
	NoFastForward bool
}

// SetOptions condition a write.
type SetOptions struct {
	// IfAbsent fails with ErrEntryExists when the key is visible on the branch.
	IfAbsent bool
}

// ResetHardOptions condition moving a branch to another commit.
type ResetHardOptions struct {
	// ExpectedCommitID, when set, fails with ErrBranchHeadMoved unless the
	// branch's head is this commit (optimistic concurrency for clients).
	ExpectedCommitID CommitID
	// Force discards staged changes; without it a dirty branch is ErrDirtyBranch.
	Force bool
}

// ListEntriesOptions page an entry listing.
type ListEntriesOptions struct {
	Prefix Key
	// After lists strictly after this key (or common prefix).
	After Key
	// Delimiter groups keys sharing Prefix up to the next delimiter into one
	// common prefix ("directories"), as S3 does.
	Delimiter Key
	// Limit is the page size (required, > 0).
	Limit int
	// Resume makes After the ResumeAfter of a short page: listing
	// continues strictly after that key, also when it lies inside a
	// common prefix (which After alone would skip whole).
	Resume bool
	// MaxBytes, when positive, ends a page (More set) once its rows' keys,
	// identities and data reach this many bytes; a page holds at least one
	// row. It keeps a page of large values within what one response can
	// carry.
	MaxBytes int
}

// EntriesPage is one page of ListEntriesPage.
type EntriesPage struct {
	Rows []*EntryListing
	// More reports that entries may follow; the page may then hold fewer
	// rows than asked, even none.
	More bool
	// ResumeAfter, when set, is where the next page starts (pass it as
	// After with Resume): the page's read budget ran out among tombstones
	// after its last row. Otherwise the next page starts after the last
	// row's key.
	ResumeAfter Key
	// RecordsRead is how many stored records the page read (staged
	// entries and tombstones, committed entries), for measurement.
	RecordsRead int
}

// EntryListing is one row of a listing: an entry, or a common prefix.
type EntryListing struct {
	Key          Key
	Value        *Value
	CommonPrefix bool
}

// RefsRecord is one record of a refs dump: exactly one field is set.
type RefsRecord struct {
	Commit *CommitRecord
	Branch *BranchRecord
	Tag    *TagRecord
}

// branchCache holds recently read branches for the writer's first read
// only (seed 004). Keyed by repository incarnation, so a re-created
// repository never sees its predecessor's branches.
type branchCache struct {
	ttl  time.Duration
	size int
	now  func() time.Time
	mu   sync.Mutex
	m    map[string]branchCacheEntry
}

type branchCacheEntry struct {
	b  *Branch
	at time.Time
}

func branchCacheKey(repo *RepositoryRecord, id BranchID) string {
	return string(repo.RepositoryID) + "\x00" + string(repo.UniqueID) + "\x00" + string(id)
}

func cloneBranch(b *Branch) *Branch {
	c := *b
	c.SealedTokens = slices.Clone(b.SealedTokens)
	c.OverrideTokens = slices.Clone(b.OverrideTokens)
	return &c
}

func (c *branchCache) get(repo *RepositoryRecord, id BranchID) (*Branch, bool) {
	if c.ttl < 0 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[branchCacheKey(repo, id)]
	if !ok || c.now().Sub(e.at) > c.ttl {
		return nil, false
	}
	return cloneBranch(e.b), true
}

func (c *branchCache) put(repo *RepositoryRecord, id BranchID, b *Branch) {
	if c.ttl < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.size {
		// Entries live for a fraction of a second: dropping the lot is
		// cheaper than tracking recency, and only costs a few re-reads.
		clear(c.m)
	}
	c.m[branchCacheKey(repo, id)] = branchCacheEntry{b: cloneBranch(b), at: c.now()}
}

func (c *branchCache) forget(repo *RepositoryRecord, id BranchID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, branchCacheKey(repo, id))
}

// repoCache holds recently read repositories for the writer's first step
// only; the writer's fence re-reads the repository, so a stale entry can
// delay a write's refusal by one round trip, never acknowledge a write
// into a deleted repository.
type repoCache struct {
	ttl  time.Duration
	size int
	now  func() time.Time
	mu   sync.Mutex
	m    map[RepositoryID]repoCacheEntry
}

type repoCacheEntry struct {
	r  RepositoryRecord
	at time.Time
}

func (c *repoCache) get(id RepositoryID) (*RepositoryRecord, bool) {
	if c.ttl < 0 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	if !ok || c.now().Sub(e.at) > c.ttl {
		return nil, false
	}
	r := *e.r.Repository
	return &RepositoryRecord{RepositoryID: id, Repository: &r}, true
}

func (c *repoCache) put(r *RepositoryRecord) {
	if c.ttl < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.size {
		clear(c.m)
	}
	cp := *r.Repository
	c.m[r.RepositoryID] = repoCacheEntry{r: RepositoryRecord{RepositoryID: r.RepositoryID, Repository: &cp}, at: c.now()}
}

func (c *repoCache) forget(id RepositoryID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, id)
}

// ---- repositories ----

// initialCommit is the empty-tree root of every new repository.
func (g *Graveler) initialCommit() Commit {
	return Commit{
		Version:      CurrentCommitVersion,
		Committer:    "graveler",
		Message:      "Repository created",
		CreationDate: g.cfg.Now(),
		Generation:   1,
	}
}

// CreateRepository creates a repository on a storage namespace no other
// repository holds (ErrNamespaceInUse), after proving it writable
// (ErrNamespaceUnwritable).
func (g *Graveler) CreateRepository(ctx context.Context, id RepositoryID, ns StorageNamespace, defaultBranch BranchID) (*RepositoryRecord, error) {
	if err := validateNewRepository(id, ns, defaultBranch); err != nil {
		return nil, err
	}
	return g.refs.CreateRepository(ctx, id, Repository{StorageNamespace: ns, DefaultBranchID: defaultBranch}, g.initialCommit(), g.namespaceCheck()...)
}

// CreateBareRepository creates a repository with no commit or branch, to
// restore a refs dump into; its namespace is claimed and checked as
// CreateRepository's.
func (g *Graveler) CreateBareRepository(ctx context.Context, id RepositoryID, ns StorageNamespace, defaultBranch BranchID) (*RepositoryRecord, error) {
	if err := validateNewRepository(id, ns, defaultBranch); err != nil {
		return nil, err
	}
	return g.refs.CreateBareRepository(ctx, id, Repository{StorageNamespace: ns, DefaultBranchID: defaultBranch}, g.namespaceCheck()...)
}

// namespaceCheck writes NamespaceMarker into a new repository's namespace
// and reads it back, when the committed store can. It runs after the
// namespace is claimed, so no other create writes there meanwhile.
func (g *Graveler) namespaceCheck() []CreateOption {
	nc, ok := g.committed.(NamespaceChecker)
	if !ok {
		return nil
	}
	return []CreateOption{WithNamespaceCheck(func(ctx context.Context, repo *RepositoryRecord) error {
		marker, err := json.Marshal(struct {
			Repository RepositoryID `json:"repository"`
			UniqueID   UniqueID     `json:"unique_id"`
			Created    time.Time    `json:"created"`
		}{repo.RepositoryID, repo.UniqueID, repo.CreationDate})
		if err != nil {
			return err
		}
		err = nc.CheckNamespace(ctx, repo.StorageNamespace, NamespaceMarker, marker)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("check storage namespace %q: %w", repo.StorageNamespace, ctx.Err())
		case errors.Is(err, ErrInvalidStorageNamespace):
			return err
		}
		// The cause is kept as text: a blob store's error may wrap a
		// category (a read-back that found nothing is ErrNotFound) that
		// must not decide the status of a namespace that does not work.
		return fmt.Errorf("%w: %q: write and read back %s: %v", ErrNamespaceUnwritable, repo.StorageNamespace, NamespaceMarker, err)
	})}
}

func validateNewRepository(id RepositoryID, ns StorageNamespace, defaultBranch BranchID) error {
	if err := ValidateRepositoryID(id); err != nil {
		return err
	}
	if _, err := NormalizeStorageNamespace(ns); err != nil {
		return err
	}
	return ValidateBranchID(defaultBranch)
}

func (g *Graveler) GetRepository(ctx context.Context, id RepositoryID) (*RepositoryRecord, error) {
	return g.refs.GetRepository(ctx, id)
}

func (g *Graveler) ListRepositories(ctx context.Context, opts ListOptions) iter.Seq2[*RepositoryRecord, error] {
	return g.refs.ListRepositories(ctx, opts)
}

// DeleteRepository makes the repository invisible at once; its data is
// reclaimed by the cleaner.
func (g *Graveler) DeleteRepository(ctx context.Context, id RepositoryID) error {
	g.repos.forget(id)
	return g.refs.DeleteRepository(ctx, id)
}

// ---- branches ----

// CreateBranch creates a branch at the commit source resolves to (a branch
// source contributes its head commit, not its staged entries).
func (g *Graveler) CreateBranch(ctx context.Context, repoID RepositoryID, branch BranchID, source Ref) (*BranchRecord, error) {
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return nil, err
	}
	if err := ValidateBranchID(branch); err != nil {
		return nil, err
	}
	res, err := g.resolve(ctx, repo, source)
	if err != nil {
		return nil, err
	}
	b := Branch{CommitID: res.CommitID, StagingToken: g.refs.NewStagingToken(repoID)}
	if err := g.refs.CreateBranch(ctx, repo, branch, b); err != nil {
		return nil, err
	}
	return &BranchRecord{BranchID: branch, Branch: &b}, nil
}

func (g *Graveler) GetBranch(ctx context.Context, repoID RepositoryID, branch BranchID) (*BranchRecord, error) {
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return nil, err
	}
	b, err := g.refs.GetBranch(ctx, repo, branch)
	if err != nil {
		return nil, err
	}
	return &BranchRecord{BranchID: branch, Branch: b}, nil
}

func (g *Graveler) ListBranches(ctx context.Context, repoID RepositoryID, opts ListBranchesOptions) iter.Seq2[*BranchRecord, error] {
	return func(yield func(*BranchRecord, error) bool) {
		repo, err := g.refs.GetRepository(ctx, repoID)
		if err != nil {
			yield(nil, err)
			return
		}
		for b, err := range g.refs.ListBranches(ctx, repo, opts) {
			if !yield(b, err) || err != nil {
				return
			}
		}
	}
}

// DeleteBranch deletes a branch; its staged entries go to the cleaner.
func (g *Graveler) DeleteBranch(ctx context.Context, repoID RepositoryID, branch BranchID) error {
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return err
	}
	g.cache.forget(repo, branch)
	return g.refs.DeleteBranch(ctx, repo, branch)
}

// ---- tags ----

func (g *Graveler) CreateTag(ctx context.Context, repoID RepositoryID, tag TagID, ref Ref) (CommitID, error) {
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return "", err
	}
	if err := ValidateTagID(tag); err != nil {
		return "", err
	}
	res, err := g.resolve(ctx, repo, ref)
	if err != nil {
		return "", err
	}
	if err := g.refs.CreateTag(ctx, repo, tag, res.CommitID); err != nil {
		return "", err
	}
	return res.CommitID, nil
}

func (g *Graveler) GetTag(ctx context.Context, repoID RepositoryID, tag TagID) (CommitID, error) {
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return "", err
	}
	return g.refs.GetTag(ctx, repo, tag)
}

func (g *Graveler) DeleteTag(ctx context.Context, repoID RepositoryID, tag TagID) error {
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return err
	}
	return g.refs.DeleteTag(ctx, repo, tag)
}

func (g *Graveler) ListTags(ctx context.Context, repoID RepositoryID, opts ListOptions) iter.Seq2[*TagRecord, error] {
	return func(yield func(*TagRecord, error) bool) {
		repo, err := g.refs.GetRepository(ctx, repoID)
		if err != nil {
			yield(nil, err)
			return
		}
		for t, err := range g.refs.ListTags(ctx, repo, opts) {
			if !yield(t, err) || err != nil {
				return
			}
		}
	}
}

// ---- refs and commits ----

func (g *Graveler) resolve(ctx context.Context, repo *RepositoryRecord, ref Ref) (*ResolvedRef, error) {
	raw, err := g.refs.ParseRef(ref)
	if err != nil {
		return nil, err
	}
	return g.refs.ResolveRawRef(ctx, repo, raw)
}

// Dereference resolves a reference expression.
func (g *Graveler) Dereference(ctx context.Context, repoID RepositoryID, ref Ref) (*ResolvedRef, error) {
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return nil, err
	}
	return g.resolve(ctx, repo, ref)
}

// GetCommit returns the commit ref resolves to.
func (g *Graveler) GetCommit(ctx context.Context, repoID RepositoryID, ref Ref) (*CommitRecord, error) {
	repo, err := g.refs.GetRepository(ctx, repoID)
	if err != nil {
		return nil, err
	}
	res, err := g.resolve(ctx, repo, ref)
	if err != nil {
		return nil, err
	}
	c, err := g.refs.GetCommit(ctx, repo, res.CommitID)
	if err != nil {
		return nil, err
	}
	return &CommitRecord{CommitID: res.CommitID, Commit: c}, nil
}

// Log streams the history of the commit ref resolves to, newest first.
// With opts.Resume it continues an earlier walk and ref is not resolved
// again: the walk goes on from commits, which never change, whatever the
// ref points at now.
func (g *Graveler) Log(ctx context.Context, repoID RepositoryID, ref Ref, opts LogOptions) iter.Seq2[*CommitRecord, error] {
	return func(yield func(*CommitRecord, error) bool) {
		repo, err := g.refs.GetRepository(ctx, repoID)
		if err != nil {
			yield(nil, err)
			return
		}
		var from CommitID
		if len(opts.Resume) == 0 {
			res, err := g.resolve(ctx, repo, ref)
			if err != nil {
				yield(nil, err)
				return
			}
			from = res.CommitID
		}
		for c, err := range g.refs.Log(ctx, repo, from, opts) {
			if !yield(c, err) || err != nil {
				return
			}
		}
	}
}

func (g *Graveler) ListCommits(ctx context.Context, repoID RepositoryID, opts ListCommitsOptions) iter.Seq2[*CommitRecord, error] {
	return func(yield func(*CommitRecord, error) bool) {
		repo, err := g.refs.GetRepository(ctx, repoID)
		if err != nil {
			yield(nil, err)
			return
		}
		for c, err := range g.refs.ListCommits(ctx, repo, opts) {
			if !yield(c, err) || err != nil {
				return
			}
		}
	}
}

// tokensStillHeld is the reader's fence: it reports whether every token
// read from (read's) is still on the branch in a later read (cur). A token
// is dropped only after a commit or reset removed it from the branch, so
// if none was removed, nothing read can have been dropped mid-read. A
// token sealed meanwhile is still held; the fresh token only holds writes
// that did not complete before the read began, which a read may miss.
func tokensStillHeld(read, cur *Branch) bool {
	held := tokens(cur)
	for _, t := range tokens(read) {
		if !slices.Contains(held, t) {
			return false
		}
	}
	return true
}

// tokens returns a branch's staging tokens, newest first.
func tokens(b *Branch) []StagingToken {
	return append([]StagingToken{b.StagingToken}, b.SealedTokens...)
}

// changeTokens returns the tokens of b that stage changes (all but its
// override tokens), newest first.
func changeTokens(b *Branch) []StagingToken {
	if len(b.OverrideTokens) == 0 {
		return tokens(b)
	}
	out := []StagingToken{b.StagingToken}
	for _, st := range b.SealedTokens {
		if !slices.Contains(b.OverrideTokens, st) {
			out = append(out, st)
		}
	}
	return out
}

// sealedChanges reports whether b has a sealed token that stages changes:
// a commit in flight may be reading it.
func sealedChanges(b *Branch) bool {
	return len(b.SealedTokens) > len(b.OverrideTokens)
}

// liveOverrides returns the override tokens of b still among its sealed
// tokens, in their order there.
func liveOverrides(b *Branch) []StagingToken {
	var out []StagingToken
	for _, st := range b.SealedTokens {
		if slices.Contains(b.OverrideTokens, st) {
			out = append(out, st)
		}
	}
	return out
}

var errFenceRetries = errors.New("branch kept changing while it was read")

func (g *Graveler) fenceExhausted(repo *RepositoryRecord, branch BranchID) error {
	return fmt.Errorf("%w: %s of repository %s: %w", ErrTooManyRetries, branch, repo.RepositoryID, errFenceRetries)
}
