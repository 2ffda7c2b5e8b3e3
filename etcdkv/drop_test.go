package etcdkv_test

import (
	"context"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/kv"
)

// TestDropPartitionInChunks drops a partition of several chunks while a
// late writer adds a key behind the drop's cursor after the first chunk:
// every key goes, the count is exact, and neighbouring partitions stay.
func TestDropPartitionInChunks(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	s := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	ctx := t.Context()
	part := []byte("drop")
	n := 2*etcdkv.DropChunk + 123
	prefix := s.Prefix() + "/drop/"
	for start := 0; start < n; start += 128 {
		var ops []clientv3.Op
		for i := start; i < min(start+128, n); i++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("%sk%06d", prefix, i), "v"))
		}
		if _, err := srv.Client.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"drop0", "dro"} {
		if err := s.Set(ctx, []byte(p), []byte("keep"), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	chunks := 0
	defer etcdkv.SetAfterDropChunkForTest(func() {
		chunks++
		if chunks == 1 {
			// Sorts before every key already dropped.
			if err := s.Set(context.Background(), part, []byte("a-late"), []byte("v")); err != nil {
				t.Error(err)
			}
		}
	})()
	got, err := s.DropPartition(ctx, part)
	if err != nil {
		t.Fatal(err)
	}
	if got != int64(n)+1 || chunks < 3 {
		t.Fatalf("dropped %d keys in %d chunks, want %d keys in 3 or more", got, chunks, n+1)
	}
	for e, err := range s.Scan(ctx, part, kv.ScanOptions{}) {
		t.Fatalf("left after the drop: %q %v", e.Key, err)
	}
	for _, p := range []string{"drop0", "dro"} {
		if _, _, err := s.Get(ctx, []byte(p), []byte("keep")); err != nil {
			t.Fatalf("neighbour %s: %v", p, err)
		}
	}
}
