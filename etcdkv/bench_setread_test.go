package etcdkv_test

import (
	"context"
	"fmt"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/kv"
)

// BenchmarkSetAndRead measures the staged-write shape: a few puts and two
// reads of records in one transaction, against the raw Txn of the same
// puts and reads (the raw side has no guard; the ratio prices it):
//
//	go test ./etcdkv -run '^$' -bench 'Set$|SetAndRead|Delete$' -benchtime 2000x
func BenchmarkSetAndRead(b *testing.B) {
	srv, s := benchSetup(b)
	ctx := context.Background()
	part := []byte("bench")
	for _, rec := range []string{"repo", "branch"} {
		if err := s.Set(ctx, part, []byte(rec), benchVal[:64]); err != nil {
			b.Fatal(err)
		}
	}
	reads := []kv.KeyRef{{Partition: part, Key: []byte("repo")}, {Partition: part, Key: []byte("branch")}}
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("writes=%d/raw", n), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				ops := make([]clientv3.Op, 0, n+2)
				for j := range n {
					ops = append(ops, clientv3.OpPut(fmt.Sprintf("/graveler/bench/raw%d-%09d-%d", n, i, j), string(benchVal)))
				}
				ops = append(ops, clientv3.OpGet("/graveler/bench/repo"), clientv3.OpGet("/graveler/bench/branch"))
				if _, err := srv.Client.Txn(ctx).Then(ops...).Commit(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("writes=%d/store", n), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				writes := make([]kv.Write, n)
				for j := range n {
					writes[j] = kv.Write{Partition: part, Key: fmt.Appendf(nil, "st%d-%09d-%d", n, i, j), Value: benchVal}
				}
				if _, err := s.SetAndRead(ctx, writes, reads); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDelete measures deleting an existing key, against the raw
// delete.
func BenchmarkDelete(b *testing.B) {
	srv, s := benchSetup(b)
	ctx := context.Background()
	b.Run("raw", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			k := fmt.Sprintf("/graveler/bench/rawdel%09d", i)
			if _, err := srv.Client.Put(ctx, k, string(benchVal)); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if _, err := srv.Client.Delete(ctx, k); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("store", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			k := fmt.Appendf(nil, "del%09d", i)
			if err := s.Set(ctx, []byte("bench"), k, benchVal); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := s.Delete(ctx, []byte("bench"), k); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkGuardCost prices the guard of unconditional writes in raw etcd
// calls: a bare Put, the same put as a Txn with no compare, as a Txn
// guarded by "ModRevision < bound+1", and with the write fence's compare
// as well, as the store sends it.
func BenchmarkGuardCost(b *testing.B) {
	srv, _ := benchSetup(b)
	cli, ctx := srv.Client, context.Background()
	b.Run("put", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := cli.Put(ctx, fmt.Sprintf("/graveler/bench/gp%09d", i), string(benchVal)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("txn", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := cli.Txn(ctx).Then(clientv3.OpPut(fmt.Sprintf("/graveler/bench/gt%09d", i), string(benchVal))).Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("guarded-txn", func(b *testing.B) {
		g, err := cli.Get(ctx, "/graveler/bench/")
		if err != nil {
			b.Fatal(err)
		}
		bound := g.Header.Revision
		for i := 0; b.Loop(); i++ {
			k := fmt.Sprintf("/graveler/bench/gg%09d", i)
			r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "<", bound+1)).Then(clientv3.OpPut(k, string(benchVal))).Commit()
			if err != nil || !r.Succeeded {
				b.Fatalf("guarded put: %v", err)
			}
			bound = r.Header.Revision
		}
	})
	// And with the write fence's compare, as every store attempt now is.
	b.Run("fenced-txn", func(b *testing.B) {
		fence := "/graveler/!fence/bench"
		f, err := cli.Put(ctx, fence, "")
		if err != nil {
			b.Fatal(err)
		}
		rev, bound := f.Header.Revision, f.Header.Revision
		for i := 0; b.Loop(); i++ {
			k := fmt.Sprintf("/graveler/bench/gf%09d", i)
			r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "<", bound+1), clientv3.Compare(clientv3.ModRevision(fence), "=", rev)).
				Then(clientv3.OpPut(k, string(benchVal))).Else(clientv3.OpGet(fence, clientv3.WithKeysOnly())).Commit()
			if err != nil || !r.Succeeded {
				b.Fatalf("fenced put: %v", err)
			}
			bound = r.Header.Revision
		}
	})
}
