package ref_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
)

// TestCreateBranchAnswerLostThenDeleted: CreateBranch's guarded create
// reaches etcd and applies, and its answer is lost (the connection drops
// after the request went out). Before it is settled another client sees
// the branch and deletes it, acknowledged. Settling must find that the
// create applied and must not create the branch a second time: a deleted
// branch does not come back.
func TestCreateBranchAnswerLostThenDeleted(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	e := newEnv(t, etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{}), nil)
	repo := e.createRepo("repo1")

	var armed atomic.Bool
	var lost func()
	loseAnswer := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if tr, ok := req.(*etcdserverpb.TxnRequest); ok && err == nil && armed.Load() {
			for _, op := range tr.Success {
				if p := op.GetRequestPut(); p != nil && strings.Contains(string(p.Key), "/branches/feature") {
					armed.Store(false)
					lost()
					return status.Error(codes.Unavailable, "test: connection lost after the request was sent")
				}
			}
		}
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(loseAnswer)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	lossy, err := etcdkv.NewFromClient(cli, etcdkv.Config{})
	if err != nil {
		t.Fatal(err)
	}
	head, err := e.m.GetBranch(e.ctx, repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	lost = func() {
		if _, err := e.m.GetBranch(e.ctx, repo, "feature"); err != nil {
			t.Errorf("the create applied, yet another client reads: %v", err)
			return
		}
		if err := e.m.DeleteBranch(e.ctx, repo, "feature"); err != nil {
			t.Errorf("another client's delete: %v", err)
		}
	}
	armed.Store(true)
	if err := e.managerOn(lossy).CreateBranch(e.ctx, repo, "feature", graveler.Branch{CommitID: head.CommitID}); err != nil {
		t.Fatalf("CreateBranch, which applied: %v", err)
	}
	if armed.Load() {
		t.Fatal("the create's answer was never lost: the ordering under test did not happen")
	}
	if b, err := e.m.GetBranch(e.ctx, repo, "feature"); !errors.Is(err, graveler.ErrBranchNotFound) {
		t.Fatalf("after an acknowledged delete of the branch its only create made: %v, %v; want ErrBranchNotFound", b, err)
	}
}

// TestCreateBranchHeldThenDeleted: CreateBranch's first attempt is held
// by a member that stopped with it, so the store gives up on it, settles
// the create (it applies) and answers; another client deletes the
// branch; then the member resumes and forwards the held attempt. The
// branch must stay deleted.
func TestCreateBranchHeldThenDeleted(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	e := newEnv(t, etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{}), nil)
	repo := e.createRepo("repo1")

	var armed atomic.Bool
	var held atomic.Pointer[etcdserverpb.TxnRequest]
	hold := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if tr, ok := req.(*etcdserverpb.TxnRequest); ok && armed.Load() {
			for _, op := range tr.Success {
				if p := op.GetRequestPut(); p != nil && strings.Contains(string(p.Key), "/branches/feature") && armed.CompareAndSwap(true, false) {
					held.Store(proto.Clone(tr).(*etcdserverpb.TxnRequest))
					<-ctx.Done() // a stopped member answers nothing
					return ctx.Err()
				}
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(hold)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	stalled, err := etcdkv.NewFromClient(cli, etcdkv.Config{RequestTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stalled.Close() })
	head, err := e.m.GetBranch(e.ctx, repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	if err := e.managerOn(stalled).CreateBranch(e.ctx, repo, "feature", graveler.Branch{CommitID: head.CommitID}); err != nil {
		t.Fatalf("CreateBranch, settled after its first attempt was held: %v", err)
	}
	if held.Load() == nil {
		t.Fatal("no attempt was held: the ordering under test did not happen")
	}
	if err := e.m.DeleteBranch(e.ctx, repo, "feature"); err != nil {
		t.Fatalf("another client's delete: %v", err)
	}
	resp, err := etcdserverpb.NewKVClient(srv.Client.ActiveConnection()).Txn(e.ctx, held.Load())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Succeeded {
		t.Error("the held create applied after the branch was deleted")
	}
	if b, err := e.m.GetBranch(e.ctx, repo, "feature"); !errors.Is(err, graveler.ErrBranchNotFound) {
		t.Fatalf("after the held create arrived: %v, %v; want ErrBranchNotFound", b, err)
	}
}
