package graveler

import (
	"bytes"
	"fmt"
	"time"
)

// Typed identifiers, used on every package boundary.
type (
	RepositoryID     string
	BranchID         string
	TagID            string
	CommitID         string
	Ref              string
	StagingToken     string
	MetaRangeID      string
	RangeID          string
	StorageNamespace string
	// UniqueID distinguishes incarnations of a repository name.
	UniqueID string
)

func (id RepositoryID) String() string { return string(id) }
func (id BranchID) String() string     { return string(id) }
func (id TagID) String() string        { return string(id) }
func (id CommitID) String() string     { return string(id) }
func (r Ref) String() string           { return string(r) }
func (t StagingToken) String() string  { return string(t) }

// Key is an entry's key: arbitrary non-empty bytes, ordered bytewise.
type Key []byte

func (k Key) String() string       { return string(k) }
func (k Key) Copy() Key            { return append(Key(nil), k...) }
func (k Key) Compare(o Key) int    { return bytes.Compare(k, o) }
func (k Key) Equal(o Key) bool     { return bytes.Equal(k, o) }
func (k Key) HasPrefix(p Key) bool { return bytes.HasPrefix(k, p) }

// Metadata is a commit's user metadata.
type Metadata map[string]string

// Value is an entry's content: Identity identifies the content (two values
// with the same identity are the same change, which makes re-writes during
// a commit idempotent), Data is opaque to graveler.
type Value struct {
	Identity []byte
	Data     []byte
}

// ValueRecord is an entry; a nil Value is a tombstone (a staged delete).
type ValueRecord struct {
	Key Key
	*Value
}

// IsTombstone reports whether r is a staged delete.
func (r *ValueRecord) IsTombstone() bool { return r.Value == nil }

// RepositoryState is a repository's place in its lifecycle (seed 003).
type RepositoryState int

const (
	// RepositoryStateInitial: being created; invisible until active.
	RepositoryStateInitial RepositoryState = iota
	// RepositoryStateActive: usable.
	RepositoryStateActive
	// RepositoryStateDeleting: being deleted; invisible.
	RepositoryStateDeleting
)

func (s RepositoryState) String() string {
	switch s {
	case RepositoryStateInitial:
		return "initial"
	case RepositoryStateActive:
		return "active"
	case RepositoryStateDeleting:
		return "deleting"
	}
	return fmt.Sprintf("RepositoryState(%d)", int(s))
}

// Repository is a repository record.
type Repository struct {
	StorageNamespace StorageNamespace
	DefaultBranchID  BranchID
	CreationDate     time.Time
	State            RepositoryState
	// UniqueID names this incarnation's partition.
	UniqueID UniqueID
}

type RepositoryRecord struct {
	RepositoryID RepositoryID
	*Repository
}

// Branch is a branch record: its head commit, the staging token taking new
// writes, and the sealed tokens of commits in flight (newest first).
type Branch struct {
	CommitID     CommitID
	StagingToken StagingToken
	SealedTokens []StagingToken
	// OverrideTokens are the sealed tokens a reset of a key or a prefix
	// wrote (a subset of SealedTokens). Each stages, for the keys the
	// reset discarded, the value they had under the discarded changes: a
	// correction of what lies below it, not a change, so later resets
	// keep it and a reset of everything carries it over. A commit applies
	// it like any sealed token, after which the head carries it.
	OverrideTokens []StagingToken
	// Change is what the write that stored this version did, for the change
	// feed. A BranchUpdateFunc sets it on the branch it returns whenever its
	// write is a user-visible change (ChangeNone for sealing and releasing
	// staging tokens); it is never inherited from the version read.
	Change BranchChange
}

// BranchChange names the operation that wrote a branch version. The
// values are stored in branch records: never renumber them.
type BranchChange int32

const (
	// ChangeNone: an internal step (sealing or releasing a staging token).
	ChangeNone BranchChange = 0
	// ChangeCreate: CreateBranch or a repository's creation.
	ChangeCreate BranchChange = 1
	// ChangeCommit: Commit moved the head.
	ChangeCommit BranchChange = 2
	// ChangeMerge: Merge moved the head (a merge commit or a fast-forward).
	ChangeMerge BranchChange = 3
	// ChangeRevert: Revert moved the head.
	ChangeRevert BranchChange = 4
	// ChangeCherryPick: CherryPick moved the head.
	ChangeCherryPick BranchChange = 5
	// ChangeReset: Reset discarded every staged change.
	ChangeReset BranchChange = 6
	// ChangeResetHard: ResetHard moved the head.
	ChangeResetHard BranchChange = 7
	// ChangeRestore: RestoreRefs wrote the branch.
	ChangeRestore BranchChange = 8
)

type BranchRecord struct {
	BranchID BranchID
	*Branch
}

type TagRecord struct {
	TagID    TagID
	CommitID CommitID
}

// CommitVersion is the format version of commit records.
type CommitVersion int

// CurrentCommitVersion is written into every new commit.
const CurrentCommitVersion CommitVersion = 1

// Commit is an immutable snapshot. Its ID is the hash of its canonical
// content (see ref.CommitID), so adding the same commit twice is idempotent.
type Commit struct {
	Version      CommitVersion
	Committer    string
	Message      string
	MetaRangeID  MetaRangeID // "" is the empty tree
	CreationDate time.Time
	Parents      []CommitID
	Metadata     Metadata
	Generation   int
}

type CommitRecord struct {
	CommitID CommitID
	*Commit
}

// DiffType classifies one difference.
type DiffType int

const (
	DiffTypeAdded DiffType = iota
	DiffTypeRemoved
	DiffTypeChanged
	DiffTypeConflict
)

func (t DiffType) String() string {
	switch t {
	case DiffTypeAdded:
		return "added"
	case DiffTypeRemoved:
		return "removed"
	case DiffTypeChanged:
		return "changed"
	case DiffTypeConflict:
		return "conflict"
	}
	return fmt.Sprintf("DiffType(%d)", int(t))
}

// Diff is one difference between two trees. Value is the right side's value
// (nil when removed); LeftIdentity is the left side's identity (nil when added).
type Diff struct {
	Type         DiffType
	Key          Key
	Value        *Value
	LeftIdentity []byte
}

// DiffSummary counts the changes an operation made, by type.
type DiffSummary struct {
	Count      map[DiffType]int
	Incomplete bool
}

// MergeStrategy decides conflicts in a three-way merge.
type MergeStrategy int

const (
	// MergeStrategyNone fails with *MergeConflictError on any conflict.
	MergeStrategyNone MergeStrategy = iota
	// MergeStrategyDestWins keeps the destination's side of a conflict.
	MergeStrategyDestWins
	// MergeStrategySourceWins takes the source's side of a conflict.
	MergeStrategySourceWins
)

// ResetType selects what Reset discards.
type ResetType int

const (
	ResetTypeAll ResetType = iota
	ResetTypeKey
	ResetTypePrefix
)

// RefType is what a reference resolved to.
type RefType int

const (
	RefTypeBranch RefType = iota
	RefTypeTag
	RefTypeCommit
)

// ResolvedBranchModifier selects what a branch reference reads.
type ResolvedBranchModifier int

const (
	// ResolvedBranchModifierNone: the branch with its staged entries.
	ResolvedBranchModifierNone ResolvedBranchModifier = iota
	// ResolvedBranchModifierCommitted ("branch@"): only its head commit.
	ResolvedBranchModifierCommitted
)

// RefModType is one step of a reference expression.
type RefModType int

const (
	// RefModTypeTilde ("~N"): the Nth first-parent ancestor.
	RefModTypeTilde RefModType = iota
	// RefModTypeCaret ("^N"): the Nth parent.
	RefModTypeCaret
	// RefModTypeAt ("@"): the committed head of a branch.
	RefModTypeAt
)

type RefModifier struct {
	Type  RefModType
	Value int
}

// RawRef is a parsed reference expression: a base name plus modifiers.
type RawRef struct {
	BaseRef   string
	Modifiers []RefModifier
}

// ResolvedRef is what a reference expression points at. For a branch
// without modifiers, BranchRecord carries its staging tokens; otherwise only
// CommitID (and MetaRangeID of that commit) matter.
type ResolvedRef struct {
	Type                   RefType
	ResolvedBranchModifier ResolvedBranchModifier
	BranchRecord           BranchRecord
	CommitID               CommitID
	MetaRangeID            MetaRangeID
}
