package etcdkv_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/kv"
)

// multiHolder stands for a member that stops while holding a request:
// once armed with targets, the first write transaction that touches a
// key containing each target is kept instead of sent (each target once),
// and its caller waits until its context ends, as it would for a member
// that answers nothing. The test delivers a kept request later, as that
// member does once it resumes and forwards it to the leader.
type multiHolder struct {
	mu      sync.Mutex
	targets []string
	held    map[string]*etcdserverpb.TxnRequest
}

func (h *multiHolder) arm(targets ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.targets, h.held = targets, map[string]*etcdserverpb.TxnRequest{}
}

func (h *multiHolder) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if tr, ok := req.(*etcdserverpb.TxnRequest); ok && h.take(tr) {
		<-ctx.Done()
		return ctx.Err()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (h *multiHolder) take(tr *etcdserverpb.TxnRequest) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, op := range tr.Success {
		var key []byte
		switch {
		case op.GetRequestPut() != nil:
			key = op.GetRequestPut().Key
		case op.GetRequestDeleteRange() != nil:
			key = op.GetRequestDeleteRange().Key
		}
		for _, target := range h.targets {
			if _, done := h.held[target]; !done && strings.Contains(string(key), target) {
				h.held[target] = proto.Clone(tr).(*etcdserverpb.TxnRequest)
				return true
			}
		}
	}
	return false
}

func (h *multiHolder) wasHeld(target string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held[target] != nil
}

func (h *multiHolder) deliver(t *testing.T, srv *etcdkvtest.Server, target string) bool {
	t.Helper()
	h.mu.Lock()
	held := h.held[target]
	h.mu.Unlock()
	if held == nil {
		t.Fatalf("no write attempt on %q was held", target)
	}
	resp, err := etcdserverpb.NewKVClient(srv.Client.ActiveConnection()).Txn(t.Context(), held)
	if err != nil {
		t.Fatalf("delivering the held attempt: %v", err)
	}
	return resp.Succeeded
}

func heldStore(t *testing.T, srv *etcdkvtest.Server, h *multiHolder, cfg etcdkv.Config) (*etcdkv.Store, *clientv3.Client) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(h.intercept)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	s, err := etcdkv.NewFromClient(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, cli
}

// TestHeldAttemptNeverAppliesLate: a write attempt held by a stopped
// member reaches the leader after the store gave up on it. Whatever
// happened meanwhile (the store re-sent the write and answered its
// caller, another process deleted the key; or the caller gave up and
// nothing else touched the key), the held attempt must not apply: a
// deleted key would come back, or a write its caller abandoned would
// take effect after the caller was told it might not have.
func TestHeldAttemptNeverAppliesLate(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	h := &multiHolder{}
	s, _ := heldStore(t, srv, h, etcdkv.Config{RequestTimeout: 300 * time.Millisecond})
	other := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	ctx := t.Context()

	type fixture struct {
		part []byte
		key  string
	}
	get := func(t *testing.T, f fixture) (string, kv.Predicate) {
		t.Helper()
		v, p, err := other.Get(ctx, f.part, []byte(f.key))
		if errors.Is(err, kv.ErrNotFound) {
			return "", kv.Absent
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(v), p
	}
	deleteIt := func(t *testing.T, f fixture) {
		t.Helper()
		_, p := get(t, f)
		if err := other.DeleteIf(ctx, f.part, []byte(f.key), p); err != nil {
			t.Fatalf("another process's delete: %v", err)
		}
	}
	set := func(t *testing.T, f fixture, v string) kv.Predicate {
		t.Helper()
		if err := other.Set(ctx, f.part, []byte(f.key), []byte(v)); err != nil {
			t.Fatal(err)
		}
		_, p := get(t, f)
		return p
	}
	// gaveUp is a caller context that ends while the attempt is held,
	// before the store's own attempt timeout.
	gaveUp := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 100*time.Millisecond) }

	cases := []struct {
		name string
		// run makes the call whose first attempt is held, and what
		// follows it before the held attempt is delivered; want is then
		// the key's value ("": missing).
		run  func(t *testing.T, f fixture)
		want string
	}{
		{"set, re-sent and answered, then deleted", func(t *testing.T, f fixture) {
			if err := s.Set(ctx, f.part, []byte(f.key), []byte("v1")); err != nil {
				t.Fatalf("Set: %v", err)
			}
			deleteIt(t, f)
		}, ""},
		{"create, settled and answered, then deleted", func(t *testing.T, f fixture) {
			if err := s.SetIf(ctx, f.part, []byte(f.key), []byte("v1"), kv.Absent); err != nil {
				t.Fatalf("SetIf: %v", err)
			}
			deleteIt(t, f)
		}, ""},
		{"create with more keys, settled and answered, then deleted", func(t *testing.T, f fixture) {
			if err := s.SetIfWith(ctx, f.part, []byte(f.key), []byte("v1"), kv.Absent, nil, []kv.Write{{Partition: f.part, Key: []byte("other"), Value: []byte("x")}}); err != nil {
				t.Fatalf("SetIfWith: %v", err)
			}
			deleteIt(t, f)
		}, ""},
		{"set and read, re-sent and answered, then deleted", func(t *testing.T, f fixture) {
			if _, err := s.SetAndRead(ctx, []kv.Write{{Partition: f.part, Key: []byte(f.key), Value: []byte("v1")}}, nil); err != nil {
				t.Fatalf("SetAndRead: %v", err)
			}
			deleteIt(t, f)
		}, ""},
		{"set whose caller gave up", func(t *testing.T, f fixture) {
			c, cancel := gaveUp()
			defer cancel()
			if err := s.Set(c, f.part, []byte(f.key), []byte("v1")); err == nil {
				t.Fatal("Set answered success although its only attempt was held")
			}
		}, ""},
		{"compare-and-swap whose caller gave up", func(t *testing.T, f fixture) {
			p := set(t, f, "v0")
			c, cancel := gaveUp()
			defer cancel()
			if err := s.SetIf(c, f.part, []byte(f.key), []byte("v1"), p); err == nil {
				t.Fatal("SetIf answered success although its only attempt was held")
			}
		}, "v0"},
		{"conditional delete whose caller gave up", func(t *testing.T, f fixture) {
			p := set(t, f, "v0")
			c, cancel := gaveUp()
			defer cancel()
			if err := s.DeleteIf(c, f.part, []byte(f.key), p); err == nil {
				t.Fatal("DeleteIf answered success although its only attempt was held")
			}
		}, "v0"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := fixture{part: fmt.Appendf(nil, "held%d", i), key: "k"}
			target := string(f.part) + "/k"
			h.arm(target)
			c.run(t, f)
			if h.deliver(t, srv, target) {
				t.Error("the held attempt applied after its caller was answered")
			}
			if got, _ := get(t, f); got != c.want {
				t.Errorf("after the held attempt arrived the key holds %q, want %q", got, c.want)
			}
		})
	}
}
