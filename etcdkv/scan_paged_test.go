package etcdkv_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/kv"
)

// loadKeys writes keys into partition part of s's etcd, 128 to a txn.
func loadKeys(t testing.TB, cli *clientv3.Client, s *etcdkv.Store, part string, keys []string) {
	t.Helper()
	for i := 0; i < len(keys); i += 128 {
		var ops []clientv3.Op
		for _, k := range keys[i:min(i+128, len(keys))] {
			ops = append(ops, clientv3.OpPut(s.RawKey([]byte(part), []byte(k)), "v"))
		}
		if _, err := cli.Txn(context.Background()).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

func scanKeys(t testing.TB, s *etcdkv.Store, part string) []string {
	t.Helper()
	var out []string
	for e, err := range s.Scan(context.Background(), []byte(part), kv.ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(e.Key))
	}
	return out
}

// TestPagedScanCountsAWindow: against a server without RangeStream, a scan
// reads every key once in order whatever their spread, and etcd's count
// per page covers a window about the page's size rather than the rest of
// the range: over a scan, a few times the keys, not keys²/page.
func TestPagedScanCountsAWindow(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	streamed := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	paged := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{ScanPageSize: 100})
	paged.ForcePagedScanForTest()
	var counted atomic.Int64
	defer etcdkv.SetAfterPagedRangeForTest(func(n int64) { counted.Add(n) })()
	rng := rand.New(rand.NewPCG(18, 3))
	const n = 20000
	cases := []struct {
		name    string
		key     func(i int) string
		bounded bool
	}{
		{"dense", func(i int) string { return fmt.Sprintf("k%09d", i) }, true},
		{"clusters", func(i int) string { return fmt.Sprintf("%c/%06d", "amz"[i%3], i) }, true},
		{"random-bytes", func(int) string {
			b := make([]byte, 1+rng.IntN(40))
			for j := range b {
				b[j] = byte(rng.IntN(256))
			}
			return string(b)
		}, true},
		{"skewed", func(i int) string { return fmt.Sprintf("%020d", i*i*i) }, true},
		{"long-shared-prefix", func(i int) string { return strings.Repeat("p", 40) + fmt.Sprintf("%06d", i) }, true},
		{"paths", func(i int) string {
			return fmt.Sprintf("tables/warehouse/orders/year=2026/month=%02d/part-%05d.parquet", i%12, i)
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			part := "paged-" + c.name
			seen := map[string]bool{}
			var keys []string
			for i := range n {
				if k := c.key(i); !seen[k] {
					seen[k] = true
					keys = append(keys, k)
				}
			}
			loadKeys(t, srv.Client, streamed, part, keys)
			want := scanKeys(t, streamed, part)
			slices.Sort(keys)
			if !slices.Equal(want, keys) {
				t.Fatalf("streamed scan: %d keys of %d", len(want), len(keys))
			}
			counted.Store(0)
			got := scanKeys(t, paged, part)
			if !slices.Equal(got, want) {
				t.Fatalf("paged scan: %d keys, streamed %d; first difference at %d", len(got), len(want), firstDifference(got, want))
			}
			c0 := counted.Load()
			t.Logf("%d keys: etcd counted %d keys over the scan (%.1f per key)", len(keys), c0, float64(c0)/float64(len(keys)))
			if c.bounded && c0 > 8*int64(len(keys)) {
				t.Fatalf("etcd counted %d keys to scan %d: the count is not bounded by the page", c0, len(keys))
			}
		})
	}
}

func firstDifference(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// BenchmarkScanPaged prices a full scan of 100k keys of 256 bytes three
// ways, each reporting keys/s and the keys etcd counted per scan:
// "stream" (RangeStream, etcd 3.7), "paged" (the store's fallback for
// servers without RangeStream, pages of 1000 in windows) and
// "paged-unwindowed" (pages of 1000 over the rest of the range, each
// counting it, as the fallback did before windows):
//
//	go test ./etcdkv -run '^$' -bench ScanPaged -benchtime 3x
func BenchmarkScanPaged(b *testing.B) {
	const n = 100_000
	srv := etcdkvtest.NewServer(b)
	streamed := etcdkvtest.NewStoreOn(b, srv, etcdkv.Config{})
	paged := etcdkvtest.NewStoreOn(b, srv, etcdkv.Config{})
	paged.ForcePagedScanForTest()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%09d", i)
	}
	ctx := context.Background()
	for i := 0; i < n; i += 128 {
		var ops []clientv3.Op
		for _, k := range keys[i:min(i+128, n)] {
			ops = append(ops, clientv3.OpPut(streamed.RawKey([]byte("scan"), []byte(k)), string(benchVal)))
		}
		if _, err := srv.Client.Txn(ctx).Then(ops...).Commit(); err != nil {
			b.Fatal(err)
		}
	}
	var counted atomic.Int64
	defer etcdkv.SetAfterPagedRangeForTest(func(c int64) { counted.Add(c) })()
	scan := func(b *testing.B, s *etcdkv.Store) {
		counted.Store(0)
		for b.Loop() {
			if got := len(scanKeys(b, s, "scan")); got != n {
				b.Fatalf("%d keys, want %d", got, n)
			}
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
		b.ReportMetric(float64(counted.Load())/float64(b.N), "counted/op")
	}
	b.Run("stream", func(b *testing.B) { scan(b, streamed) })
	b.Run("paged", func(b *testing.B) { scan(b, paged) })
	b.Run("paged-unwindowed", func(b *testing.B) {
		prefix := streamed.RawPrefix([]byte("scan"))
		end := clientv3.GetPrefixRangeEnd(prefix)
		var total int64
		for b.Loop() {
			from, got := prefix, 0
			var rev int64
			for {
				opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(1000)}
				if rev > 0 {
					opts = append(opts, clientv3.WithRev(rev))
				}
				resp, err := srv.Client.Get(ctx, from, opts...)
				if err != nil {
					b.Fatal(err)
				}
				rev = resp.Header.Revision
				total += resp.Count
				got += len(resp.Kvs)
				if !resp.More {
					break
				}
				from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
			}
			if got != n {
				b.Fatalf("%d keys, want %d", got, n)
			}
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
		b.ReportMetric(float64(total)/float64(b.N), "counted/op")
	})
}

// TestPagedScanOfLargeValues: pages count keys, and a page of values near
// the value limit outgrows the largest response the client accepts (64
// MiB in New; 1 MiB here, with 64 KiB values). The scan reads such a
// page again in smaller pages and returns every key once, in order.
func TestPagedScanOfLargeValues(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, MaxCallRecvMsgSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	s, err := etcdkv.NewFromClient(cli, etcdkv.Config{ScanPageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	s.ForcePagedScanForTest()
	value := strings.Repeat("v", 64<<10)
	var want []string
	for i := range 100 {
		k := fmt.Sprintf("k%03d", i)
		if _, err := srv.Client.Put(t.Context(), s.RawKey([]byte("big"), []byte(k)), value); err != nil {
			t.Fatal(err)
		}
		want = append(want, k)
	}
	var got []string
	for e, err := range s.Scan(t.Context(), []byte("big"), kv.ScanOptions{}) {
		if err != nil {
			t.Fatalf("paged scan of 100 values of 64 KiB: %v", err)
		}
		if len(e.Value) != len(value) {
			t.Fatalf("%s: %d bytes", e.Key, len(e.Value))
		}
		got = append(got, string(e.Key))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("scanned %d keys, want %d in order", len(got), len(want))
	}
}

// noRangeStream is a KV of a server without RangeStream (etcd before 3.7,
// a proxy): every GetStream is refused Unimplemented.
type noRangeStream struct {
	clientv3.KV
	streams atomic.Int64
}

func (k *noRangeStream) GetStream(context.Context, string, ...clientv3.OpOption) (clientv3.GetStreamChan, error) {
	k.streams.Add(1)
	return nil, status.Error(codes.Unimplemented, "unknown method RangeStream")
}

// TestScanFallsBackToPages: a scan that meets a server without
// RangeStream reads the same keys in pages, and later scans go to pages
// without asking for a stream again.
func TestScanFallsBackToPages(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	kvc := &noRangeStream{KV: cli.KV}
	cli.KV = kvc
	s, err := etcdkv.NewFromClient(cli, etcdkv.Config{ScanPageSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := range 25 {
		keys = append(keys, fmt.Sprintf("k%02d", i))
	}
	loadKeys(t, cli, s, "p", keys)
	var pages atomic.Int64
	defer etcdkv.SetAfterPagedRangeForTest(func(int64) { pages.Add(1) })()
	for i := range 2 {
		if got := scanKeys(t, s, "p"); !slices.Equal(got, keys) {
			t.Fatalf("scan %d without RangeStream: %q, want %q", i, got, keys)
		}
	}
	if n := kvc.streams.Load(); n != 1 {
		t.Errorf("%d streams asked for, want 1 (the first scan's)", n)
	}
	if n := pages.Load(); n < 2*7 {
		t.Errorf("%d pages read by two scans of 25 keys in pages of 4, want at least 14", n)
	}
}
