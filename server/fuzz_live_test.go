package server

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"

	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/ref"
	"graveler/graveler/staging"
	"graveler/kv"
)

// liveCodes are the outcomes a request may have against the real service
// with some data in it. INTERNAL (a panic, an unmapped error), UNKNOWN,
// UNAVAILABLE and UNIMPLEMENTED are bugs here: the store is in memory.
var liveCodes = map[codes.Code]bool{
	codes.OK: true, codes.InvalidArgument: true, codes.NotFound: true, codes.AlreadyExists: true,
	codes.FailedPrecondition: true, codes.Aborted: true,
}

var liveServer struct {
	once sync.Once
	conn *grpc.ClientConn
	err  error
}

// liveHarness serves the real Graveler service on an in-memory store, with
// repository repo1 holding a commit on main, a branch dev with staged
// entries, and a tag v1.0, so fuzzed requests reach deep into every flow.
func liveHarness(t *testing.T) *grpc.ClientConn {
	liveServer.once.Do(func() {
		store := kv.NewMemoryStore()
		blobs := committed.NewBucketStore(committed.BucketConfig{})
		g := graveler.New(ref.New(store, ref.Config{}), staging.New(store, staging.Config{}), committed.NewManager(blobs, committed.Config{}), graveler.Config{})
		ctx := context.Background()
		v := graveler.Value{Identity: []byte("i"), Data: []byte("d")}
		steps := []func() error{
			func() error { _, err := g.CreateRepository(ctx, "repo1", "mem://fuzz-live/repo1", "main"); return err },
			func() error { return g.Set(ctx, "repo1", "main", graveler.Key("a/b"), v, graveler.SetOptions{}) },
			func() error { return g.Set(ctx, "repo1", "main", graveler.Key("k"), v, graveler.SetOptions{}) },
			func() error {
				_, err := g.Commit(ctx, "repo1", "main", graveler.CommitParams{Message: "m"})
				return err
			},
			func() error { _, err := g.CreateBranch(ctx, "repo1", "dev", "main"); return err },
			func() error { return g.Set(ctx, "repo1", "dev", graveler.Key("a/c"), v, graveler.SetOptions{}) },
			func() error { _, err := g.CreateTag(ctx, "repo1", "v1.0", "main"); return err },
		}
		for _, step := range steps {
			if err := step(); err != nil {
				liveServer.err = err
				return
			}
		}
		liveServer.conn = startSharedService(g)
	})
	if liveServer.conn == nil {
		t.Fatalf("live fuzz server did not start: %v", liveServer.err)
	}
	return liveServer.conn
}

// FuzzServerRequestsLive is FuzzServerRequests against the real service:
// arbitrary requests to arbitrary methods must never panic or surface an
// unmapped error, whatever state earlier inputs left behind.
func FuzzServerRequestsLive(f *testing.F) {
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
	f.Fuzz(func(t *testing.T, method uint8, wire []byte) {
		conn := liveHarness(t)
		md := ms[int(method)%len(ms)]
		mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
		if err != nil {
			t.Fatal(err)
		}
		req := mt.New().Interface()
		if proto.Unmarshal(wire, req) != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := invoke(ctx, conn, md, req); !liveCodes[status.Code(err)] {
			t.Fatalf("%s(%v): %v", md.Name(), req, err)
		}
	})
}
