// Package ref stores graveler's references on a kv.Store: repository
// records (graveler partition), and per repository incarnation its
// branches, tags and commit records (partition repo/<repo>-<unique id>).
// Manager implements graveler.RefManager.
//
// Repository lifecycle (docs/architecture.md). A repository is created
// as initial, then claims its storage namespace, then runs the caller's
// namespace check (graveler.WithNamespaceCheck), then gets its initial
// commit and default branch, then becomes active; each step is one kv
// operation (or the check), so a crash leaves either an active repository
// or an initial record that expires after Config.RepositoryCreationTimeout,
// when the next caller that meets it queues it under
// graveler_deleted/repos/<repo>/<unique id> for the cleaner. Delete
// marks the record deleting, queues it, then removes it: the name is free
// at once and the old partition is unreachable. GetRepository answers
// graveler.ErrRepositoryDeleting for a deleting record (a delete in
// progress, or one that stopped part way) and ErrRepositoryNotFound for an
// initial one; listings show active repositories only. Deleted branches
// and staging tokens are queued under graveler_deleted/tokens/<token>.
//
// Storage namespaces (namespace.go). A namespace is held by one repository
// incarnation at a time: graveler/namespaces/<normalized namespace>
// (graveler.NormalizeStorageNamespace) names it. A create writes its claim
// with SetIf absent, or at the version of a stale claim, one whose
// incarnation has neither a record (an initial one past the timeout does
// not count, and is retired on the way) nor a queued work item; for
// file:// and s3:// it then checks that no claim that counts lies above or
// below it. A claim that counts is *graveler.NamespaceInUseError
// (graveler.ErrNamespaceInUse). An incarnation whose initial record is
// retired or replaced (a create that failed or expired) never became
// active and releases its claim at once; any other keeps it until the
// cleaner has reclaimed it: the cleaner marks the claim reclaiming
// (ReclaimNamespace; from then on only ReleaseNamespace removes it),
// empties the namespace and releases it. Every removal is a DeleteIf at
// the version read of a claim naming that incarnation.
//
// A record read earlier is removed only at the version read
// (kv.Store.DeleteIf): a repository, branch or tag deleted and created
// again meanwhile is never removed by the older delete. Repository, branch
// and tag records carry a write id fresh for every write (refpb), so no
// two writes of a key store the same bytes, which is what lets the etcd
// store settle an ambiguous compare-and-swap from the key's history.
//
// Branches change only through compare-and-swap (BranchUpdate: a bounded,
// jittered read-modify-SetIf loop). GetBranch amortizes reads: concurrent
// readers of one branch share a kv read, but never one that started before
// they arrived, so a read always sees every write completed before it.
//
// Change feed: a branch record carries the graveler.BranchChange of the
// write that stored it, ChangeCreate (or ChangeRestore) when created, and
// what BranchUpdate's f set, never one inherited from the version read.
// Each operation marks its decisive write (kv.Effect): a repository's
// activation (a bare repository's too), the write that marks an
// active repository deleting, a branch's or tag's creation and removal,
// and a BranchUpdate write whose Change is not ChangeNone. A DeleteTag
// that finds the tag already deleted by another writes nothing.
//
// Commits are content addressed (ComputeCommitID documents the encoding),
// so adding a commit twice is a no-op. Log streams history holding only the
// walk's frontier, which it reports (LogOptions.Position) so that a later
// walk resumes from it (LogOptions.Resume) without walking history again.
//
// Records (and namespace claims) are protobuf messages (package refpb)
// with a format version; a record of a newer format is refused with
// ErrUnknownFormat.
//
// Concurrency: a Manager is safe for concurrent use by many goroutines and
// many processes sharing one store; it holds no lock across kv calls. It
// needs no Close; the caller owns and closes the store.
//
// Errors wrap the graveler sentinels (ErrRepositoryNotFound, ErrBranchExists,
// ErrTooManyRetries, ErrRefAmbiguous, ErrNamespaceInUse, ...), with
// graveler.ErrUnavailable or graveler.ErrAmbiguous added when the store
// reports kv.ErrUnavailable or kv.ErrAmbiguous. Invalid input is
// graveler.ErrInvalidArgument.
package ref
