package server

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "graveler/api/graveler/v1"
	"graveler/graveler"
)

func tsOrNil(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func timeOf(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func repositoryPB(r *graveler.RepositoryRecord) *pb.Repository {
	out := &pb.Repository{Name: RepositoryName(r.RepositoryID)}
	if r.Repository != nil {
		out.StorageNamespace = string(r.StorageNamespace)
		out.DefaultBranch = string(r.DefaultBranchID)
		out.CreateTime = tsOrNil(r.CreationDate)
	}
	return out
}

func branchPB(repo graveler.RepositoryID, b *graveler.BranchRecord) *pb.Branch {
	out := &pb.Branch{Name: BranchName(repo, b.BranchID)}
	if b.Branch != nil {
		out.CommitId = string(b.CommitID)
		out.Etag = string(b.CommitID)
	}
	return out
}

func tagPB(repo graveler.RepositoryID, t *graveler.TagRecord) *pb.Tag {
	return &pb.Tag{Name: TagName(repo, t.TagID), CommitId: string(t.CommitID)}
}

func commitPB(repo graveler.RepositoryID, c *graveler.CommitRecord) *pb.Commit {
	out := &pb.Commit{Name: CommitName(repo, c.CommitID), Id: string(c.CommitID)}
	if c.Commit == nil {
		return out
	}
	out.Committer = c.Committer
	out.Message = c.Message
	out.MetaRangeId = string(c.MetaRangeID)
	out.CreateTime = tsOrNil(c.CreationDate)
	for _, p := range c.Parents {
		out.Parents = append(out.Parents, string(p))
	}
	if len(c.Metadata) > 0 {
		out.Metadata = map[string]string(c.Metadata)
	}
	out.Generation = int64(c.Generation)
	out.Version = int32(c.Version)
	return out
}

// commitFromPB is the inverse of commitPB, for RestoreRefs.
func commitFromPB(c *pb.Commit) *graveler.CommitRecord {
	rec := &graveler.CommitRecord{CommitID: graveler.CommitID(c.GetId()), Commit: &graveler.Commit{
		Version:      graveler.CommitVersion(c.GetVersion()),
		Committer:    c.GetCommitter(),
		Message:      c.GetMessage(),
		MetaRangeID:  graveler.MetaRangeID(c.GetMetaRangeId()),
		CreationDate: timeOf(c.GetCreateTime()),
		Generation:   int(c.GetGeneration()),
	}}
	for _, p := range c.GetParents() {
		rec.Parents = append(rec.Parents, graveler.CommitID(p))
	}
	if len(c.GetMetadata()) > 0 {
		rec.Metadata = graveler.Metadata(c.GetMetadata())
	}
	return rec
}

func valuePB(v *graveler.Value) *pb.Value {
	if v == nil {
		return nil
	}
	return &pb.Value{Identity: v.Identity, Data: v.Data}
}

func listingPB(l *graveler.EntryListing) *pb.EntryListing {
	return &pb.EntryListing{Key: l.Key, Value: valuePB(l.Value), CommonPrefix: l.CommonPrefix}
}

var diffTypes = map[graveler.DiffType]pb.DiffType{
	graveler.DiffTypeAdded:    pb.DiffType_DIFF_TYPE_ADDED,
	graveler.DiffTypeRemoved:  pb.DiffType_DIFF_TYPE_REMOVED,
	graveler.DiffTypeChanged:  pb.DiffType_DIFF_TYPE_CHANGED,
	graveler.DiffTypeConflict: pb.DiffType_DIFF_TYPE_CONFLICT,
}

func diffPB(d *graveler.Diff) *pb.Difference {
	return &pb.Difference{Type: diffTypes[d.Type], Key: d.Key, Value: valuePB(d.Value), LeftIdentity: d.LeftIdentity}
}

// commitParams converts o; a request that names no committer commits as
// the token it authenticated with.
func commitParams(ctx context.Context, o *pb.CommitOptions) graveler.CommitParams {
	p := graveler.CommitParams{
		Committer:  o.GetCommitter(),
		Message:    o.GetMessage(),
		AllowEmpty: o.GetAllowEmpty(),
	}
	if p.Committer == "" {
		p.Committer = Principal(ctx)
	}
	if len(o.GetMetadata()) > 0 {
		p.Metadata = graveler.Metadata(o.GetMetadata())
	}
	return p
}
