package feed

import "graveler/graveler"

// EventType is what an Event says happened. The values are those of the
// API's RefEvent.Type.
type EventType int

// Event types.
const (
	RepositoryCreated EventType = 1
	RepositoryDeleted EventType = 2
	BranchCreated     EventType = 3
	BranchMoved       EventType = 4
	BranchDeleted     EventType = 5
	TagCreated        EventType = 6
	TagDeleted        EventType = 7
	RepositoryExists  EventType = 8
	BranchExists      EventType = 9
	TagExists         EventType = 10
)

var eventTypeNames = map[EventType]string{
	RepositoryCreated: "REPOSITORY_CREATED",
	RepositoryDeleted: "REPOSITORY_DELETED",
	BranchCreated:     "BRANCH_CREATED",
	BranchMoved:       "BRANCH_MOVED",
	BranchDeleted:     "BRANCH_DELETED",
	TagCreated:        "TAG_CREATED",
	TagDeleted:        "TAG_DELETED",
	RepositoryExists:  "REPOSITORY_EXISTS",
	BranchExists:      "BRANCH_EXISTS",
	TagExists:         "TAG_EXISTS",
}

func (t EventType) String() string {
	if s, ok := eventTypeNames[t]; ok {
		return s
	}
	return "UNKNOWN"
}

// Event is one ref change, or one ref of an initial state. Events are
// shared by every subscription that receives them: never modify one, nor
// what its pointers reach.
type Event struct {
	Type EventType
	// Revision is the etcd revision of the change (of the snapshot for the
	// *Exists types).
	Revision   int64
	Repository graveler.RepositoryID
	// Branch is set for branch events, Tag for tag events.
	Branch graveler.BranchID
	Tag    graveler.TagID
	// OldCommitID is the commit before a move or a deletion.
	OldCommitID graveler.CommitID
	// CommitID is the commit after the change; for RepositoryCreated the
	// default branch's head (empty for a bare repository).
	CommitID graveler.CommitID
	// Cause is what created or moved a branch (ChangeNone: not recorded).
	Cause graveler.BranchChange
	// Commit is the record of CommitID for moves caused by a commit, merge,
	// revert or cherry-pick (nil if it could not be read).
	Commit *graveler.Commit
	// RepositoryInfo is the repository record of RepositoryCreated and
	// RepositoryExists.
	RepositoryInfo *graveler.Repository
}

// Kind says what a Message carries. The values are those of the API's
// WatchRefsResponse.Kind.
type Kind int

// Message kinds.
const (
	// KindChanges: every change of one revision, for the subscription's scope.
	KindChanges Kind = 1
	// KindInitial: a page of the initial state.
	KindInitial Kind = 2
	// KindInitialEnd: the initial state at Revision is complete.
	KindInitialEnd Kind = 3
	// KindBookmark: nothing changed in the subscription's scope up to Revision.
	KindBookmark Kind = 4
)

func (k Kind) String() string {
	switch k {
	case KindChanges:
		return "CHANGES"
	case KindInitial:
		return "INITIAL"
	case KindInitialEnd:
		return "INITIAL_END"
	case KindBookmark:
		return "BOOKMARK"
	}
	return "UNKNOWN"
}

// Message is what Subscription.Next returns.
type Message struct {
	Kind     Kind
	Revision int64
	Events   []Event
	// ResumeRevision continues after this message with no gap and no
	// duplicate when passed as Request.StartRevision; 0 for initial pages.
	ResumeRevision int64
}
