package ref

import (
	"crypto/rand"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"graveler/graveler"
	"graveler/graveler/ref/refpb"
	"graveler/keys"
)

// Format versions of the stored records. A reader accepts versions up to
// these and refuses newer ones with ErrUnknownFormat, so a rolled-back
// binary fails loudly instead of dropping fields it does not know. A field
// a reader may ignore (write_id) needs no new version: records written
// before it existed decode unchanged, and an older reader loses nothing by
// skipping it.
const (
	RepositoryFormatVersion = 1
	BranchFormatVersion     = 1
	CommitFormatVersion     = 1
	TagFormatVersion        = 1
	NamespaceFormatVersion  = 1
)

func checkFormat(what string, got, max uint32) error {
	if got == 0 || got > max {
		return fmt.Errorf("%w: %s record has format version %d, this build reads 1..%d", ErrUnknownFormat, what, got, max)
	}
	return nil
}

func tsOrNil(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func tsTime(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

var stateToPB = map[graveler.RepositoryState]refpb.RepositoryState{
	graveler.RepositoryStateInitial:  refpb.RepositoryState_REPOSITORY_STATE_INITIAL,
	graveler.RepositoryStateActive:   refpb.RepositoryState_REPOSITORY_STATE_ACTIVE,
	graveler.RepositoryStateDeleting: refpb.RepositoryState_REPOSITORY_STATE_DELETING,
}

// newWriteID returns the write_id of one encoded record. Repository,
// branch and tag records are rewritten in place by compare-and-swap; the
// etcd store settles an ambiguous one by finding its own value in the
// key's history, so every write must store bytes no other write stores,
// even one of the same logical content. Commit records are content
// addressed and written once, so they carry none.
func newWriteID() []byte {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand aborts the process instead)
	return b
}

func encodeRepository(r *graveler.Repository) ([]byte, error) {
	st, ok := stateToPB[r.State]
	if !ok {
		return nil, fmt.Errorf("ref: encode repository: unknown state %v", r.State)
	}
	return proto.Marshal(&refpb.Repository{
		FormatVersion:    RepositoryFormatVersion,
		StorageNamespace: string(r.StorageNamespace),
		DefaultBranchId:  string(r.DefaultBranchID),
		CreationDate:     tsOrNil(r.CreationDate),
		State:            st,
		UniqueId:         string(r.UniqueID),
		WriteId:          newWriteID(),
	})
}

// DecodeRepository decodes a record stored under keys.Repository. It is
// exported for the cleaner, which reads repository records directly.
func DecodeRepository(data []byte) (*graveler.Repository, error) {
	var pb refpb.Repository
	if err := proto.Unmarshal(data, &pb); err != nil {
		return nil, fmt.Errorf("%w: repository: %w", ErrCorruptRecord, err)
	}
	if err := checkFormat("repository", pb.GetFormatVersion(), RepositoryFormatVersion); err != nil {
		return nil, err
	}
	r := &graveler.Repository{
		StorageNamespace: graveler.StorageNamespace(pb.GetStorageNamespace()),
		DefaultBranchID:  graveler.BranchID(pb.GetDefaultBranchId()),
		CreationDate:     tsTime(pb.GetCreationDate()),
		UniqueID:         graveler.UniqueID(pb.GetUniqueId()),
	}
	switch pb.GetState() {
	case refpb.RepositoryState_REPOSITORY_STATE_INITIAL:
		r.State = graveler.RepositoryStateInitial
	case refpb.RepositoryState_REPOSITORY_STATE_ACTIVE:
		r.State = graveler.RepositoryStateActive
	case refpb.RepositoryState_REPOSITORY_STATE_DELETING:
		r.State = graveler.RepositoryStateDeleting
	default:
		return nil, fmt.Errorf("%w: repository state %v", ErrCorruptRecord, pb.GetState())
	}
	return r, nil
}

func encodeBranch(b *graveler.Branch) ([]byte, error) {
	sealed := make([]string, len(b.SealedTokens))
	for i, t := range b.SealedTokens {
		sealed[i] = string(t)
	}
	var overrides []string
	for _, t := range b.OverrideTokens {
		overrides = append(overrides, string(t))
	}
	return proto.Marshal(&refpb.Branch{
		FormatVersion:  BranchFormatVersion,
		CommitId:       string(b.CommitID),
		StagingToken:   string(b.StagingToken),
		SealedTokens:   sealed,
		OverrideTokens: overrides,
		WriteId:        newWriteID(),
		Change:         int32(b.Change),
	})
}

// DecodeBranch decodes a record stored under keys.Branch. It is exported
// for the cleaner, which collects a deleted repository's staging tokens.
func DecodeBranch(data []byte) (*graveler.Branch, error) {
	var pb refpb.Branch
	if err := proto.Unmarshal(data, &pb); err != nil {
		return nil, fmt.Errorf("%w: branch: %w", ErrCorruptRecord, err)
	}
	if err := checkFormat("branch", pb.GetFormatVersion(), BranchFormatVersion); err != nil {
		return nil, err
	}
	b := &graveler.Branch{
		CommitID:     graveler.CommitID(pb.GetCommitId()),
		StagingToken: graveler.StagingToken(pb.GetStagingToken()),
		Change:       graveler.BranchChange(pb.GetChange()),
	}
	if len(pb.GetSealedTokens()) > 0 {
		b.SealedTokens = make([]graveler.StagingToken, len(pb.GetSealedTokens()))
		for i, t := range pb.GetSealedTokens() {
			b.SealedTokens[i] = graveler.StagingToken(t)
		}
	}
	for _, t := range pb.GetOverrideTokens() {
		b.OverrideTokens = append(b.OverrideTokens, graveler.StagingToken(t))
	}
	return b, nil
}

func encodeCommit(c *graveler.Commit) ([]byte, error) {
	parents := make([]string, len(c.Parents))
	for i, p := range c.Parents {
		parents[i] = string(p)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(&refpb.Commit{
		FormatVersion: CommitFormatVersion,
		Version:       int32(c.Version),
		Committer:     c.Committer,
		Message:       c.Message,
		MetaRangeId:   string(c.MetaRangeID),
		CreationDate:  tsOrNil(c.CreationDate),
		Parents:       parents,
		Metadata:      c.Metadata,
		Generation:    int64(c.Generation),
	})
}

func decodeCommit(data []byte) (*graveler.Commit, error) {
	var pb refpb.Commit
	if err := proto.Unmarshal(data, &pb); err != nil {
		return nil, fmt.Errorf("%w: commit: %w", ErrCorruptRecord, err)
	}
	if err := checkFormat("commit", pb.GetFormatVersion(), CommitFormatVersion); err != nil {
		return nil, err
	}
	c := &graveler.Commit{
		Version:      graveler.CommitVersion(pb.GetVersion()),
		Committer:    pb.GetCommitter(),
		Message:      pb.GetMessage(),
		MetaRangeID:  graveler.MetaRangeID(pb.GetMetaRangeId()),
		CreationDate: tsTime(pb.GetCreationDate()),
		Generation:   int(pb.GetGeneration()),
	}
	if len(pb.GetParents()) > 0 {
		c.Parents = make([]graveler.CommitID, len(pb.GetParents()))
		for i, p := range pb.GetParents() {
			c.Parents[i] = graveler.CommitID(p)
		}
	}
	if len(pb.GetMetadata()) > 0 {
		c.Metadata = graveler.Metadata(pb.GetMetadata())
	}
	return c, nil
}

func encodeTag(id graveler.CommitID) ([]byte, error) {
	return proto.Marshal(&refpb.Tag{FormatVersion: TagFormatVersion, CommitId: string(id), WriteId: newWriteID()})
}

func decodeTag(data []byte) (graveler.CommitID, error) {
	var pb refpb.Tag
	if err := proto.Unmarshal(data, &pb); err != nil {
		return "", fmt.Errorf("%w: tag: %w", ErrCorruptRecord, err)
	}
	if err := checkFormat("tag", pb.GetFormatVersion(), TagFormatVersion); err != nil {
		return "", err
	}
	return graveler.CommitID(pb.GetCommitId()), nil
}

func encodeNamespaceClaim(c *NamespaceClaim) ([]byte, error) {
	return proto.Marshal(&refpb.NamespaceClaim{
		FormatVersion:    NamespaceFormatVersion,
		StorageNamespace: string(c.Namespace),
		Repository:       string(c.Repository),
		UniqueId:         string(c.UniqueID),
		Claimed:          tsOrNil(c.Claimed),
		Reclaiming:       c.Reclaiming,
		WriteId:          newWriteID(),
	})
}

// DecodeNamespaceClaim decodes a claim stored under keys.NamespaceClaim
// (key is that key). It is exported for tools that read the store
// directly.
func DecodeNamespaceClaim(key, data []byte) (*NamespaceClaim, error) {
	norm, err := keys.ParseNamespaceClaim(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorruptRecord, err)
	}
	var pb refpb.NamespaceClaim
	if err := proto.Unmarshal(data, &pb); err != nil {
		return nil, fmt.Errorf("%w: namespace claim %q: %w", ErrCorruptRecord, norm, err)
	}
	if err := checkFormat("namespace claim", pb.GetFormatVersion(), NamespaceFormatVersion); err != nil {
		return nil, err
	}
	return &NamespaceClaim{
		Normalized: graveler.StorageNamespace(norm),
		Namespace:  graveler.StorageNamespace(pb.GetStorageNamespace()),
		Repository: graveler.RepositoryID(pb.GetRepository()),
		UniqueID:   graveler.UniqueID(pb.GetUniqueId()),
		Claimed:    tsTime(pb.GetClaimed()),
		Reclaiming: pb.GetReclaiming(),
	}, nil
}
