package embedded_test

import (
	"context"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/etcdkv/embedded"
)

func TestStartPutGetClose(t *testing.T) {
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), UnsafeNoFsync: true, Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("got %v", resp.Kvs)
	}
}

func TestStartRequiresDir(t *testing.T) {
	if _, err := embedded.Start(embedded.Config{}); err == nil {
		t.Fatal("want error without Dir")
	}
}

// TestStartOnAPinnedClientAddr: a ClientAddr with a port is the address
// etcd listens on and Endpoints names; port 0 on a host other than the
// default picks a free port on that host.
func TestStartOnAPinnedClientAddr(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	srv, err := embedded.Start(embedded.Config{Dir: t.TempDir(), ClientAddr: addr, UnsafeNoFsync: true, Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if got := srv.Endpoints(); len(got) != 1 || got[0] != "http://"+addr {
		t.Fatalf("endpoints %v, want [http://%s]", got, addr)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatalf("put on the pinned address: %v", err)
	}

	other, err := embedded.Start(embedded.Config{Dir: t.TempDir(), ClientAddr: "localhost:0", UnsafeNoFsync: true, Fast: true})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if got := other.Endpoints(); len(got) != 1 || got[0] == "http://localhost:0" {
		t.Fatalf("port 0 not replaced by a free port: %v", got)
	}
}
