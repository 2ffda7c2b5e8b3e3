package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "graveler/api/graveler/v1"
	"graveler/graveler"
	"graveler/graveler/ref"
)

// emptyWorld is a Service with no repositories: creating one succeeds and
// everything else is "repository not found". Like the real service it
// validates the ids, refs, keys, values and namespaces it receives, and it
// records any call with a repository id the server should have rejected
// while parsing the resource name.
type emptyWorld struct {
	mu         sync.Mutex
	violations []string
}

func (w *emptyWorld) violate(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.violations = append(w.violations, fmt.Sprintf(format, args...))
}

func (w *emptyWorld) takeViolations() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := w.violations
	w.violations = nil
	return v
}

// repo checks the ids the server passes and returns the "not found" answer.
func (w *emptyWorld) repo(method string, repo graveler.RepositoryID, ids ...any) error {
	if err := graveler.ValidateRepositoryID(repo); err != nil {
		w.violate("%s: server passed invalid repository id %q", method, repo)
	}
	for _, id := range ids {
		switch v := id.(type) {
		case graveler.BranchID:
			if err := graveler.ValidateBranchID(v); err != nil {
				return err
			}
		case graveler.TagID:
			if err := graveler.ValidateTagID(v); err != nil {
				return err
			}
		case graveler.Ref:
			if _, perr := ref.ParseRef(v); perr != nil {
				return perr
			}
		case graveler.Key:
			if kerr := graveler.ValidateKey(v); kerr != nil {
				return kerr
			}
		}
	}
	return fmt.Errorf("%w: %s", graveler.ErrRepositoryNotFound, repo)
}

func failSeq[T any](err error) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		yield(zero, err)
	}
}

func (w *emptyWorld) CreateRepository(ctx context.Context, id graveler.RepositoryID, ns graveler.StorageNamespace, b graveler.BranchID) (*graveler.RepositoryRecord, error) {
	if err := w.repo("CreateRepository", id, b); !errors.Is(err, graveler.ErrRepositoryNotFound) {
		return nil, err
	}
	if err := graveler.ValidateStorageNamespace(ns); err != nil {
		return nil, err
	}
	return &graveler.RepositoryRecord{RepositoryID: id, Repository: &graveler.Repository{StorageNamespace: ns, DefaultBranchID: b, State: graveler.RepositoryStateActive, UniqueID: "u1"}}, nil
}

func (w *emptyWorld) CreateBareRepository(ctx context.Context, id graveler.RepositoryID, ns graveler.StorageNamespace, b graveler.BranchID) (*graveler.RepositoryRecord, error) {
	return w.CreateRepository(ctx, id, ns, b)
}

func (w *emptyWorld) GetRepository(ctx context.Context, id graveler.RepositoryID) (*graveler.RepositoryRecord, error) {
	return nil, w.repo("GetRepository", id)
}

func (w *emptyWorld) ListRepositories(ctx context.Context, opts graveler.ListOptions) iter.Seq2[*graveler.RepositoryRecord, error] {
	return func(func(*graveler.RepositoryRecord, error) bool) {}
}

func (w *emptyWorld) DeleteRepository(ctx context.Context, id graveler.RepositoryID) error {
	return w.repo("DeleteRepository", id)
}

func (w *emptyWorld) CreateBranch(ctx context.Context, repo graveler.RepositoryID, b graveler.BranchID, src graveler.Ref) (*graveler.BranchRecord, error) {
	return nil, w.repo("CreateBranch", repo, b, src)
}

func (w *emptyWorld) GetBranch(ctx context.Context, repo graveler.RepositoryID, b graveler.BranchID) (*graveler.BranchRecord, error) {
	return nil, w.repo("GetBranch", repo, b)
}

func (w *emptyWorld) ListBranches(ctx context.Context, repo graveler.RepositoryID, opts graveler.ListBranchesOptions) iter.Seq2[*graveler.BranchRecord, error] {
	return failSeq[*graveler.BranchRecord](w.repo("ListBranches", repo))
}

func (w *emptyWorld) DeleteBranch(ctx context.Context, repo graveler.RepositoryID, b graveler.BranchID) error {
	return w.repo("DeleteBranch", repo, b)
}

func (w *emptyWorld) ResetHard(ctx context.Context, repo graveler.RepositoryID, b graveler.BranchID, r graveler.Ref, opts graveler.ResetHardOptions) (*graveler.BranchRecord, error) {
	return nil, w.repo("ResetHard", repo, b, r)
}

func (w *emptyWorld) CreateTag(ctx context.Context, repo graveler.RepositoryID, t graveler.TagID, r graveler.Ref) (graveler.CommitID, error) {
	return "", w.repo("CreateTag", repo, t, r)
}

func (w *emptyWorld) GetTag(ctx context.Context, repo graveler.RepositoryID, t graveler.TagID) (graveler.CommitID, error) {
	return "", w.repo("GetTag", repo, t)
}

func (w *emptyWorld) DeleteTag(ctx context.Context, repo graveler.RepositoryID, t graveler.TagID) error {
	return w.repo("DeleteTag", repo, t)
}

func (w *emptyWorld) ListTags(ctx context.Context, repo graveler.RepositoryID, opts graveler.ListOptions) iter.Seq2[*graveler.TagRecord, error] {
	return failSeq[*graveler.TagRecord](w.repo("ListTags", repo))
}

func (w *emptyWorld) GetCommit(ctx context.Context, repo graveler.RepositoryID, r graveler.Ref) (*graveler.CommitRecord, error) {
	return nil, w.repo("GetCommit", repo, r)
}

func (w *emptyWorld) Log(ctx context.Context, repo graveler.RepositoryID, r graveler.Ref, opts graveler.LogOptions) iter.Seq2[*graveler.CommitRecord, error] {
	return failSeq[*graveler.CommitRecord](w.repo("Log", repo, r))
}

func (w *emptyWorld) ListCommits(ctx context.Context, repo graveler.RepositoryID, opts graveler.ListCommitsOptions) iter.Seq2[*graveler.CommitRecord, error] {
	return failSeq[*graveler.CommitRecord](w.repo("ListCommits", repo))
}

func (w *emptyWorld) Get(ctx context.Context, repo graveler.RepositoryID, r graveler.Ref, key graveler.Key) (*graveler.Value, error) {
	return nil, w.repo("Get", repo, r, key)
}

func (w *emptyWorld) Set(ctx context.Context, repo graveler.RepositoryID, b graveler.BranchID, key graveler.Key, v graveler.Value, opts graveler.SetOptions) error {
	if err := graveler.ValidateValue(&v); err != nil {
		return err
	}
	return w.repo("Set", repo, b, key)
}

func (w *emptyWorld) SetBatch(ctx context.Context, repo graveler.RepositoryID, b graveler.BranchID, recs []*graveler.ValueRecord) error {
	for _, r := range recs {
		if err := graveler.ValidateKey(r.Key); err != nil {
			return err
		}
		if r.Value != nil {
			if err := graveler.ValidateValue(r.Value); err != nil {
				return err
			}
		}
	}
	return w.repo("SetBatch", repo, b)
}

func (w *emptyWorld) Delete(ctx context.Context, repo graveler.RepositoryID, b graveler.BranchID, key graveler.Key) error {
	return w.repo("Delete", repo, b, key)
}

func (w *emptyWorld) DeletePrefix(ctx context.Context, repo graveler.RepositoryID, b graveler.BranchID, prefix graveler.Key) error {
	return w.repo("DeletePrefix", repo, b, prefix)
}

func (w *emptyWorld) ListEntriesPage(ctx context.Context, repo graveler.RepositoryID, r graveler.Ref, opts graveler.ListEntriesOptions) (*graveler.EntriesPage, error) {
	if opts.Limit <= 0 {
		w.violate("ListEntriesPage: server passed limit %d", opts.Limit)
	}
	return nil, w.repo("ListEntries", repo, r)
}

func (w *emptyWorld) ListEntries(ctx context.Context, repo graveler.RepositoryID, r graveler.Ref, opts graveler.ListEntriesOptions) ([]*graveler.EntryListing, bool, error) {
	if opts.Limit <= 0 {
		w.violate("ListEntries: server passed limit %d", opts.Limit)
	}
	return nil, false, w.repo("ListEntries", repo, r)
}

func (w *emptyWorld) Commit(ctx context.Context, repo graveler.RepositoryID, b graveler.BranchID, p graveler.CommitParams) (graveler.CommitID, error) {
	return "", w.repo("Commit", repo, b)
}

func (w *emptyWorld) Reset(ctx context.Context, repo graveler.RepositoryID, b graveler.BranchID, typ graveler.ResetType, key graveler.Key) error {
	return w.repo("Reset", repo, b)
}

func (w *emptyWorld) DiffUncommitted(ctx context.Context, repo graveler.RepositoryID, b graveler.BranchID) (graveler.DiffIterator, error) {
	return nil, w.repo("DiffUncommitted", repo, b)
}

func (w *emptyWorld) Diff(ctx context.Context, repo graveler.RepositoryID, left, right graveler.Ref) (graveler.DiffIterator, error) {
	return nil, w.repo("Diff", repo, left, right)
}

func (w *emptyWorld) Merge(ctx context.Context, repo graveler.RepositoryID, dst graveler.BranchID, src graveler.Ref, p graveler.MergeParams) (graveler.CommitID, bool, error) {
	return "", false, w.repo("Merge", repo, dst, src)
}

func (w *emptyWorld) Revert(ctx context.Context, repo graveler.RepositoryID, b graveler.BranchID, r graveler.Ref, parent int, p graveler.CommitParams) (graveler.CommitID, error) {
	return "", w.repo("Revert", repo, b, r)
}

func (w *emptyWorld) CherryPick(ctx context.Context, repo graveler.RepositoryID, b graveler.BranchID, r graveler.Ref, parent int, p graveler.CommitParams) (graveler.CommitID, error) {
	return "", w.repo("CherryPick", repo, b, r)
}

func (w *emptyWorld) DumpRefs(ctx context.Context, repo graveler.RepositoryID) iter.Seq2[*graveler.RefsRecord, error] {
	return failSeq[*graveler.RefsRecord](w.repo("DumpRefs", repo))
}

func (w *emptyWorld) RestoreRefs(ctx context.Context, repo graveler.RepositoryID, records iter.Seq2[*graveler.RefsRecord, error]) error {
	for _, err := range records {
		if err != nil {
			return err
		}
	}
	return w.repo("RestoreRefs", repo)
}

var _ Service = (*emptyWorld)(nil)

// allowedCodes are the only outcomes a request may have against an empty
// world: anything else (INTERNAL above all: a panic or an unmapped error)
// is a bug.
var allowedCodes = map[codes.Code]bool{codes.OK: true, codes.InvalidArgument: true, codes.NotFound: true}

// methods lists the service's methods in declaration order.
func methods(t testing.TB) []protoreflect.MethodDescriptor {
	sd := pb.File_graveler_v1_graveler_proto.Services().ByName("GravelerService")
	if sd == nil {
		t.Fatal("GravelerService descriptor missing")
	}
	var out []protoreflect.MethodDescriptor
	for i := range sd.Methods().Len() {
		out = append(out, sd.Methods().Get(i))
	}
	return out
}

// invoke sends req to method over conn and returns the final status:
// unary calls directly, streams by sending req and draining responses.
func invoke(ctx context.Context, conn *grpc.ClientConn, md protoreflect.MethodDescriptor, req proto.Message) error {
	full := "/" + string(md.Parent().FullName()) + "/" + string(md.Name())
	out, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return err
	}
	if !md.IsStreamingClient() && !md.IsStreamingServer() {
		return conn.Invoke(ctx, full, req, out.New().Interface())
	}
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: md.IsStreamingServer(), ClientStreams: md.IsStreamingClient()}, full)
	if err != nil {
		return err
	}
	if err := s.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	for {
		if err := s.RecvMsg(out.New().Interface()); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// seedRequests are well-formed requests for a few methods, so the fuzzer
// starts from messages that reach deep into each handler.
func seedRequests() []proto.Message {
	ts := timestamppb.New(time.Unix(1700000000, 0))
	return []proto.Message{
		&pb.CreateRepositoryRequest{RepositoryId: "repo1", Repository: &pb.Repository{DefaultBranch: "main", StorageNamespace: "mem://x"}},
		&pb.GetRepositoryRequest{Name: "repositories/repo1"},
		&pb.ListRepositoriesRequest{PageSize: 10, PageToken: "AQ"},
		&pb.CreateBranchRequest{Parent: "repositories/repo1", BranchId: "dev", SourceRef: "main~2^1"},
		&pb.ListBranchesRequest{Parent: "repositories/repo1", PageSize: -1},
		&pb.GetEntryRequest{Repository: "repositories/repo1", Ref: "main@", Key: []byte("a/b")},
		&pb.PutEntryRequest{Branch: "repositories/repo1/branches/main", Entry: &pb.Entry{Key: []byte("k"), Value: &pb.Value{Identity: []byte("i"), Data: []byte("d")}}},
		&pb.BatchPutEntriesRequest{Branch: "repositories/repo1/branches/main", Entries: []*pb.Entry{{Key: []byte("k")}}},
		&pb.ListEntriesRequest{Repository: "repositories/repo1", Ref: "main", Prefix: []byte("a/"), Delimiter: []byte("/"), PageSize: 5},
		&pb.CommitRequest{Branch: "repositories/repo1/branches/main", Options: &pb.CommitOptions{Message: "m", Metadata: map[string]string{"a": "b"}}},
		&pb.LogRequest{Repository: "repositories/repo1", Ref: "abcd1234", Since: ts},
		&pb.GetCommitRequest{Name: "repositories/repo1/commits/main~1"},
		&pb.GetTagRequest{Name: "repositories/repo1/tags/v1.0"},
	}
}

// fuzzServer is one real gRPC server on loopback shared by every input of
// a fuzz run (a server per input would dominate the time).
var fuzzServer struct {
	once  sync.Once
	conn  *grpc.ClientConn
	world *emptyWorld
}

func fuzzHarness(t *testing.T) (*grpc.ClientConn, *emptyWorld) {
	fuzzServer.once.Do(func() {
		w := &emptyWorld{}
		h := startShared(w)
		fuzzServer.conn, fuzzServer.world = h, w
	})
	if fuzzServer.conn == nil {
		t.Fatal("fuzz server did not start")
	}
	return fuzzServer.conn, fuzzServer.world
}

// FuzzServerRequests sends arbitrary protobuf bytes, decoded as the request
// of an arbitrary method, to the real server: it must never panic (which
// would be INTERNAL) and must answer OK, INVALID_ARGUMENT or NOT_FOUND,
// and must never hand the service a name it should have rejected.
func FuzzServerRequests(f *testing.F) {
	ms := methods(f)
	for _, req := range seedRequests() {
		for i, md := range ms {
			if md.Input().FullName() == req.ProtoReflect().Descriptor().FullName() {
				b, err := proto.Marshal(req)
				if err != nil {
					f.Fatal(err)
				}
				f.Add(uint8(i), b)
			}
		}
	}
	f.Add(uint8(0), []byte{0x0a, 0x01, 0xff})
	f.Fuzz(func(t *testing.T, method uint8, wire []byte) {
		conn, world := fuzzHarness(t)
		md := ms[int(method)%len(ms)]
		mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
		if err != nil {
			t.Fatal(err)
		}
		req := mt.New().Interface()
		if proto.Unmarshal(wire, req) != nil {
			return // not a message of this type; the transport rejects such bytes before any handler
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = invoke(ctx, conn, md, req)
		c := status.Code(err)
		// The harness's store is the in-memory one, which has no change
		// feed: WatchRefs answers that, as documented.
		unsupported := md.Name() == "WatchRefs" && c == codes.Unimplemented
		if !allowedCodes[c] && !unsupported {
			t.Fatalf("%s(%v): %v", md.Name(), req, err)
		}
		if v := world.takeViolations(); len(v) > 0 {
			t.Fatalf("%s(%v): %v", md.Name(), req, v)
		}
	})
}

// FuzzServerNames puts one arbitrary string in every name, ref and page
// token position of the main requests.
func FuzzServerNames(f *testing.F) {
	for _, s := range []string{"repositories/repo1", "repositories/repo1/branches/main", "main~1", "repositories//branches/x",
		"repositories/repo1/branches/main/extra", "repositories/RE", "AQID", "", "repositories/repo1/tags/..", "\x00"} {
		f.Add(s, int32(0))
	}
	f.Add("x", int32(-5))
	f.Fuzz(func(t *testing.T, s string, pageSize int32) {
		if !utf8.ValidString(s) {
			return // proto3 strings are UTF-8: a client cannot marshal this request
		}
		conn, world := fuzzHarness(t)
		c := pb.NewGravelerServiceClient(conn)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		calls := []struct {
			name string
			err  func() error
		}{
			{"GetRepository", func() error { _, err := c.GetRepository(ctx, &pb.GetRepositoryRequest{Name: s}); return err }},
			{"CreateRepository", func() error {
				_, err := c.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: s, Repository: &pb.Repository{DefaultBranch: s}})
				return err
			}},
			{"ListRepositories", func() error {
				_, err := c.ListRepositories(ctx, &pb.ListRepositoriesRequest{PageSize: pageSize, PageToken: s})
				return err
			}},
			{"GetBranch", func() error { _, err := c.GetBranch(ctx, &pb.GetBranchRequest{Name: s}); return err }},
			{"CreateBranch", func() error {
				_, err := c.CreateBranch(ctx, &pb.CreateBranchRequest{Parent: "repositories/repo1", BranchId: s, SourceRef: s})
				return err
			}},
			{"ListBranches", func() error {
				_, err := c.ListBranches(ctx, &pb.ListBranchesRequest{Parent: s, PageSize: pageSize, PageToken: s})
				return err
			}},
			{"GetTag", func() error { _, err := c.GetTag(ctx, &pb.GetTagRequest{Name: s}); return err }},
			{"GetCommit", func() error { _, err := c.GetCommit(ctx, &pb.GetCommitRequest{Name: s}); return err }},
			{"GetEntry", func() error {
				_, err := c.GetEntry(ctx, &pb.GetEntryRequest{Repository: "repositories/repo1", Ref: s, Key: []byte(s)})
				return err
			}},
			{"PutEntry", func() error {
				_, err := c.PutEntry(ctx, &pb.PutEntryRequest{Branch: s, Entry: &pb.Entry{Key: []byte(s), Value: &pb.Value{Identity: []byte(s)}}})
				return err
			}},
			{"ListEntries", func() error {
				_, err := c.ListEntries(ctx, &pb.ListEntriesRequest{Repository: "repositories/repo1", Ref: "main", Prefix: []byte(s), PageSize: pageSize, PageToken: s})
				return err
			}},
			{"Log", func() error {
				_, err := c.Log(ctx, &pb.LogRequest{Repository: "repositories/repo1", Ref: s, PageSize: pageSize, PageToken: s})
				return err
			}},
			{"Commit", func() error { _, err := c.Commit(ctx, &pb.CommitRequest{Branch: s}); return err }},
		}
		for _, call := range calls {
			err := call.err()
			if code := status.Code(err); !allowedCodes[code] {
				t.Fatalf("%s with %q (page size %d): %v", call.name, s, pageSize, err)
			}
			if v := world.takeViolations(); len(v) > 0 {
				t.Fatalf("%s with %q: %v", call.name, s, v)
			}
		}
	})
}

// FuzzPageToken: a token is opaque to clients; any bytes they send back
// must decode to the cursor it was issued with, or fail as
// ErrInvalidPageToken (INVALID_ARGUMENT), never panic. A token issued for
// one request never decodes for a request with other parameters.
func FuzzPageToken(f *testing.F) {
	p := pager{key: defaultPageTokenKey}
	req := &pb.ListEntriesRequest{Repository: "repositories/repo1", Ref: "main", Prefix: []byte("a/")}
	f.Add(p.encode("ListEntries", req, []byte("a/b")), []byte("cursor"), "main")
	f.Add("", []byte{}, "dev")
	f.Add("AQ", []byte{0xff}, "main")
	f.Fuzz(func(t *testing.T, token string, cursor []byte, ref string) {
		r := proto.Clone(req).(*pb.ListEntriesRequest)
		r.Ref = ref
		got, err := p.decode("ListEntries", r, token)
		if err != nil && (!errors.Is(err, ErrInvalidPageToken) || !errors.Is(err, graveler.ErrInvalidArgument)) {
			t.Fatalf("decode(%q): %v is not ErrInvalidPageToken", token, err)
		}
		if token == "" && (err != nil || got != nil) {
			t.Fatalf("empty token: %q, %v", got, err)
		}
		// Round trip; paging fields do not bind the token.
		tok := p.encode("ListEntries", r, cursor)
		r2 := proto.Clone(r).(*pb.ListEntriesRequest)
		r2.PageSize, r2.PageToken = 7, tok
		back, err := p.decode("ListEntries", r2, tok)
		if err != nil || !bytes.Equal(back, cursor) {
			t.Fatalf("round trip of cursor %q: %q, %v", cursor, back, err)
		}
		// Bound to the request and to the method.
		if ref != req.Ref {
			if _, err := p.decode("ListEntries", req, tok); !errors.Is(err, ErrInvalidPageToken) {
				t.Fatalf("token for ref %q accepted for ref %q: %v", ref, req.Ref, err)
			}
		}
		if _, err := p.decode("Log", r, tok); !errors.Is(err, ErrInvalidPageToken) {
			t.Fatalf("ListEntries token accepted by Log: %v", err)
		}
		// Another server's key.
		if _, err := (pager{key: []byte("other")}).decode("ListEntries", r, tok); !errors.Is(err, ErrInvalidPageToken) {
			t.Fatalf("token accepted under another key: %v", err)
		}
	})
}

// startShared serves w on a loopback listener for the rest of the process
// and returns a client connection to it.
func startShared(w *emptyWorld) *grpc.ClientConn { return startSharedService(w) }

// startSharedService serves svc the same way.
func startSharedService(svc Service) *grpc.ClientConn {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil
	}
	g := NewGRPCServer(New(svc, Config{StorageNamespaceRoot: "mem://fuzz"}), GRPCOptions{})
	go func() { _ = g.Server.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil
	}
	return conn
}
