package graveler

import (
	"context"
	"iter"
	"time"

	"graveler/kv"
)

// The interfaces below are owned by the Graveler service, their consumer.
// ref.Manager, staging.Manager and committed.Manager implement them.

// ListOptions page a listing: entries strictly after After, in order.
type ListOptions struct {
	After string
}

// BranchListOrder orders ListBranches.
type BranchListOrder int

const (
	BranchListByName BranchListOrder = iota
	BranchListByCommitID
)

// ListBranchesOptions page and order ListBranches. With BranchListByCommitID,
// After is "<commit id>/<branch id>" of the last branch returned.
type ListBranchesOptions struct {
	After string
	Order BranchListOrder
}

// LogOptions shape a commit log.
type LogOptions struct {
	// FirstParent follows only first parents.
	FirstParent bool
	// Since stops at commits created before it (zero: no bound).
	Since time.Time
	// Resume, when not empty, continues an earlier walk with the same
	// FirstParent and Since from the commits it had still to visit
	// (LogPosition.Pending); the walk's start commit is then ignored.
	Resume []CommitID
	// Position, when set, lets the consumer see where the walk stands.
	Position *LogPosition
}

// LogPosition is where a Log walk stands, so that a consumer can stop and
// later resume it without walking again the history it has seen.
type LogPosition struct {
	// Pending is set by the walk while it yields a commit (nil otherwise,
	// and nil from a walk that cannot resume). It returns the commits left
	// to visit after that one, which LogOptions.Resume takes; their number
	// is the width of history at that point, not its length.
	Pending func() []CommitID
}

// ListCommitsOptions shape a listing of all commits of a repository.
type ListCommitsOptions struct {
	After string
	// NotFirstParentOnly lists only commits that are no commit's first parent.
	NotFirstParentOnly bool
}

// BranchUpdateFunc computes a branch's new record from its current one. It
// may be called more than once (after a lost compare-and-swap). Returning
// ErrSkipUpdate ends the update without writing.
type BranchUpdateFunc func(*Branch) (*Branch, error)

// NamespaceCheck proves that a new repository can use its storage
// namespace. CreateRepository runs it once the namespace is claimed for the
// new incarnation and before any of its refs are written; an error
// abandons the creation and is returned as it is.
type NamespaceCheck func(ctx context.Context, repo *RepositoryRecord) error

// CreateOptions are what CreateOption set.
type CreateOptions struct {
	// CheckNamespace, if set, is run as NamespaceCheck says.
	CheckNamespace NamespaceCheck
}

// CreateOption tunes RefManager.CreateRepository and CreateBareRepository.
type CreateOption func(*CreateOptions)

// WithNamespaceCheck runs check during a create (see NamespaceCheck).
func WithNamespaceCheck(check NamespaceCheck) CreateOption {
	return func(o *CreateOptions) { o.CheckNamespace = check }
}

// RefManager stores repositories, branches, tags and commits.
type RefManager interface {
	// CreateRepository creates a repository with its initial commit (empty
	// tree) and default branch: initial -> namespace claimed -> namespace
	// checked -> commit -> branch -> active. A storage namespace is held
	// by one repository at a time, from its creation until the cleaner
	// has reclaimed it after its delete: ErrNamespaceInUse otherwise.
	CreateRepository(ctx context.Context, id RepositoryID, repo Repository, initialCommit Commit, opts ...CreateOption) (*RepositoryRecord, error)
	// CreateBareRepository creates a repository with no branch or commit,
	// for RestoreRefs: initial -> namespace claimed -> namespace checked
	// -> active.
	CreateBareRepository(ctx context.Context, id RepositoryID, repo Repository, opts ...CreateOption) (*RepositoryRecord, error)
	// GetRepository returns an active repository, ErrRepositoryDeleting
	// while one is being deleted, or ErrRepositoryNotFound.
	GetRepository(ctx context.Context, id RepositoryID) (*RepositoryRecord, error)
	// ListRepositories walks active repositories by name after opts.After.
	ListRepositories(ctx context.Context, opts ListOptions) iter.Seq2[*RepositoryRecord, error]
	// DeleteRepository marks the repository deleting, queues its partition
	// for the cleaner and removes its record. The name is reusable at once.
	DeleteRepository(ctx context.Context, id RepositoryID) error

	// ParseRef parses a reference expression.
	ParseRef(ref Ref) (RawRef, error)
	// ResolveRawRef resolves a parsed reference within repo.
	ResolveRawRef(ctx context.Context, repo *RepositoryRecord, raw RawRef) (*ResolvedRef, error)

	// GetBranch reads a branch from the store (amortized: concurrent reads of
	// one branch share one kv read; never served from a cache).
	GetBranch(ctx context.Context, repo *RepositoryRecord, id BranchID) (*Branch, error)
	// CreateBranch creates a branch, or ErrBranchExists. The record's
	// Change is ChangeRestore when branch.Change says so, else
	// ChangeCreate.
	CreateBranch(ctx context.Context, repo *RepositoryRecord, id BranchID, branch Branch) error
	// BranchUpdate applies f in a read-modify-SetIf loop with bounded,
	// jittered retries; ErrTooManyRetries when it gives up. f gets the
	// branch with Change ChangeNone and sets it when its write is a
	// change of its own (a head moved, staged changes discarded); such a
	// write is the operation's decisive one (kv.Effect).
	BranchUpdate(ctx context.Context, repo *RepositoryRecord, id BranchID, f BranchUpdateFunc) error
	// DeleteBranch deletes a branch and queues its tokens for the cleaner.
	DeleteBranch(ctx context.Context, repo *RepositoryRecord, id BranchID) error
	// ListBranches walks branches in the order opts.Order names.
	ListBranches(ctx context.Context, repo *RepositoryRecord, opts ListBranchesOptions) iter.Seq2[*BranchRecord, error]

	GetTag(ctx context.Context, repo *RepositoryRecord, id TagID) (CommitID, error)
	// CreateTag creates a tag: ErrTagExists, or ErrAlreadyExists when a
	// branch of that name exists (it would hide the tag).
	CreateTag(ctx context.Context, repo *RepositoryRecord, id TagID, commitID CommitID) error
	// RestoreTag is CreateTag for RestoreRefs: a dump copies a repository
	// as it was, including a tag that a branch of the same name hides
	// (possible before such names were refused).
	RestoreTag(ctx context.Context, repo *RepositoryRecord, id TagID, commitID CommitID) error
	DeleteTag(ctx context.Context, repo *RepositoryRecord, id TagID) error
	ListTags(ctx context.Context, repo *RepositoryRecord, opts ListOptions) iter.Seq2[*TagRecord, error]

	// GetCommit reads a commit by full id.
	GetCommit(ctx context.Context, repo *RepositoryRecord, id CommitID) (*Commit, error)
	// GetCommitByPrefix finds the one commit whose id starts with prefix.
	GetCommitByPrefix(ctx context.Context, repo *RepositoryRecord, prefix CommitID) (*Commit, CommitID, error)
	// AddCommit stores a commit under the hash of its content and returns
	// the id; adding the same commit again is a no-op.
	AddCommit(ctx context.Context, repo *RepositoryRecord, commit Commit) (CommitID, error)
	// RestoreCommit is AddCommit for RestoreRefs: it stores nothing unless
	// the commit, as given (a creation date required), hashes to id.
	RestoreCommit(ctx context.Context, repo *RepositoryRecord, id CommitID, commit Commit) error
	// FindMergeBase returns the best common ancestor of two commits.
	FindMergeBase(ctx context.Context, repo *RepositoryRecord, left, right CommitID) (*CommitRecord, error)
	// Log walks history from a commit, by generation then date, newest
	// first, or resumes an earlier walk (LogOptions.Resume).
	Log(ctx context.Context, repo *RepositoryRecord, from CommitID, opts LogOptions) iter.Seq2[*CommitRecord, error]
	// ListCommits walks every commit of a repository by id.
	ListCommits(ctx context.Context, repo *RepositoryRecord, opts ListCommitsOptions) iter.Seq2[*CommitRecord, error]
	// DeleteStagingTokens queues staging tokens for the cleaner.
	DeleteStagingTokens(ctx context.Context, tokens []StagingToken) error
	// NewStagingToken returns a fresh, unique staging token for a branch of repo.
	NewStagingToken(repo RepositoryID) StagingToken
}

// StagingManager stores uncommitted entries, one partition per token.
type StagingManager interface {
	// Get returns a staged value; a nil *Value with nil error is a tombstone;
	// ErrEntryNotFound when nothing is staged for key.
	Get(ctx context.Context, st StagingToken, key Key) (*Value, error)
	// Set stages value for key; a nil value stages a tombstone.
	Set(ctx context.Context, st StagingToken, key Key, value *Value) error
	// SetBatch stages many records (nil Value: tombstone); not atomic.
	// *PartlyStagedError when the token was retired part way.
	SetBatch(ctx context.Context, st StagingToken, records []*ValueRecord) error
	// Sealed reports whether st carries its seal marker: a branch update
	// stopped naming it, and no staged write applies to it since.
	Sealed(ctx context.Context, st StagingToken) (bool, error)
	// DropKey removes whatever is staged for key (not a tombstone:
	// nothing); ErrRangeInScope while a range tombstone of st covers key.
	DropKey(ctx context.Context, st StagingToken, key Key) error
	// DropByPrefix removes everything staged under prefix, key by key,
	// with no check of the token's range tombstones (resets use DropKey
	// and RangeStager.ResetPrefix, which have one).
	DropByPrefix(ctx context.Context, st StagingToken, prefix Key) error
	// Drop removes a whole token's partition, in bounded chunks.
	Drop(ctx context.Context, st StagingToken) error
	// List iterates a token's entries (tombstones included) in key order.
	List(ctx context.Context, st StagingToken) (ValueIterator, error)
}

// RangeStager is an optional ability of a StagingManager: range
// tombstones, one record deleting every key under a prefix (DeletePrefix).
// A token's range tombstone deletes the keys under its prefix that the
// token staged before it (a key staged after it survives), and every key
// under its prefix in older tokens and in the head.
type RangeStager interface {
	// DeletePrefix stages a range tombstone for prefix ("" deletes every
	// key). ErrTooManyRangeTombstones when the token holds its limit.
	DeletePrefix(ctx context.Context, st StagingToken, prefix Key) error
	// ResetPrefix stages a reset range for prefix: what the token staged
	// under it before reads as never staged (reads fall through to older
	// tokens and the head, which it leaves alone); a key staged after it
	// survives. One record write, whatever the number of keys, counted
	// against the same limit as DeletePrefix (ErrTooManyRangeTombstones).
	// ErrRangeInScope when a range tombstone of the token reaches into
	// prefix (either prefix starts with the other), ErrStagingTokenSealed
	// in a retired token; nothing is written then.
	ResetPrefix(ctx context.Context, st StagingToken, prefix Key) error
	// ListRanged is List, and the prefixes of the token's range
	// tombstones (not of its reset ranges), read before its entries. The
	// iterator returns a tombstone for a key the token staged before one
	// of them, and skips a key the token staged before a reset range.
	ListRanged(ctx context.Context, st StagingToken) (ValueIterator, []Key, error)
}

// RecordCounter is an optional ability of an iterator: how many stored
// records it has read so far, including those it did not return.
type RecordCounter interface {
	RecordsRead() int
}

// FencedStager is an optional ability of a StagingManager: stage one
// entry and, in the same round trip, read kv records no earlier than the
// write took effect (kv.SetAndRead). With a RefManager that is a
// BranchFencer it folds the writer's fence into the write.
type FencedStager interface {
	// FencedWrites reports whether SetAndRead is one round trip, so worth
	// using instead of a write and an amortized branch read.
	FencedWrites() bool
	// SetAndRead stages value for key (nil: a tombstone) and reads reads.
	SetAndRead(ctx context.Context, st StagingToken, key Key, value *Value, reads []kv.KeyRef) ([]kv.Entry, error)
}

// FencedReader is an optional ability of a StagingManager: name the kv
// record of a staged entry so that it can be read together with the
// branch and repository records, at one instant (kv.GetMany), and decode it.
// With a RefManager that is a BranchFencer it makes a Get one round trip
// with its fence.
type FencedReader interface {
	// FencedReads reports whether ReadAt reads at one instant in one round
	// trip (kv.MultiGetter).
	FencedReads() bool
	// EntryRef names the record of key in token st.
	EntryRef(st StagingToken, key Key) (kv.KeyRef, error)
	// ParseEntry decodes what ReadAt found at EntryRef: the value, nil for
	// a staged tombstone, or ErrEntryNotFound when nothing is staged.
	ParseEntry(st StagingToken, key Key, got kv.Entry) (*Value, error)
	// ReadAt reads records at one instant.
	ReadAt(ctx context.Context, reads []kv.KeyRef) ([]kv.Entry, error)
}

// BranchFencer is an optional ability of a RefManager: name the kv records
// of a repository and of one of its branches, and parse what was read of
// them, so that a staged write can read them in the same round trip.
type BranchFencer interface {
	// BranchFenceReads returns the repository's record, then the branch's.
	BranchFenceReads(repo *RepositoryRecord, id BranchID) ([]kv.KeyRef, error)
	// ParseBranchFence checks what was read of BranchFenceReads: the
	// repository still active and the same incarnation as repo
	// (ErrRepositoryDeleting while it is being deleted,
	// ErrRepositoryNotFound otherwise), the branch present
	// (ErrBranchNotFound otherwise). It returns both as read.
	ParseBranchFence(repo *RepositoryRecord, id BranchID, got []kv.Entry) (*RepositoryRecord, *Branch, error)
}

// CommittedManager stores committed entries as ranges and metaranges in the
// blob store under a storage namespace. MetaRangeID "" is the empty tree and
// is accepted everywhere a metarange is.
type CommittedManager interface {
	// Get returns a committed value or ErrEntryNotFound.
	Get(ctx context.Context, ns StorageNamespace, mr MetaRangeID, key Key) (*Value, error)
	// List iterates a metarange in key order; SeekGE to start elsewhere.
	List(ctx context.Context, ns StorageNamespace, mr MetaRangeID) (ValueIterator, error)
	// Diff iterates the differences from left to right, skipping shared ranges.
	Diff(ctx context.Context, ns StorageNamespace, left, right MetaRangeID) (DiffIterator, error)
	// Merge three-way merges source into destination over base.
	Merge(ctx context.Context, ns StorageNamespace, destination, source, base MetaRangeID, strategy MergeStrategy) (MetaRangeID, DiffSummary, error)
	// Apply writes base with changes (sorted, nil Value = delete) applied,
	// passing untouched ranges through by reference. ErrNoChanges when
	// nothing changed and !opts.AllowEmpty.
	Apply(ctx context.Context, ns StorageNamespace, base MetaRangeID, changes ValueIterator, opts ApplyOptions) (MetaRangeID, DiffSummary, error)
	// WriteMetaRangeByIterator writes a metarange from any sorted iterator
	// (tombstones are an error).
	WriteMetaRangeByIterator(ctx context.Context, ns StorageNamespace, it ValueIterator) (MetaRangeID, error)
	// Exists reports whether a metarange is stored.
	Exists(ctx context.Context, ns StorageNamespace, mr MetaRangeID) (bool, error)
}

// NamespaceChecker is an optional ability of a CommittedManager: write an
// object under a storage namespace and read it back, to prove the
// namespace reachable, writable and readable before a repository takes
// it. Errors are the blob store's, unwrapped: ErrInvalidStorageNamespace
// for a namespace it cannot open, otherwise whatever the write or read
// returned.
type NamespaceChecker interface {
	CheckNamespace(ctx context.Context, ns StorageNamespace, name string, data []byte) error
}

// NamespaceMarkerPrefix begins the names of objects Graveler keeps in a
// storage namespace for itself, outside committed data: collecting
// unreferenced committed objects must never remove them.
const NamespaceMarkerPrefix = "_graveler/"

// NamespaceMarker is the object a create writes into its storage
// namespace and reads back (NamespaceChecker), and leaves there: it names
// the repository that holds the namespace, for an operator looking at a
// bucket. The last create to take the namespace wrote it.
const NamespaceMarker = NamespaceMarkerPrefix + "repository"

// ApplyOptions shape Apply.
type ApplyOptions struct {
	AllowEmpty bool
}
