package etcdkv_test

import (
	"context"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/kv"
)

// TestRevisionsAreModRevisions: the revision each write notes
// (kv.NoteWrite) is the etcd revision at which the key changed, as the
// etcd client reads it: the key's ModRevision after a put, and for a
// delete the revision at which the key is gone while it was there just
// before.
func TestRevisionsAreModRevisions(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	s := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{Prefix: "/revisions"})
	part := []byte("part")
	raw := func(key string, rev int64) []int64 {
		t.Helper()
		var opts []clientv3.OpOption
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := srv.Client.Get(t.Context(), s.RawKey(part, []byte(key)), opts...)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, kv := range resp.Kvs {
			out = append(out, kv.ModRevision)
		}
		return out
	}
	put := func(what, key string, write func(c *kvCtx) error) {
		t.Helper()
		c := newKVCtx(t)
		if err := write(c); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got, mod := c.rec.Last(), raw(key, 0); len(mod) != 1 || got != mod[0] {
			t.Fatalf("%s: noted revision %d, the key's ModRevision %v", what, got, mod)
		}
	}
	gone := func(what, key string, del func(c *kvCtx) error) {
		t.Helper()
		c := newKVCtx(t)
		if err := del(c); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		rev := c.rec.Last()
		if len(raw(key, rev)) != 0 || len(raw(key, rev-1)) != 1 {
			t.Fatalf("%s: noted revision %d, but the key is not deleted exactly there (%v at it, %v before)", what, rev, raw(key, rev), raw(key, rev-1))
		}
	}
	put("set", "a", func(c *kvCtx) error { return s.Set(c.ctx, part, []byte("a"), []byte("1")) })
	put("setif absent", "b", func(c *kvCtx) error { return s.SetIf(c.ctx, part, []byte("b"), []byte("1"), kv.Absent) })
	put("setif", "b", func(c *kvCtx) error {
		_, pr, err := s.Get(c.ctx, part, []byte("b"))
		if err != nil {
			return err
		}
		return s.SetIf(c.ctx, part, []byte("b"), []byte("2"), pr)
	})
	put("set and read", "c", func(c *kvCtx) error {
		_, err := s.SetAndRead(c.ctx, []kv.Write{{Partition: part, Key: []byte("c"), Value: []byte("1")}}, []kv.KeyRef{{Partition: part, Key: []byte("a")}})
		return err
	})
	gone("delete", "a", func(c *kvCtx) error { return s.Delete(c.ctx, part, []byte("a")) })
	gone("deleteif", "b", func(c *kvCtx) error {
		_, pr, err := s.Get(c.ctx, part, []byte("b"))
		if err != nil {
			return err
		}
		return s.DeleteIf(c.ctx, part, []byte("b"), pr)
	})
	gone("drop partition", "c", func(c *kvCtx) error {
		_, err := s.DropPartition(c.ctx, part)
		return err
	})
}

// kvCtx is a context with a kv.Revisions.
type kvCtx struct {
	ctx context.Context
	rec *kv.Revisions
}

func newKVCtx(t *testing.T) *kvCtx {
	ctx, rec := kv.WithRevisions(t.Context())
	return &kvCtx{ctx: ctx, rec: rec}
}
