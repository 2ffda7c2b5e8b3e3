package graveler

import (
	"errors"
	"fmt"
	"strconv"
)

// MaxEcho bounds how much of a client's value (a key, ref, name, prefix,
// storage namespace) an error message repeats. Such a value may be
// megabytes, and a message repeating it whole (quoted: four bytes for a
// control byte) made a status too large for the client's trailers, which
// tore down its connection and every call on it.
const MaxEcho = 64

// Echo quotes a client's value for an error message: whole up to MaxEcho
// bytes, else its first MaxEcho bytes and its full length,
// "\"abc\"... (3145728 bytes)". Every error that repeats client input goes
// through it.
func Echo[S ~string | ~[]byte](s S) string {
	if len(s) <= MaxEcho {
		return strconv.Quote(string(s))
	}
	return strconv.Quote(string(s[:MaxEcho])) + "... (" + strconv.Itoa(len(s)) + " bytes)"
}

// Category sentinels. Every specific error wraps exactly one of them, so the
// gRPC server maps errors to status codes with errors.Is on these alone.
var (
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrConflict           = errors.New("conflict")
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrUnavailable: the metadata store is unreachable or overloaded; retry later.
	ErrUnavailable = errors.New("unavailable")
	// ErrAmbiguous: a write may or may not have been applied; re-read to find out.
	ErrAmbiguous = errors.New("outcome unknown")
	// ErrResourceExhausted: a per-resource limit is reached; retrying
	// helps only after something else changes (a commit, a cleanup).
	ErrResourceExhausted = errors.New("resource exhausted")
)

// Specific errors.
var (
	ErrRepositoryNotFound      = fmt.Errorf("repository %w", ErrNotFound)
	ErrRepositoryExists        = fmt.Errorf("repository %w", ErrAlreadyExists)
	ErrRepositoryDeleting      = fmt.Errorf("repository is being deleted: %w", ErrFailedPrecondition)
	ErrBranchNotFound          = fmt.Errorf("branch %w", ErrNotFound)
	ErrBranchExists            = fmt.Errorf("branch %w", ErrAlreadyExists)
	ErrTagNotFound             = fmt.Errorf("tag %w", ErrNotFound)
	ErrTagExists               = fmt.Errorf("tag %w", ErrAlreadyExists)
	ErrCommitNotFound          = fmt.Errorf("commit %w", ErrNotFound)
	ErrRefNotFound             = fmt.Errorf("reference %w", ErrNotFound)
	ErrRefAmbiguous            = fmt.Errorf("reference matches more than one commit: %w", ErrInvalidArgument)
	ErrEntryNotFound           = fmt.Errorf("entry %w", ErrNotFound)
	ErrEntryExists             = fmt.Errorf("entry %w", ErrAlreadyExists)
	ErrMetaRangeNotFound       = fmt.Errorf("metarange %w", ErrNotFound)
	ErrInvalidValue            = fmt.Errorf("value: %w", ErrInvalidArgument)
	ErrInvalidRef              = fmt.Errorf("reference: %w", ErrInvalidArgument)
	ErrInvalidRepositoryID     = fmt.Errorf("repository id: %w", ErrInvalidArgument)
	ErrInvalidBranchID         = fmt.Errorf("branch id: %w", ErrInvalidArgument)
	ErrInvalidTagID            = fmt.Errorf("tag id: %w", ErrInvalidArgument)
	ErrInvalidCommitID         = fmt.Errorf("commit id: %w", ErrInvalidArgument)
	ErrInvalidKey              = fmt.Errorf("key: %w", ErrInvalidArgument)
	ErrInvalidStorageNamespace = fmt.Errorf("storage namespace: %w", ErrInvalidArgument)
	ErrInvalidPageToken        = fmt.Errorf("page token: %w", ErrInvalidArgument)
	ErrValueTooLarge           = fmt.Errorf("value too large: %w", ErrInvalidArgument)
	ErrDeleteDefaultBranch     = fmt.Errorf("cannot delete the default branch: %w", ErrFailedPrecondition)
	ErrNoChanges               = fmt.Errorf("no changes: %w", ErrFailedPrecondition)
	ErrDirtyBranch             = fmt.Errorf("branch has uncommitted changes: %w", ErrFailedPrecondition)
	ErrNotBareRepository       = fmt.Errorf("repository is not bare: %w", ErrFailedPrecondition)
	ErrNoMergeBase             = fmt.Errorf("no merge base: %w", ErrFailedPrecondition)
	// ErrAmbiguousMergeBase: two histories share more than one best common
	// ancestor (a criss-cross), and those differ in content, so no single
	// base gives a three-way merge that keeps both sides' changes.
	ErrAmbiguousMergeBase  = fmt.Errorf("ambiguous merge base: %w", ErrFailedPrecondition)
	ErrRevertMergeNoParent = fmt.Errorf("reverting a merge commit needs a parent number: %w", ErrInvalidArgument)
	ErrInvalidParentNumber = fmt.Errorf("parent number: %w", ErrInvalidArgument)
	ErrNothingToMerge      = fmt.Errorf("source is already merged into the destination: %w", ErrNoChanges)
	// ErrTooManyRangeTombstones: a staging token holds its limit of range
	// tombstones (DeletePrefix); a commit of the branch starts a new token.
	ErrTooManyRangeTombstones = fmt.Errorf("too many prefix deletes staged on the branch, commit it first: %w", ErrResourceExhausted)
	// ErrMergeConflict is wrapped by *MergeConflictError.
	ErrMergeConflict = fmt.Errorf("merge conflict: %w", ErrFailedPrecondition)
	// ErrBranchHeadMoved: an optimistic update lost its compare-and-swap (the
	// branch changed since it was read, or an expected head did not match).
	ErrBranchHeadMoved = fmt.Errorf("branch head moved: %w", ErrConflict)
	// ErrTooManyRetries: a compare-and-swap loop gave up under contention.
	ErrTooManyRetries = fmt.Errorf("too many concurrent updates, retry later: %w", ErrConflict)
	// ErrStagingTokenSealed: a staged write found its token retired (a
	// commit sealed it, a reset replaced it) and wrote nothing. The
	// writer's flow writes again into the branch's current token, so it
	// reaches a caller only as ErrTooManyRetries after FenceRetries such
	// rounds. It wraps ErrConflict for that reason alone.
	ErrStagingTokenSealed = fmt.Errorf("staging token retired by a commit or a reset: %w", ErrConflict)
	// ErrRangeInScope: RangeStager.ResetPrefix refused, as a range
	// tombstone of the token reaches into the prefix; hiding the token's
	// entries cannot undo what it deletes, so the reset takes another way.
	// Internal: a reset never returns it.
	ErrRangeInScope = fmt.Errorf("a prefix delete of the staging token reaches into the reset prefix: %w", ErrFailedPrecondition)
	// ErrSkipUpdate, returned by a BranchUpdateFunc, ends the update without writing.
	ErrSkipUpdate = errors.New("skip update")
)

// MergeConflictError names the keys a merge could not reconcile. It wraps
// ErrMergeConflict; find it with errors.AsType[*MergeConflictError].
type MergeConflictError struct {
	// Keys holds the first conflicting keys, in order (bounded).
	Keys []Key
	// Total counts every conflicting key seen.
	Total int
}

func (e *MergeConflictError) Error() string {
	const show = 5
	s := fmt.Sprintf("%d conflicting keys", e.Total)
	for i, k := range e.Keys {
		if i == show {
			s += ", ..."
			break
		}
		if i == 0 {
			s += ": "
		} else {
			s += ", "
		}
		s += Echo(k)
	}
	return ErrMergeConflict.Error() + ": " + s
}

func (e *MergeConflictError) Unwrap() error { return ErrMergeConflict }

// Storage namespace errors of a create.
var (
	// ErrNamespaceInUse: another repository (live, being created, or
	// deleted and not yet reclaimed by the cleaner) holds the storage
	// namespace, or one nested in it or containing it. Wrapped by
	// *NamespaceInUseError, which names the holder.
	ErrNamespaceInUse = fmt.Errorf("storage namespace in use: %w", ErrAlreadyExists)
	// ErrNamespaceUnwritable: the storage namespace could not be written
	// and read back (unreachable, no such bucket, no permission, no
	// credentials); the message names the namespace and the cause.
	ErrNamespaceUnwritable = fmt.Errorf("storage namespace not writable: %w", ErrFailedPrecondition)
)

// NamespaceInUseError names the repository holding a storage namespace a
// create asked for. It wraps ErrNamespaceInUse; find it with
// errors.AsType[*NamespaceInUseError].
type NamespaceInUseError struct {
	// Namespace is the namespace asked for.
	Namespace StorageNamespace
	// Held is the namespace the holder claimed: Namespace, another
	// spelling of it, or one nested in it or containing it.
	Held StorageNamespace
	// Repository and UniqueID name the holding incarnation.
	Repository RepositoryID
	UniqueID   UniqueID
	// State says why the holder still counts: "active", "being created",
	// "being deleted", or "deleted, until the cleaner reclaims it".
	State string
}

// Error names the namespaces whole: both are normalized, at most
// MaxStorageNamespaceLen bytes.
func (e *NamespaceInUseError) Error() string {
	held := ""
	if e.Held != e.Namespace {
		held = fmt.Sprintf(" through %q", e.Held)
	}
	return fmt.Sprintf("storage namespace %q is in use by repository %s%s (incarnation %s, %s)", e.Namespace, e.Repository, held, e.UniqueID, e.State)
}

func (e *NamespaceInUseError) Unwrap() error { return ErrNamespaceInUse }

// ErrorMetadata is the ErrorInfo metadata of the status the error becomes.
func (e *NamespaceInUseError) ErrorMetadata() map[string]string {
	return map[string]string{
		"storage_namespace":  string(e.Namespace),
		"held_namespace":     string(e.Held),
		"holding_repository": string(e.Repository),
		"holder_state":       e.State,
	}
}

// PartlyStagedError is StagingManager.SetBatch's answer when the token was
// retired while the batch was being written: the records of Unapplied were
// not written, the others were, before the retirement, so the commit that
// sealed the token carries them (or the reset that replaced it discarded
// them, being later). Only Unapplied may go to the branch's next token:
// writing the others again would apply them a second time, after writes
// acknowledged since. It wraps ErrStagingTokenSealed.
type PartlyStagedError struct {
	Unapplied []*ValueRecord
	Err       error
}

func (e *PartlyStagedError) Error() string {
	return fmt.Sprintf("%v (%d records not written)", e.Err, len(e.Unapplied))
}

func (e *PartlyStagedError) Unwrap() error { return e.Err }

// AmbiguousMergeBaseError names the best common ancestors, with different
// trees, of two histories (ErrAmbiguousMergeBase).
type AmbiguousMergeBaseError struct {
	Left, Right CommitID
	Bases       []CommitID
}

func (e *AmbiguousMergeBaseError) Error() string {
	return fmt.Sprintf("%v: %s and %s have %d best common ancestors with different trees (%v)", ErrAmbiguousMergeBase, e.Left, e.Right, len(e.Bases), e.Bases)
}

func (e *AmbiguousMergeBaseError) Unwrap() error { return ErrAmbiguousMergeBase }
