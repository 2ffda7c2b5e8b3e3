package embedded_test

import (
	"context"
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
