package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"iter"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pb "graveler/api/graveler/v1"
	"graveler/feed"
	"graveler/graveler"
	"graveler/graveler/ref"
	"graveler/kv"
)

// Config shapes a Server. Zero values take the defaults noted.
type Config struct {
	// StorageNamespaceRoot is where CreateRepository puts a repository that
	// names no storage namespace: <root>/<repository id>-<unique suffix>
	// (e.g. under "file:///data/blobs"); empty makes the storage namespace
	// required.
	StorageNamespaceRoot string
	// DefaultBranch is the default branch of new repositories (default "main").
	DefaultBranch string
	// PageTokenKey signs page tokens; replicas must share it (default: a
	// fixed key, see pagetoken.go).
	PageTokenKey []byte
	// MaxBatchEntries bounds BatchPutEntries (default 1000).
	MaxBatchEntries int
	// Feed serves WatchRefs (nil: WatchRefs answers UNIMPLEMENTED). Only a
	// server on etcd has one; its owner closes it.
	Feed *feed.Feed
}

// Server implements pb.GravelerServiceServer on a Service. Handlers return
// graveler-categorized errors; the interceptors of NewGRPCServer turn them
// into statuses with ToStatus.
type Server struct {
	pb.UnimplementedGravelerServiceServer
	svc   Service
	cfg   Config
	pager pager
}

var _ pb.GravelerServiceServer = (*Server)(nil)

// New returns a Server on svc. It starts no goroutines.
func New(svc Service, cfg Config) *Server {
	if cfg.DefaultBranch == "" {
		cfg.DefaultBranch = "main"
	}
	if cfg.MaxBatchEntries <= 0 {
		cfg.MaxBatchEntries = 1000
	}
	key := cfg.PageTokenKey
	if len(key) == 0 {
		key = defaultPageTokenKey
	}
	return &Server{svc: svc, cfg: cfg, pager: pager{key: key}}
}

// responseBytes bounds the entries' bytes in one ListEntries page or one
// StreamEntries message, and the encoded size of one Log, ListCommits or
// Diff page or one message of the other streams (StreamLog, StreamDiff, DumpRefs): with
// the row that crosses it, a message stays
// inside the 4 MiB a gRPC client receives by default (and the server's
// 16 MiB send limit), where a page of 100 values near the 512 KiB limit
// would not fit. A page ends short instead (AIP-158), with a token for
// the rest.
const responseBytes = 3 << 20

// Batch sizes of the streaming methods.
const (
	streamEntriesBatch = 1000
	streamLogBatch     = 100
	streamDiffBatch    = 500
	streamRefsBatch    = 100
)

// --- repositories

func (s *Server) CreateRepository(ctx context.Context, req *pb.CreateRepositoryRequest) (*pb.CreateRepositoryResponse, error) {
	ctx, rev := kv.WithRevisions(ctx)
	id := graveler.RepositoryID(req.GetRepositoryId())
	name := RepositoryName(id)
	if err := graveler.ValidateRepositoryID(id); err != nil {
		return nil, withResource(err, "repository", name)
	}
	ns := req.GetRepository().GetStorageNamespace()
	if ns == "" {
		if s.cfg.StorageNamespaceRoot == "" {
			return nil, withResource(fmt.Errorf("%w: repository.storage_namespace", ErrMissingField), "repository", name)
		}
		// One namespace per incarnation: a deleted repository keeps its
		// namespace claimed until the cleaner has emptied it, and the name
		// must be reusable at once.
		ns = strings.TrimSuffix(s.cfg.StorageNamespaceRoot, "/") + "/" + string(id) + "-" + ref.NewID()
	}
	branch := req.GetRepository().GetDefaultBranch()
	if branch == "" {
		branch = s.cfg.DefaultBranch
	}
	create := s.svc.CreateRepository
	if req.GetBare() {
		create = s.svc.CreateBareRepository
	}
	rec, err := create(ctx, id, graveler.StorageNamespace(ns), graveler.BranchID(branch))
	if err != nil {
		return nil, withResource(err, "repository", name)
	}
	return &pb.CreateRepositoryResponse{Repository: repositoryPB(rec), Revision: rev.Revision()}, nil
}

func (s *Server) GetRepository(ctx context.Context, req *pb.GetRepositoryRequest) (*pb.GetRepositoryResponse, error) {
	repo, err := parseRepository(req.GetName())
	if err != nil {
		return nil, withResource(err, "repository", req.GetName())
	}
	rec, err := s.svc.GetRepository(ctx, repo)
	if err != nil {
		return nil, withResource(err, "repository", req.GetName())
	}
	return &pb.GetRepositoryResponse{Repository: repositoryPB(rec)}, nil
}

func (s *Server) ListRepositories(ctx context.Context, req *pb.ListRepositoriesRequest) (*pb.ListRepositoriesResponse, error) {
	n, after, err := s.pageArgs("ListRepositories", req, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	recs, more, err := take(s.svc.ListRepositories(ctx, graveler.ListOptions{After: string(after)}), n)
	if err != nil {
		return nil, err
	}
	resp := &pb.ListRepositoriesResponse{}
	for _, r := range recs {
		resp.Repositories = append(resp.Repositories, repositoryPB(r))
	}
	if more {
		resp.NextPageToken = s.pager.encode("ListRepositories", req, []byte(recs[len(recs)-1].RepositoryID))
	}
	return resp, nil
}

func (s *Server) DeleteRepository(ctx context.Context, req *pb.DeleteRepositoryRequest) (*pb.DeleteRepositoryResponse, error) {
	ctx, rev := kv.WithRevisions(ctx)
	repo, err := parseRepository(req.GetName())
	if err == nil {
		err = s.svc.DeleteRepository(ctx, repo)
	}
	if err != nil {
		return nil, withResource(err, "repository", req.GetName())
	}
	return &pb.DeleteRepositoryResponse{Revision: rev.Revision()}, nil
}

// --- branches

func (s *Server) CreateBranch(ctx context.Context, req *pb.CreateBranchRequest) (*pb.CreateBranchResponse, error) {
	ctx, rev := kv.WithRevisions(ctx)
	repo, err := parseRepository(req.GetParent())
	if err != nil {
		return nil, withResource(err, "repository", req.GetParent())
	}
	branch := graveler.BranchID(req.GetBranchId())
	name := BranchName(repo, branch)
	if err := graveler.ValidateBranchID(branch); err != nil {
		return nil, withResource(err, "branch", name)
	}
	src, err := requireRef("source_ref", req.GetSourceRef())
	if err != nil {
		return nil, withResource(err, "branch", name)
	}
	rec, err := s.svc.CreateBranch(ctx, repo, branch, src)
	if err != nil {
		return nil, withResource(err, "repository", req.GetParent(), "branch", name, "ref", string(src))
	}
	return &pb.CreateBranchResponse{Branch: branchPB(repo, rec), Revision: rev.Revision()}, nil
}

func (s *Server) GetBranch(ctx context.Context, req *pb.GetBranchRequest) (*pb.GetBranchResponse, error) {
	repo, branch, err := parseBranch(req.GetName())
	if err != nil {
		return nil, withResource(err, "branch", req.GetName())
	}
	rec, err := s.svc.GetBranch(ctx, repo, branch)
	if err != nil {
		return nil, withResource(err, "repository", RepositoryName(repo), "branch", req.GetName())
	}
	return &pb.GetBranchResponse{Branch: branchPB(repo, rec)}, nil
}

func (s *Server) ListBranches(ctx context.Context, req *pb.ListBranchesRequest) (*pb.ListBranchesResponse, error) {
	repo, err := parseRepository(req.GetParent())
	if err != nil {
		return nil, withResource(err, "repository", req.GetParent())
	}
	n, after, err := s.pageArgs("ListBranches", req, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, withResource(err, "repository", req.GetParent())
	}
	recs, more, err := take(s.svc.ListBranches(ctx, repo, graveler.ListBranchesOptions{After: string(after)}), n)
	if err != nil {
		return nil, withResource(err, "repository", req.GetParent())
	}
	resp := &pb.ListBranchesResponse{}
	for _, b := range recs {
		resp.Branches = append(resp.Branches, branchPB(repo, b))
	}
	if more {
		resp.NextPageToken = s.pager.encode("ListBranches", req, []byte(recs[len(recs)-1].BranchID))
	}
	return resp, nil
}

func (s *Server) DeleteBranch(ctx context.Context, req *pb.DeleteBranchRequest) (*pb.DeleteBranchResponse, error) {
	ctx, rev := kv.WithRevisions(ctx)
	repo, branch, err := parseBranch(req.GetName())
	if err == nil {
		err = s.svc.DeleteBranch(ctx, repo, branch)
	}
	if err != nil {
		return nil, withResource(err, "repository", RepositoryName(repo), "branch", req.GetName())
	}
	return &pb.DeleteBranchResponse{Revision: rev.Revision()}, nil
}

func (s *Server) ResetHard(ctx context.Context, req *pb.ResetHardRequest) (*pb.ResetHardResponse, error) {
	ctx, rev := kv.WithRevisions(ctx)
	repo, branch, err := parseBranch(req.GetName())
	if err != nil {
		return nil, withResource(err, "branch", req.GetName())
	}
	ref, err := requireRef("ref", req.GetRef())
	if err != nil {
		return nil, withResource(err, "branch", req.GetName())
	}
	rec, err := s.svc.ResetHard(ctx, repo, branch, ref, graveler.ResetHardOptions{
		ExpectedCommitID: graveler.CommitID(req.GetEtag()),
		Force:            req.GetForce(),
	})
	if err != nil {
		return nil, withResource(err, "repository", RepositoryName(repo), "branch", req.GetName(), "ref", string(ref), "etag", req.GetEtag())
	}
	return &pb.ResetHardResponse{Branch: branchPB(repo, rec), Revision: rev.Revision()}, nil
}

var resetTypes = map[pb.ResetScope]graveler.ResetType{
	pb.ResetScope_RESET_SCOPE_ALL:    graveler.ResetTypeAll,
	pb.ResetScope_RESET_SCOPE_KEY:    graveler.ResetTypeKey,
	pb.ResetScope_RESET_SCOPE_PREFIX: graveler.ResetTypePrefix,
}

func (s *Server) Reset(ctx context.Context, req *pb.ResetRequest) (*pb.ResetResponse, error) {
	ctx, rev := kv.WithRevisions(ctx)
	repo, branch, err := parseBranch(req.GetBranch())
	if err != nil {
		return nil, withResource(err, "branch", req.GetBranch())
	}
	typ, ok := resetTypes[req.GetScope()]
	switch {
	case req.GetScope() == pb.ResetScope_RESET_SCOPE_UNSPECIFIED:
		return nil, withResource(fmt.Errorf("%w: scope", ErrMissingField), "branch", req.GetBranch())
	case !ok:
		return nil, withResource(fmt.Errorf("%w: scope %d is not RESET_SCOPE_ALL, _KEY or _PREFIX", ErrInvalidField, req.GetScope()), "branch", req.GetBranch())
	}
	if typ != graveler.ResetTypeAll && len(req.GetKey()) == 0 {
		return nil, withResource(fmt.Errorf("%w: key", ErrMissingField), "branch", req.GetBranch())
	}
	if err := s.svc.Reset(ctx, repo, branch, typ, req.GetKey()); err != nil {
		return nil, withResource(err, "repository", RepositoryName(repo), "branch", req.GetBranch())
	}
	return &pb.ResetResponse{Revision: rev.Revision()}, nil
}

// --- tags

func (s *Server) CreateTag(ctx context.Context, req *pb.CreateTagRequest) (*pb.CreateTagResponse, error) {
	ctx, rev := kv.WithRevisions(ctx)
	repo, err := parseRepository(req.GetParent())
	if err != nil {
		return nil, withResource(err, "repository", req.GetParent())
	}
	tag := graveler.TagID(req.GetTagId())
	name := TagName(repo, tag)
	if err := graveler.ValidateTagID(tag); err != nil {
		return nil, withResource(err, "tag", name)
	}
	ref, err := requireRef("ref", req.GetRef())
	if err != nil {
		return nil, withResource(err, "tag", name)
	}
	id, err := s.svc.CreateTag(ctx, repo, tag, ref)
	if err != nil {
		return nil, withResource(err, "repository", req.GetParent(), "tag", name, "ref", string(ref))
	}
	return &pb.CreateTagResponse{Tag: tagPB(repo, &graveler.TagRecord{TagID: tag, CommitID: id}), Revision: rev.Revision()}, nil
}

func (s *Server) GetTag(ctx context.Context, req *pb.GetTagRequest) (*pb.GetTagResponse, error) {
	repo, tag, err := parseTag(req.GetName())
	if err != nil {
		return nil, withResource(err, "tag", req.GetName())
	}
	id, err := s.svc.GetTag(ctx, repo, tag)
	if err != nil {
		return nil, withResource(err, "repository", RepositoryName(repo), "tag", req.GetName())
	}
	return &pb.GetTagResponse{Tag: tagPB(repo, &graveler.TagRecord{TagID: tag, CommitID: id})}, nil
}

func (s *Server) ListTags(ctx context.Context, req *pb.ListTagsRequest) (*pb.ListTagsResponse, error) {
	repo, err := parseRepository(req.GetParent())
	if err != nil {
		return nil, withResource(err, "repository", req.GetParent())
	}
	n, after, err := s.pageArgs("ListTags", req, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, withResource(err, "repository", req.GetParent())
	}
	recs, more, err := take(s.svc.ListTags(ctx, repo, graveler.ListOptions{After: string(after)}), n)
	if err != nil {
		return nil, withResource(err, "repository", req.GetParent())
	}
	resp := &pb.ListTagsResponse{}
	for _, t := range recs {
		resp.Tags = append(resp.Tags, tagPB(repo, t))
	}
	if more {
		resp.NextPageToken = s.pager.encode("ListTags", req, []byte(recs[len(recs)-1].TagID))
	}
	return resp, nil
}

func (s *Server) DeleteTag(ctx context.Context, req *pb.DeleteTagRequest) (*pb.DeleteTagResponse, error) {
	ctx, rev := kv.WithRevisions(ctx)
	repo, tag, err := parseTag(req.GetName())
	if err == nil {
		err = s.svc.DeleteTag(ctx, repo, tag)
	}
	if err != nil {
		return nil, withResource(err, "repository", RepositoryName(repo), "tag", req.GetName())
	}
	return &pb.DeleteTagResponse{Revision: rev.Revision()}, nil
}

// --- commits and history

func (s *Server) GetCommit(ctx context.Context, req *pb.GetCommitRequest) (*pb.GetCommitResponse, error) {
	repo, ref, err := parseCommit(req.GetName())
	if err != nil {
		return nil, withResource(err, "commit", req.GetName())
	}
	rec, err := s.svc.GetCommit(ctx, repo, ref)
	if err != nil {
		return nil, withResource(err, "repository", RepositoryName(repo), "commit", req.GetName())
	}
	return &pb.GetCommitResponse{Commit: commitPB(repo, rec)}, nil
}

func (s *Server) ListCommits(ctx context.Context, req *pb.ListCommitsRequest) (*pb.ListCommitsResponse, error) {
	repo, err := parseRepository(req.GetParent())
	if err != nil {
		return nil, withResource(err, "repository", req.GetParent())
	}
	n, after, err := s.pageArgs("ListCommits", req, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, withResource(err, "repository", req.GetParent())
	}
	resp := &pb.ListCommitsResponse{}
	var last graveler.CommitID
	size := 0
	for c, err := range s.svc.ListCommits(ctx, repo, graveler.ListCommitsOptions{After: string(after)}) {
		if err != nil {
			return nil, withResource(err, "repository", req.GetParent())
		}
		// A commit message may be near 1 MiB: a page full by bytes ends short.
		if len(resp.Commits) == n || size >= responseBytes {
			resp.NextPageToken = s.pager.encode("ListCommits", req, []byte(last))
			break
		}
		m := commitPB(repo, c)
		resp.Commits = append(resp.Commits, m)
		size += proto.Size(m)
		last = c.CommitID
	}
	return resp, nil
}

// logCursor resumes a Log. A page ends with the frontier of the walk (the
// commits it has still to visit) and the next page resumes from it, so a
// page reads about page-size plus frontier commits wherever it lies in
// history, and a branch moving between pages does not shift them. The
// frontier is the number of lines of history open at that point: when it
// is above maxLogPending, or the service cannot report it, the cursor takes
// the skip form instead: the next page walks again from the commit the ref
// resolved to on the first page and skips the commits already returned
// (checking that the last of them is still there), which costs the whole
// history up to that page. In the skip form with first_parent the next page
// starts at the last commit returned.
type logCursor struct {
	start, last graveler.CommitID
	skip        uint64 // commits returned before this page
	pending     []graveler.CommitID
}

// maxLogPending bounds the frontier a Log page token carries (32 bytes a
// commit): 2 KiB of token.
const maxLogPending = 64

// Cursor layouts. Skip form: uvarint skip | uvarint len(start) | start |
// last. Frontier form: 0 | uvarint skip | uvarint len(start) | start |
// uvarint n | n raw commit ids. A skip-form cursor never starts with 0,
// since a next page exists only after a page of at least one commit.
func (c logCursor) encode() []byte {
	if len(c.pending) > 0 {
		b := binary.AppendUvarint([]byte{0}, c.skip)
		b = binary.AppendUvarint(b, uint64(len(c.start)))
		b = append(b, c.start...)
		b = binary.AppendUvarint(b, uint64(len(c.pending)))
		for _, id := range c.pending {
			b, _ = hex.AppendDecode(b, []byte(id))
		}
		return b
	}
	b := binary.AppendUvarint(nil, c.skip)
	b = binary.AppendUvarint(b, uint64(len(c.start)))
	b = append(b, c.start...)
	return append(b, c.last...)
}

func decodeLogCursor(b []byte) (logCursor, error) {
	bad := fmt.Errorf("%w: bad cursor", ErrInvalidPageToken)
	frontier := len(b) > 0 && b[0] == 0
	if frontier {
		b = b[1:]
	}
	skip, n := binary.Uvarint(b)
	if n <= 0 {
		return logCursor{}, bad
	}
	b = b[n:]
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return logCursor{}, bad
	}
	b = b[n:]
	c := logCursor{skip: skip, start: graveler.CommitID(b[:l])}
	b = b[l:]
	if !frontier {
		c.last = graveler.CommitID(b)
		return c, nil
	}
	const idLen = graveler.CommitIDLen / 2
	k, n := binary.Uvarint(b)
	if n <= 0 || k == 0 || k > maxLogPending || uint64(len(b)-n) != k*idLen {
		return logCursor{}, bad
	}
	for b = b[n:]; len(b) > 0; b = b[idLen:] {
		c.pending = append(c.pending, graveler.CommitID(hex.EncodeToString(b[:idLen])))
	}
	return c, nil
}

func (s *Server) Log(ctx context.Context, req *pb.LogRequest) (*pb.LogResponse, error) {
	repo, err := parseRepository(req.GetRepository())
	if err != nil {
		return nil, withResource(err, "repository", req.GetRepository())
	}
	ref, err := requireRef("ref", req.GetRef())
	if err != nil {
		return nil, withResource(err, "repository", req.GetRepository())
	}
	res := func(err error) error {
		return withResource(err, "repository", req.GetRepository(), "ref", string(ref))
	}
	n, raw, err := s.pageArgs("Log", req, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, res(err)
	}
	pos := &graveler.LogPosition{}
	opts := graveler.LogOptions{FirstParent: req.GetFirstParent(), Since: timeOf(req.GetSince()), Position: pos}
	var cur logCursor
	if raw == nil {
		head, err := s.svc.GetCommit(ctx, repo, ref)
		if err != nil {
			return nil, res(err)
		}
		cur.start = head.CommitID
	} else if cur, err = decodeLogCursor(raw); err != nil {
		return nil, res(err)
	}
	from, skip := cur.start, cur.skip
	switch {
	case len(cur.pending) > 0:
		opts.Resume, skip = cur.pending, 0
	case raw != nil && opts.FirstParent:
		from, skip = cur.last, 1
	}
	seq := s.svc.Log(ctx, repo, graveler.Ref(from), opts)
	resp := &pb.LogResponse{}
	var seen uint64
	var pending []graveler.CommitID
	more, size := false, 0
	for c, err := range seq {
		if err != nil {
			if raw != nil && seen == 0 && (errors.Is(err, graveler.ErrCommitNotFound) || errors.Is(err, graveler.ErrRefNotFound)) {
				// Before the first commit, a walk reads only the commits
				// the token names, which existed when it was issued, and
				// commits are never removed: the token outlived its
				// repository (deleted and created again under the name)
				// or was forged. A NOT_FOUND would name a commit the
				// client never sent and tell it to fix the name.
				return nil, res(fmt.Errorf("%w: it names commits the repository does not have (was it deleted and created again?): start the listing again (%v)", ErrInvalidPageToken, err))
			}
			return nil, res(err)
		}
		seen++
		if seen <= skip {
			if seen == skip && !opts.FirstParent && c.CommitID != cur.last {
				return nil, res(fmt.Errorf("%w: history changed", ErrInvalidPageToken))
			}
			continue
		}
		if len(resp.Commits) == n {
			more = true
			break
		}
		m := commitPB(repo, c)
		resp.Commits = append(resp.Commits, m)
		cur.last = c.CommitID
		if size += proto.Size(m); size >= responseBytes {
			n = len(resp.Commits) // full by bytes: the page ends here
		}
		if len(resp.Commits) == n && pos.Pending != nil {
			pending = pos.Pending()
		}
	}
	if more {
		cur.skip += uint64(len(resp.Commits))
		cur.pending = nil
		if len(pending) <= maxLogPending && !slices.ContainsFunc(pending, func(id graveler.CommitID) bool {
			return graveler.ValidateCommitID(id) != nil
		}) {
			cur.pending = pending
		}
		resp.NextPageToken = s.pager.encode("Log", req, cur.encode())
	}
	return resp, nil
}

func (s *Server) StreamLog(req *pb.StreamLogRequest, stream grpc.ServerStreamingServer[pb.StreamLogResponse]) error {
	ctx := stream.Context()
	repo, err := parseRepository(req.GetRepository())
	if err != nil {
		return withResource(err, "repository", req.GetRepository())
	}
	ref, err := requireRef("ref", req.GetRef())
	if err != nil {
		return withResource(err, "repository", req.GetRepository())
	}
	opts := graveler.LogOptions{FirstParent: req.GetFirstParent(), Since: timeOf(req.GetSince())}
	b := &batcher[*pb.Commit]{max: streamLogBatch, send: func(cs []*pb.Commit) error { return stream.Send(&pb.StreamLogResponse{Commits: cs}) }}
	for c, err := range s.svc.Log(ctx, repo, ref, opts) {
		if err != nil {
			return withResource(err, "repository", req.GetRepository(), "ref", string(ref))
		}
		if err := b.add(commitPB(repo, c)); err != nil {
			return err
		}
	}
	return b.flush()
}

// batcher collects a stream's items and sends them max at a time, or as
// soon as their encoded size reaches responseBytes; flush sends the rest.
type batcher[T proto.Message] struct {
	max   int
	send  func([]T) error
	items []T
	size  int
}

func (b *batcher[T]) add(x T) error {
	b.items = append(b.items, x)
	if b.size += proto.Size(x); len(b.items) < b.max && b.size < responseBytes {
		return nil
	}
	return b.flush()
}

func (b *batcher[T]) flush() error {
	if len(b.items) == 0 {
		return nil
	}
	items := b.items
	b.items, b.size = nil, 0
	return b.send(items)
}

// --- entries

func (s *Server) GetEntry(ctx context.Context, req *pb.GetEntryRequest) (*pb.GetEntryResponse, error) {
	repo, err := parseRepository(req.GetRepository())
	if err != nil {
		return nil, withResource(err, "repository", req.GetRepository())
	}
	ref, err := requireRef("ref", req.GetRef())
	if err != nil {
		return nil, withResource(err, "repository", req.GetRepository())
	}
	v, err := s.svc.Get(ctx, repo, ref, req.GetKey())
	if err != nil {
		return nil, withResource(err, "repository", req.GetRepository(), "ref", string(ref), "key", string(req.GetKey()))
	}
	return &pb.GetEntryResponse{Entry: &pb.Entry{Key: req.GetKey(), Value: valuePB(v)}}, nil
}

func entryValue(e *pb.Entry) (graveler.Value, error) {
	if e.GetValue() == nil {
		return graveler.Value{}, fmt.Errorf("%w: entry.value", ErrMissingField)
	}
	return graveler.Value{Identity: e.GetValue().GetIdentity(), Data: e.GetValue().GetData()}, nil
}

func (s *Server) PutEntry(ctx context.Context, req *pb.PutEntryRequest) (*pb.PutEntryResponse, error) {
	repo, branch, err := parseBranch(req.GetBranch())
	if err != nil {
		return nil, withResource(err, "branch", req.GetBranch())
	}
	key := req.GetEntry().GetKey()
	v, err := entryValue(req.GetEntry())
	if err == nil {
		err = s.svc.Set(ctx, repo, branch, key, v, graveler.SetOptions{IfAbsent: req.GetIfAbsent()})
	}
	if err != nil {
		return nil, withResource(err, "repository", RepositoryName(repo), "branch", req.GetBranch(), "key", string(key))
	}
	return &pb.PutEntryResponse{}, nil
}

func (s *Server) BatchPutEntries(ctx context.Context, req *pb.BatchPutEntriesRequest) (*pb.BatchPutEntriesResponse, error) {
	repo, branch, err := parseBranch(req.GetBranch())
	if err != nil {
		return nil, withResource(err, "branch", req.GetBranch())
	}
	res := func(err error) error {
		return withResource(err, "repository", RepositoryName(repo), "branch", req.GetBranch())
	}
	if len(req.GetEntries()) > s.cfg.MaxBatchEntries {
		return nil, res(fmt.Errorf("%w: %d entries, limit %d", ErrBatchTooLarge, len(req.GetEntries()), s.cfg.MaxBatchEntries))
	}
	// An entry refused, here or by SetBatch, is named by its index among
	// up to MaxBatchEntries.
	bad := func(ee *graveler.EntryError) error {
		return withResource(ee, "repository", RepositoryName(repo), "branch", req.GetBranch(), "entryIndex", strconv.Itoa(ee.Index), "key", string(ee.Key))
	}
	recs := make([]*graveler.ValueRecord, 0, len(req.GetEntries()))
	for i, e := range req.GetEntries() {
		v, err := entryValue(e)
		if err != nil {
			return nil, bad(&graveler.EntryError{Index: i, Key: e.GetKey(), Err: err})
		}
		recs = append(recs, &graveler.ValueRecord{Key: e.GetKey(), Value: &v})
	}
	if err := s.svc.SetBatch(ctx, repo, branch, recs); err != nil {
		if ee, ok := errors.AsType[*graveler.EntryError](err); ok {
			return nil, bad(ee)
		}
		return nil, res(err)
	}
	return &pb.BatchPutEntriesResponse{}, nil
}

func (s *Server) DeleteEntry(ctx context.Context, req *pb.DeleteEntryRequest) (*pb.DeleteEntryResponse, error) {
	repo, branch, err := parseBranch(req.GetBranch())
	if err == nil {
		// Not a kv delete: the service stages a tombstone (a write).
		err = s.svc.Delete(ctx, repo, branch, req.GetKey())
	}
	if err != nil {
		return nil, withResource(err, "repository", RepositoryName(repo), "branch", req.GetBranch(), "key", string(req.GetKey()))
	}
	return &pb.DeleteEntryResponse{}, nil
}

func (s *Server) DeletePrefix(ctx context.Context, req *pb.DeletePrefixRequest) (*pb.DeletePrefixResponse, error) {
	repo, branch, err := parseBranch(req.GetBranch())
	if err == nil {
		err = s.svc.DeletePrefix(ctx, repo, branch, req.GetPrefix())
	}
	if err != nil {
		return nil, withResource(err, "repository", RepositoryName(repo), "branch", req.GetBranch(), "prefix", string(req.GetPrefix()))
	}
	return &pb.DeletePrefixResponse{}, nil
}

func (s *Server) ListEntries(ctx context.Context, req *pb.ListEntriesRequest) (*pb.ListEntriesResponse, error) {
	repo, err := parseRepository(req.GetRepository())
	if err != nil {
		return nil, withResource(err, "repository", req.GetRepository())
	}
	ref, err := requireRef("ref", req.GetRef())
	if err != nil {
		return nil, withResource(err, "repository", req.GetRepository())
	}
	res := func(err error) error {
		return withResource(err, "repository", req.GetRepository(), "ref", string(ref))
	}
	n, after, resume, err := s.entriesPageArgs(req)
	if err != nil {
		return nil, res(err)
	}
	page, err := s.svc.ListEntriesPage(ctx, repo, ref, graveler.ListEntriesOptions{
		Prefix: req.GetPrefix(), After: after, Resume: resume, Delimiter: req.GetDelimiter(), Limit: n, MaxBytes: responseBytes,
	})
	if err != nil {
		return nil, res(err)
	}
	resp := &pb.ListEntriesResponse{}
	for _, r := range page.Rows {
		resp.Entries = append(resp.Entries, listingPB(r))
	}
	switch {
	case !page.More:
	case page.ResumeAfter != nil:
		resp.NextPageToken = s.pager.encode(listEntriesResume, req, page.ResumeAfter)
	case len(page.Rows) > 0:
		resp.NextPageToken = s.pager.encode("ListEntries", req, page.Rows[len(page.Rows)-1].Key)
	}
	return resp, nil
}

// listEntriesResume is the method name a ListEntries page token carries
// when a short page ends at a key it examined but did not return: the next
// page lists strictly after that key, also inside a common prefix, where
// an ordinary token skips the whole common prefix it ends on.
const listEntriesResume = "ListEntries/resume"

// entriesPageArgs is pageArgs for ListEntries, telling its two kinds of
// token apart (both are authenticated by the pager).
func (s *Server) entriesPageArgs(req *pb.ListEntriesRequest) (int, []byte, bool, error) {
	n, after, err := s.pageArgs("ListEntries", req, req.GetPageSize(), req.GetPageToken())
	if err == nil {
		return n, after, false, nil
	}
	if _, rerr := s.pager.decode(listEntriesResume, req, req.GetPageToken()); rerr != nil {
		return 0, nil, false, err
	}
	n, after, err = s.pageArgs(listEntriesResume, req, req.GetPageSize(), req.GetPageToken())
	return n, after, err == nil, err
}

// StreamEntries sends the listing in bounded pages (ListEntriesPage), so
// memory stays bounded by one page however many tombstones it passes;
// pages with no rows send nothing.
func (s *Server) StreamEntries(req *pb.StreamEntriesRequest, stream grpc.ServerStreamingServer[pb.StreamEntriesResponse]) error {
	ctx := stream.Context()
	repo, err := parseRepository(req.GetRepository())
	if err != nil {
		return withResource(err, "repository", req.GetRepository())
	}
	ref, err := requireRef("ref", req.GetRef())
	if err != nil {
		return withResource(err, "repository", req.GetRepository())
	}
	opts := graveler.ListEntriesOptions{Prefix: req.GetPrefix(), Delimiter: req.GetDelimiter(), Limit: streamEntriesBatch, MaxBytes: responseBytes}
	for {
		page, err := s.svc.ListEntriesPage(ctx, repo, ref, opts)
		if err != nil {
			return withResource(err, "repository", req.GetRepository(), "ref", string(ref))
		}
		if len(page.Rows) > 0 {
			msg := &pb.StreamEntriesResponse{}
			for _, r := range page.Rows {
				msg.Entries = append(msg.Entries, listingPB(r))
			}
			if err := stream.Send(msg); err != nil {
				return err
			}
		}
		switch {
		case !page.More:
			return nil
		case page.ResumeAfter != nil:
			opts.After, opts.Resume = page.ResumeAfter, true
		case len(page.Rows) > 0:
			opts.After, opts.Resume = page.Rows[len(page.Rows)-1].Key, false
		default:
			return nil
		}
	}
}

// --- commit, diff, merge

// commitResult reads back the commit a write (commit, merge, revert,
// cherry-pick) has just recorded and moved its branch to. The write is
// done: a failure of this read must not reach the client as what the
// read failed with (UNAVAILABLE says nothing happened: retry), so it is
// OUTCOME_UNKNOWN, naming the commit.
func (s *Server) commitResult(ctx context.Context, repo graveler.RepositoryID, id graveler.CommitID) (*pb.Commit, error) {
	rec, err := s.svc.GetCommit(ctx, repo, graveler.Ref(id))
	if err != nil {
		return nil, fmt.Errorf("%w: recorded as commit %s, but reading it back failed: %w", graveler.ErrAmbiguous, id, err)
	}
	return commitPB(repo, rec), nil
}

func (s *Server) Commit(ctx context.Context, req *pb.CommitRequest) (*pb.CommitResponse, error) {
	ctx, rev := kv.WithRevisions(ctx)
	repo, branch, err := parseBranch(req.GetBranch())
	if err != nil {
		return nil, withResource(err, "branch", req.GetBranch())
	}
	var c *pb.Commit
	id, err := s.svc.Commit(ctx, repo, branch, commitParams(ctx, req.GetOptions()))
	if err == nil {
		c, err = s.commitResult(ctx, repo, id)
	}
	if err != nil {
		return nil, withResource(err, "repository", RepositoryName(repo), "branch", req.GetBranch())
	}
	return &pb.CommitResponse{Commit: c, Revision: rev.Revision()}, nil
}

// diffPage reads up to n differences after the cursor key and reports
// whether more follow.
func diffPage(it graveler.DiffIterator, after graveler.Key, n int) ([]*pb.Difference, bool, error) {
	defer it.Close()
	if after != nil {
		it.SeekGE(after)
	}
	var out []*pb.Difference
	size := 0
	for it.Next() {
		d := it.Value()
		if after != nil && bytes.Equal(d.Key, after) {
			continue
		}
		if len(out) == n || size >= responseBytes {
			return out, true, nil
		}
		m := diffPB(d)
		out = append(out, m)
		size += proto.Size(m)
	}
	return out, false, it.Err()
}

func streamDiff(it graveler.DiffIterator, send func([]*pb.Difference) error) error {
	defer it.Close()
	b := &batcher[*pb.Difference]{max: streamDiffBatch, send: send}
	for it.Next() {
		if err := b.add(diffPB(it.Value())); err != nil {
			return err
		}
	}
	if err := it.Err(); err != nil {
		return err
	}
	return b.flush()
}

func (s *Server) diffArgs(repository, left, right string) (graveler.RepositoryID, graveler.Ref, graveler.Ref, error) {
	repo, err := parseRepository(repository)
	if err != nil {
		return "", "", "", err
	}
	l, err := requireRef("left_ref", left)
	if err != nil {
		return "", "", "", err
	}
	r, err := requireRef("right_ref", right)
	if err != nil {
		return "", "", "", err
	}
	return repo, l, r, nil
}

func (s *Server) Diff(ctx context.Context, req *pb.DiffRequest) (*pb.DiffResponse, error) {
	res := func(err error) error {
		return withResource(err, "repository", req.GetRepository(), "leftRef", req.GetLeftRef(), "rightRef", req.GetRightRef())
	}
	repo, left, right, err := s.diffArgs(req.GetRepository(), req.GetLeftRef(), req.GetRightRef())
	if err != nil {
		return nil, res(err)
	}
	n, after, err := s.pageArgs("Diff", req, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, res(err)
	}
	it, err := s.svc.Diff(ctx, repo, left, right)
	if err != nil {
		return nil, res(err)
	}
	diffs, more, err := diffPage(it, after, n)
	if err != nil {
		return nil, res(err)
	}
	resp := &pb.DiffResponse{Differences: diffs}
	if more {
		resp.NextPageToken = s.pager.encode("Diff", req, diffs[len(diffs)-1].GetKey())
	}
	return resp, nil
}

func (s *Server) StreamDiff(req *pb.StreamDiffRequest, stream grpc.ServerStreamingServer[pb.StreamDiffResponse]) error {
	res := func(err error) error {
		return withResource(err, "repository", req.GetRepository(), "leftRef", req.GetLeftRef(), "rightRef", req.GetRightRef())
	}
	repo, left, right, err := s.diffArgs(req.GetRepository(), req.GetLeftRef(), req.GetRightRef())
	if err != nil {
		return res(err)
	}
	it, err := s.svc.Diff(stream.Context(), repo, left, right)
	if err != nil {
		return res(err)
	}
	return res(streamDiff(it, func(d []*pb.Difference) error {
		return stream.Send(&pb.StreamDiffResponse{Differences: d})
	}))
}

func (s *Server) DiffUncommitted(ctx context.Context, req *pb.DiffUncommittedRequest) (*pb.DiffUncommittedResponse, error) {
	repo, branch, err := parseBranch(req.GetBranch())
	if err != nil {
		return nil, withResource(err, "branch", req.GetBranch())
	}
	res := func(err error) error {
		return withResource(err, "repository", RepositoryName(repo), "branch", req.GetBranch())
	}
	n, after, err := s.pageArgs("DiffUncommitted", req, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, res(err)
	}
	it, err := s.svc.DiffUncommitted(ctx, repo, branch)
	if err != nil {
		return nil, res(err)
	}
	diffs, more, err := diffPage(it, after, n)
	if err != nil {
		return nil, res(err)
	}
	resp := &pb.DiffUncommittedResponse{Differences: diffs}
	if more {
		resp.NextPageToken = s.pager.encode("DiffUncommitted", req, diffs[len(diffs)-1].GetKey())
	}
	return resp, nil
}

func (s *Server) StreamDiffUncommitted(req *pb.StreamDiffUncommittedRequest, stream grpc.ServerStreamingServer[pb.StreamDiffUncommittedResponse]) error {
	repo, branch, err := parseBranch(req.GetBranch())
	if err != nil {
		return withResource(err, "branch", req.GetBranch())
	}
	it, err := s.svc.DiffUncommitted(stream.Context(), repo, branch)
	if err == nil {
		err = streamDiff(it, func(d []*pb.Difference) error {
			return stream.Send(&pb.StreamDiffUncommittedResponse{Differences: d})
		})
	}
	return withResource(err, "repository", RepositoryName(repo), "branch", req.GetBranch())
}

var mergeStrategies = map[pb.MergeStrategy]graveler.MergeStrategy{
	pb.MergeStrategy_MERGE_STRATEGY_UNSPECIFIED: graveler.MergeStrategyNone,
	pb.MergeStrategy_MERGE_STRATEGY_DEST_WINS:   graveler.MergeStrategyDestWins,
	pb.MergeStrategy_MERGE_STRATEGY_SOURCE_WINS: graveler.MergeStrategySourceWins,
}

func (s *Server) Merge(ctx context.Context, req *pb.MergeRequest) (*pb.MergeResponse, error) {
	ctx, rev := kv.WithRevisions(ctx)
	repo, branch, err := parseBranch(req.GetDestination())
	if err != nil {
		return nil, withResource(err, "branch", req.GetDestination())
	}
	res := func(err error) error {
		return withResource(err, "repository", RepositoryName(repo), "branch", req.GetDestination(), "ref", req.GetSourceRef())
	}
	src, err := requireRef("source_ref", req.GetSourceRef())
	if err != nil {
		return nil, res(err)
	}
	strategy, ok := mergeStrategies[req.GetStrategy()]
	if !ok {
		return nil, res(fmt.Errorf("%w: strategy %d is not MERGE_STRATEGY_UNSPECIFIED, _DEST_WINS or _SOURCE_WINS", ErrInvalidField, req.GetStrategy()))
	}
	var c *pb.Commit
	id, ff, err := s.svc.Merge(ctx, repo, branch, src, graveler.MergeParams{CommitParams: commitParams(ctx, req.GetOptions()), Strategy: strategy, NoFastForward: req.GetNoFf()})
	if err == nil {
		c, err = s.commitResult(ctx, repo, id)
	}
	if err != nil {
		return nil, res(err)
	}
	return &pb.MergeResponse{Commit: c, Revision: rev.Revision(), FastForward: ff}, nil
}

type pickFunc func(ctx context.Context, repo graveler.RepositoryID, branch graveler.BranchID, ref graveler.Ref, parentNumber int, params graveler.CommitParams) (graveler.CommitID, error)

func (s *Server) pick(ctx context.Context, f pickFunc, branchName, refStr string, parent int32, opts *pb.CommitOptions) (*pb.Commit, error) {
	repo, branch, err := parseBranch(branchName)
	if err != nil {
		return nil, withResource(err, "branch", branchName)
	}
	res := func(err error) error {
		return withResource(err, "repository", RepositoryName(repo), "branch", branchName, "ref", refStr)
	}
	ref, err := requireRef("ref", refStr)
	if err != nil {
		return nil, res(err)
	}
	if parent < 0 {
		return nil, res(fmt.Errorf("%w: %d is negative", graveler.ErrInvalidParentNumber, parent))
	}
	var c *pb.Commit
	id, err := f(ctx, repo, branch, ref, int(parent), commitParams(ctx, opts))
	if err == nil {
		c, err = s.commitResult(ctx, repo, id)
	}
	return c, res(err)
}

func (s *Server) Revert(ctx context.Context, req *pb.RevertRequest) (*pb.RevertResponse, error) {
	ctx, rev := kv.WithRevisions(ctx)
	c, err := s.pick(ctx, s.svc.Revert, req.GetBranch(), req.GetRef(), req.GetParentNumber(), req.GetOptions())
	if err != nil {
		return nil, err
	}
	return &pb.RevertResponse{Commit: c, Revision: rev.Revision()}, nil
}

func (s *Server) CherryPick(ctx context.Context, req *pb.CherryPickRequest) (*pb.CherryPickResponse, error) {
	ctx, rev := kv.WithRevisions(ctx)
	c, err := s.pick(ctx, s.svc.CherryPick, req.GetBranch(), req.GetRef(), req.GetParentNumber(), req.GetOptions())
	if err != nil {
		return nil, err
	}
	return &pb.CherryPickResponse{Commit: c, Revision: rev.Revision()}, nil
}

// --- dump and restore

func (s *Server) DumpRefs(req *pb.DumpRefsRequest, stream grpc.ServerStreamingServer[pb.DumpRefsResponse]) error {
	repo, err := parseRepository(req.GetRepository())
	if err != nil {
		return withResource(err, "repository", req.GetRepository())
	}
	b := &batcher[*pb.RefsRecord]{max: streamRefsBatch, send: func(rs []*pb.RefsRecord) error { return stream.Send(&pb.DumpRefsResponse{Records: rs}) }}
	for r, err := range s.svc.DumpRefs(stream.Context(), repo) {
		if err != nil {
			return withResource(err, "repository", req.GetRepository())
		}
		rec := &pb.RefsRecord{}
		switch {
		case r.Commit != nil:
			rec.Record = &pb.RefsRecord_Commit{Commit: commitPB(repo, r.Commit)}
		case r.Branch != nil:
			rec.Record = &pb.RefsRecord_Branch{Branch: branchPB(repo, r.Branch)}
		case r.Tag != nil:
			rec.Record = &pb.RefsRecord_Tag{Tag: tagPB(repo, r.Tag)}
		default:
			continue
		}
		if err := b.add(rec); err != nil {
			return err
		}
	}
	return b.flush()
}

func refsRecordFromPB(r *pb.RefsRecord) (*graveler.RefsRecord, error) {
	switch v := r.GetRecord().(type) {
	case *pb.RefsRecord_Commit:
		return &graveler.RefsRecord{Commit: commitFromPB(v.Commit)}, nil
	case *pb.RefsRecord_Branch:
		// A dump names its source repository; restoring it elsewhere
		// (the point of a backup) keeps only the branch id.
		_, b, err := parseBranch(v.Branch.GetName())
		if err != nil {
			return nil, err
		}
		return &graveler.RefsRecord{Branch: &graveler.BranchRecord{BranchID: b, Branch: &graveler.Branch{CommitID: graveler.CommitID(v.Branch.GetCommitId())}}}, nil
	case *pb.RefsRecord_Tag:
		_, t, err := parseTag(v.Tag.GetName())
		if err != nil {
			return nil, err
		}
		return &graveler.RefsRecord{Tag: &graveler.TagRecord{TagID: t, CommitID: graveler.CommitID(v.Tag.GetCommitId())}}, nil
	}
	return nil, fmt.Errorf("%w: empty refs record", ErrMissingField)
}

func (s *Server) RestoreRefs(stream grpc.ClientStreamingServer[pb.RestoreRefsRequest, pb.RestoreRefsResponse]) error {
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: repository", ErrMissingField)
	}
	if err != nil {
		return err
	}
	repo, err := parseRepository(first.GetRepository())
	if err != nil {
		return withResource(err, "repository", first.GetRepository())
	}
	var count int64
	records := func(yield func(*graveler.RefsRecord, error) bool) {
		msg := first
		for {
			if msg.GetRepository() != "" && msg.GetRepository() != first.GetRepository() {
				yield(nil, fmt.Errorf("%w: repository changed mid-stream to %s", ErrInvalidName, graveler.Echo(msg.GetRepository())))
				return
			}
			for _, r := range msg.GetRecords() {
				rec, err := refsRecordFromPB(r)
				if err != nil {
					yield(nil, err)
					return
				}
				count++
				if !yield(rec, nil) {
					return
				}
			}
			var err error
			msg, err = stream.Recv()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(nil, err)
				return
			}
		}
	}
	ctx, rev := kv.WithRevisions(stream.Context())
	if err := s.svc.RestoreRefs(ctx, repo, iter.Seq2[*graveler.RefsRecord, error](records)); err != nil {
		return withResource(err, "repository", first.GetRepository())
	}
	return stream.SendAndClose(&pb.RestoreRefsResponse{Records: count, Revision: rev.Revision()})
}

// --- helpers

// pageArgs validates page_size and decodes page_token into a cursor.
func (s *Server) pageArgs(method string, req proto.Message, size int32, token string) (int, []byte, error) {
	n, err := pageSize(size)
	if err != nil {
		return 0, nil, err
	}
	cur, err := s.pager.decode(method, req, token)
	if err != nil {
		return 0, nil, err
	}
	return n, cur, nil
}

// take reads up to n items of seq and reports whether more follow.
func take[T any](seq iter.Seq2[T, error], n int) ([]T, bool, error) {
	out := make([]T, 0, n)
	for v, err := range seq {
		if err != nil {
			return nil, false, err
		}
		if len(out) == n {
			return out, true, nil
		}
		out = append(out, v)
	}
	return out, false, nil
}
