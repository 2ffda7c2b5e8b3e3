package fsck_test

import (
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"graveler/fsck"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/keys"
	"graveler/kv"
)

// benchRanges cuts ranges of about 130 small entries (8 KiB), so a
// commit that changes a few keys writes a few new ranges and shares the
// rest, as production ranges do at their larger size.
var benchRanges = committed.Config{MinRangeSize: 4 << 10, MaxRangeSize: 64 << 10, BoundaryMask: 63, BlockSize: 4 << 10}

const (
	benchBaseEntries = 10_000
	benchCommits     = 1_000
)

// benchHistory builds a repository with benchBaseEntries entries and
// benchCommits commits on top, each changing two keys, then cleans up.
func benchHistory(w *world) {
	w.t.Helper()
	_, err := w.g.CreateRepository(w.ctx, "bench", w.ns("bench"), "main")
	w.must(err)
	var batch []*graveler.ValueRecord
	for i := range benchBaseEntries {
		k := fmt.Sprintf("tables/t%02d/part-%06d.parquet", i%10, i)
		batch = append(batch, &graveler.ValueRecord{Key: graveler.Key(k), Value: &graveler.Value{Identity: []byte(fmt.Sprintf("%016x", i)), Data: []byte("s3://bucket/" + k)}})
		if len(batch) == 500 {
			w.must(w.g.SetBatch(w.ctx, "bench", "main", batch))
			batch = batch[:0]
		}
	}
	w.commit("bench", "main", "base")
	r := rand.New(rand.NewPCG(1, 2))
	for c := range benchCommits - 2 {
		for range 2 {
			i := r.IntN(benchBaseEntries)
			k := fmt.Sprintf("tables/t%02d/part-%06d.parquet", i%10, i)
			w.must(w.g.Set(w.ctx, "bench", "main", graveler.Key(k), graveler.Value{Identity: []byte(fmt.Sprintf("c%d", c)), Data: []byte("x")}, graveler.SetOptions{}))
		}
		w.commit("bench", "main", fmt.Sprint(c))
	}
	// Drop the tokens the commits consumed, as the cleaner does: an
	// installation keeps a backlog of one cleaner period, not of its
	// whole history, and listing partitions costs a round trip each.
	var queued []string
	for e, err := range w.store.Scan(w.ctx, keys.Deleted(), kv.ScanOptions{Start: []byte(keys.TokensPrefix)}) {
		w.must(err)
		tok, err := keys.ParseDeletedToken(e.Key)
		w.must(err)
		queued = append(queued, tok)
	}
	for _, tok := range queued {
		_, err := kv.DropPartition(w.ctx, w.store, keys.StagingPartition(tok))
		w.must(err)
		w.must(w.store.Delete(w.ctx, keys.Deleted(), keys.DeletedToken(tok)))
	}
}

// BenchmarkFsck measures a check of a repository with 1,000 commits, by
// commits and distinct ranges checked a second, with existence checks
// (default) and with every object read and verified (full), on a file
// blob store and on an S3 server in the process (gofakes3: HTTP and
// request costs, no network).
func BenchmarkFsck(b *testing.B) {
	stores := []struct {
		name string
		make func(b *testing.B) (committed.BlobStore, string)
	}{
		{"file", func(b *testing.B) (committed.BlobStore, string) {
			return committed.NewBucketStore(committed.BucketConfig{}), "file://" + filepath.ToSlash(b.TempDir())
		}},
		{"s3", func(b *testing.B) (committed.BlobStore, string) {
			backend := s3mem.New()
			if err := backend.CreateBucket("bench"); err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(gofakes3.New(backend).Server())
			b.Cleanup(srv.Close)
			none := filepath.Join(b.TempDir(), "none")
			b.Setenv("AWS_ACCESS_KEY_ID", "bench-key")
			b.Setenv("AWS_SECRET_ACCESS_KEY", "bench-secret")
			b.Setenv("AWS_SESSION_TOKEN", "")
			b.Setenv("AWS_PROFILE", "")
			b.Setenv("AWS_CONFIG_FILE", none)
			b.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
			b.Setenv("AWS_EC2_METADATA_DISABLED", "true")
			return committed.NewBucketStore(committed.BucketConfig{S3Endpoint: srv.URL, S3Region: "us-east-1", S3ForcePathStyle: true}), "s3://bench/repositories"
		}},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			blobs, root := st.make(b)
			b.Cleanup(func() { blobs.Close() })
			w := newWorldOn(b, blobs, root, benchRanges)
			benchHistory(w)
			for _, full := range []bool{false, true} {
				name := "default"
				if full {
					name = "full"
				}
				b.Run(name, func(b *testing.B) {
					var rep *fsck.Report
					for b.Loop() {
						rep = w.check(fsck.Config{Full: full, SkipEtcdHash: true})
					}
					if !rep.Healthy || rep.Stats.Commits < benchCommits {
						b.Fatalf("report:\n%s", text(rep))
					}
					secs := b.Elapsed().Seconds() / float64(b.N)
					b.ReportMetric(float64(rep.Stats.Commits)/secs, "commits/s")
					b.ReportMetric(float64(rep.Stats.Ranges)/secs, "ranges/s")
					b.ReportMetric(float64(rep.Stats.Ranges), "ranges")
				})
			}
		})
	}
}
