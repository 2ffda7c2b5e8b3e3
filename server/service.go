package server

import (
	"context"
	"iter"

	"graveler/graveler"
)

// Service is the method set of *graveler.Graveler the server uses. It is
// declared here, by its consumer, so the error mapping can be tested with a
// fake.
type Service interface {
	CreateRepository(ctx context.Context, id graveler.RepositoryID, ns graveler.StorageNamespace, defaultBranch graveler.BranchID) (*graveler.RepositoryRecord, error)
	CreateBareRepository(ctx context.Context, id graveler.RepositoryID, ns graveler.StorageNamespace, defaultBranch graveler.BranchID) (*graveler.RepositoryRecord, error)
	GetRepository(ctx context.Context, id graveler.RepositoryID) (*graveler.RepositoryRecord, error)
	ListRepositories(ctx context.Context, opts graveler.ListOptions) iter.Seq2[*graveler.RepositoryRecord, error]
	DeleteRepository(ctx context.Context, id graveler.RepositoryID) error

	CreateBranch(ctx context.Context, repo graveler.RepositoryID, branch graveler.BranchID, source graveler.Ref) (*graveler.BranchRecord, error)
	GetBranch(ctx context.Context, repo graveler.RepositoryID, branch graveler.BranchID) (*graveler.BranchRecord, error)
	ListBranches(ctx context.Context, repo graveler.RepositoryID, opts graveler.ListBranchesOptions) iter.Seq2[*graveler.BranchRecord, error]
	DeleteBranch(ctx context.Context, repo graveler.RepositoryID, branch graveler.BranchID) error
	ResetHard(ctx context.Context, repo graveler.RepositoryID, branch graveler.BranchID, ref graveler.Ref, opts graveler.ResetHardOptions) (*graveler.BranchRecord, error)

	CreateTag(ctx context.Context, repo graveler.RepositoryID, tag graveler.TagID, ref graveler.Ref) (graveler.CommitID, error)
	GetTag(ctx context.Context, repo graveler.RepositoryID, tag graveler.TagID) (graveler.CommitID, error)
	DeleteTag(ctx context.Context, repo graveler.RepositoryID, tag graveler.TagID) error
	ListTags(ctx context.Context, repo graveler.RepositoryID, opts graveler.ListOptions) iter.Seq2[*graveler.TagRecord, error]

	GetCommit(ctx context.Context, repo graveler.RepositoryID, ref graveler.Ref) (*graveler.CommitRecord, error)
	Log(ctx context.Context, repo graveler.RepositoryID, ref graveler.Ref, opts graveler.LogOptions) iter.Seq2[*graveler.CommitRecord, error]
	ListCommits(ctx context.Context, repo graveler.RepositoryID, opts graveler.ListCommitsOptions) iter.Seq2[*graveler.CommitRecord, error]

	Get(ctx context.Context, repo graveler.RepositoryID, ref graveler.Ref, key graveler.Key) (*graveler.Value, error)
	Set(ctx context.Context, repo graveler.RepositoryID, branch graveler.BranchID, key graveler.Key, value graveler.Value, opts graveler.SetOptions) error
	SetBatch(ctx context.Context, repo graveler.RepositoryID, branch graveler.BranchID, records []*graveler.ValueRecord) error
	Delete(ctx context.Context, repo graveler.RepositoryID, branch graveler.BranchID, key graveler.Key) error
	ListEntries(ctx context.Context, repo graveler.RepositoryID, ref graveler.Ref, opts graveler.ListEntriesOptions) ([]*graveler.EntryListing, bool, error)
	ListEntriesPage(ctx context.Context, repo graveler.RepositoryID, ref graveler.Ref, opts graveler.ListEntriesOptions) (*graveler.EntriesPage, error)
	DeletePrefix(ctx context.Context, repo graveler.RepositoryID, branch graveler.BranchID, prefix graveler.Key) error

	Commit(ctx context.Context, repo graveler.RepositoryID, branch graveler.BranchID, params graveler.CommitParams) (graveler.CommitID, error)
	Reset(ctx context.Context, repo graveler.RepositoryID, branch graveler.BranchID, typ graveler.ResetType, key graveler.Key) error
	DiffUncommitted(ctx context.Context, repo graveler.RepositoryID, branch graveler.BranchID) (graveler.DiffIterator, error)
	Diff(ctx context.Context, repo graveler.RepositoryID, left, right graveler.Ref) (graveler.DiffIterator, error)
	Merge(ctx context.Context, repo graveler.RepositoryID, destination graveler.BranchID, source graveler.Ref, params graveler.MergeParams) (graveler.CommitID, bool, error)
	Revert(ctx context.Context, repo graveler.RepositoryID, branch graveler.BranchID, ref graveler.Ref, parentNumber int, params graveler.CommitParams) (graveler.CommitID, error)
	CherryPick(ctx context.Context, repo graveler.RepositoryID, branch graveler.BranchID, ref graveler.Ref, parentNumber int, params graveler.CommitParams) (graveler.CommitID, error)

	DumpRefs(ctx context.Context, repo graveler.RepositoryID) iter.Seq2[*graveler.RefsRecord, error]
	RestoreRefs(ctx context.Context, repo graveler.RepositoryID, records iter.Seq2[*graveler.RefsRecord, error]) error
}

var _ Service = (*graveler.Graveler)(nil)
