package committed_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/committed/blobtest"
)

// meteredStore counts the blobs and bytes written (a pack is one blob)
// and the objects read.
type meteredStore struct {
	committed.BlobStore
	puts, putBytes, gets atomic.Int64
}

func (s *meteredStore) Put(ctx context.Context, ns graveler.StorageNamespace, name string, data []byte) error {
	s.puts.Add(1)
	s.putBytes.Add(int64(len(data)))
	return s.BlobStore.Put(ctx, ns, name, data)
}

func (s *meteredStore) Get(ctx context.Context, ns graveler.StorageNamespace, name string) ([]byte, error) {
	s.gets.Add(1)
	return s.BlobStore.Get(ctx, ns, name)
}

// GetRange counts as an object read: the objects of a pack are read one
// by one, each with a GetRange.
func (s *meteredStore) GetRange(ctx context.Context, ns graveler.StorageNamespace, name string, offset, length int64) ([]byte, error) {
	s.gets.Add(1)
	return s.BlobStore.GetRange(ctx, ns, name, offset, length)
}

func scalingKey(i int) string { return fmt.Sprintf("data/part-%08d.parquet", i) }

func scalingRecord(i int, salt uint64) graveler.ValueRecord {
	k := scalingKey(i)
	return graveler.ValueRecord{Key: graveler.Key(k), Value: &graveler.Value{
		Identity: []byte(fmt.Sprintf("%016x", rand.New(rand.NewPCG(uint64(i), salt)).Uint64())),
		Data:     []byte("s3://bucket/objects/" + k),
	}}
}

// genIter yields scalingRecord(i) for i in [0, n): a sorted stream that
// needs no memory, to bulk-build large heads.
type genIter struct {
	n, i int
	rec  graveler.ValueRecord
}

func (it *genIter) Next() bool {
	if it.i >= it.n {
		return false
	}
	it.rec = scalingRecord(it.i, 0)
	it.i++
	return true
}
func (it *genIter) Value() *graveler.ValueRecord { return &it.rec }
func (it *genIter) SeekGE(graveler.Key)          { panic("unused") }
func (it *genIter) Err() error                   { return nil }
func (it *genIter) Close()                       {}

type recIter struct {
	recs []graveler.ValueRecord
	i    int
}

func (it *recIter) Next() bool                   { it.i++; return it.i <= len(it.recs) }
func (it *recIter) Value() *graveler.ValueRecord { return &it.recs[it.i-1] }
func (it *recIter) SeekGE(graveler.Key)          { panic("unused") }
func (it *recIter) Err() error                   { return nil }
func (it *recIter) Close()                       {}

// scalingSizes reads COMMIT_SCALING_N (comma-separated entry counts),
// default 10k and 1M.
func scalingSizes() []int {
	s := os.Getenv("COMMIT_SCALING_N")
	if s == "" {
		return []int{10_000, 1_000_000}
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(f)
		if err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

// scalingConfig reads COMMIT_SCALING_CFG, "minRange,rangeMaskBits,
// minNode,nodeMaskBits[,rangeRamp,nodeRamp]" (sizes in bytes; a ramp of
// -1 is the mask alone), to compare tree shapes; default the package
// defaults.
func scalingConfig(b *testing.B) committed.Config {
	var cfg committed.Config
	if p, err := strconv.Atoi(os.Getenv("COMMIT_SCALING_PAR")); err == nil {
		cfg.WriteParallelism = p
	}
	s := os.Getenv("COMMIT_SCALING_CFG")
	if s == "" {
		return cfg
	}
	var v [6]int
	n, err := fmt.Sscanf(s, "%d,%d,%d,%d,%d,%d", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5])
	if n < 4 || (n > 4 && n < 6) {
		b.Fatalf("COMMIT_SCALING_CFG %q: %v", s, err)
	}
	cfg.MinRangeSize, cfg.BoundaryMask = v[0], 1<<v[1]-1
	cfg.MinNodeSize, cfg.NodeMask = v[2], 1<<v[3]-1
	if n == 6 {
		cfg.RangeRamp, cfg.NodeRamp = v[4], v[5]
	}
	return cfg
}

// BenchmarkCommitScaling bulk-builds a head of N entries, then applies
// commits of 1,000 changed keys, spread at random or contiguous, each
// onto the head with a fresh set of keys, on the file store and on the S3
// fake, with objects stored in packs and, as baselines of the same run,
// each on its own (COMMIT_SCALING_UNPACKED=1: store=file-unpacked) and as
// the release before packs wrote them (COMMIT_SCALING_BEFORE=1:
// store=file-before, unpacked, ranges cut at 2 KiB and 5 bits and nodes
// at 2 KiB and 6 bits), as the release before the ramps did
// (COMMIT_SCALING_MASKS=1: store=file-masks, packed, cut by the masks
// alone), and onto a head written by that release
// (COMMIT_SCALING_UPGRADE=1: store=file-upgrade, every commit the first
// onto an old tree: the cost of reshaping its nodes next to each change,
// which later commits near the same keys no longer pay). It reports per
// commit:
// wall time, bytes and blobs written (objects_written: a pack is one) and
// objects read (a server's warm caches: one Manager for all commits).
//
//	COMMIT_SCALING_N=10000,100000,1000000 go test -run '^$' -bench CommitScaling -benchtime 5x ./graveler/committed/
func BenchmarkCommitScaling(b *testing.B) {
	const k = 1000
	stores := []struct {
		name string
		open func(b *testing.B) (committed.BlobStore, graveler.StorageNamespace)
	}{
		{"file", func(b *testing.B) (committed.BlobStore, graveler.StorageNamespace) {
			dir := filepath.Join(b.TempDir(), "data")
			return committed.NewBucketStore(committed.BucketConfig{}), graveler.StorageNamespace("file://" + filepath.ToSlash(dir))
		}},
		{"s3", func(b *testing.B) (committed.BlobStore, graveler.StorageNamespace) {
			fake := blobtest.StartFakeS3(b, "bench")
			return committed.NewBucketStore(fake.Config), graveler.StorageNamespace("s3://bench/data")
		}},
	}
	packing := []string{"packed"}
	if os.Getenv("COMMIT_SCALING_UNPACKED") == "1" {
		packing = append(packing, "unpacked")
	}
	if os.Getenv("COMMIT_SCALING_BEFORE") == "1" {
		packing = append(packing, "before")
	}
	if os.Getenv("COMMIT_SCALING_MASKS") == "1" {
		packing = append(packing, "masks")
	}
	if os.Getenv("COMMIT_SCALING_UPGRADE") == "1" {
		packing = append(packing, "upgrade")
	}
	for _, st := range stores {
		for _, n := range scalingSizes() {
			for _, pk := range packing {
				name := st.name
				if pk != "packed" {
					name += "-" + pk
				}
				b.Run(fmt.Sprintf("store=%s/n=%d", name, n), func(b *testing.B) {
					blobs, ns := st.open(b)
					defer blobs.Close()
					ms := &meteredStore{BlobStore: blobs}
					// cfg writes the commits, build the head.
					cfg := scalingConfig(b)
					build := &cfg
					switch pk {
					case "unpacked":
						cfg.Unpacked = true
					case "before":
						cfg.Unpacked = true
						cfg.MinRangeSize, cfg.BoundaryMask, cfg.MinNodeSize, cfg.NodeMask = 2<<10, 1<<5-1, 2<<10, 1<<6-1
						cfg.RangeRamp, cfg.NodeRamp = -1, -1
					case "masks":
						cfg.RangeRamp, cfg.NodeRamp = -1, -1
					case "upgrade":
						old := cfg
						old.RangeRamp, old.NodeRamp = -1, -1
						build = &old
					}
					m := committed.NewManager(ms, cfg)
					ctx := context.Background()
					start := time.Now()
					head, err := committed.NewManager(ms, *build).WriteMetaRangeByIterator(ctx, ns, &genIter{n: n})
					if err != nil {
						b.Fatal(err)
					}
					buildMS, headObjects := time.Since(start).Milliseconds(), ms.puts.Load()
					for _, layout := range []string{"random", "contiguous"} {
						b.Run("layout="+layout, func(b *testing.B) {
							r := rand.New(rand.NewPCG(uint64(n), 7))
							var elapsed, cpu time.Duration
							puts, bytes, gets := ms.puts.Load(), ms.putBytes.Load(), ms.gets.Load()
							iter := 0
							for b.Loop() {
								iter++
								changes := scalingChanges(r, n, k, layout == "random", uint64(iter)+1)
								t0, c0 := time.Now(), processCPU()
								// Labelled so a CPU profile of the run can keep the
								// commits apart from the bulk build
								// (go tool pprof -tagfocus phase=commit).
								var err error
								pprof.Do(ctx, pprof.Labels("phase", "commit"), func(ctx context.Context) {
									_, _, err = m.Apply(ctx, ns, head, &recIter{recs: changes}, graveler.ApplyOptions{})
								})
								if err != nil {
									b.Fatal(err)
								}
								elapsed += time.Since(t0)
								cpu += processCPU() - c0
							}
							ops := float64(b.N)
							b.ReportMetric(float64(elapsed.Microseconds())/1000/ops, "commit_ms")
							// CPU time (user and system, every thread) is less at the
							// mercy of other jobs on a shared machine than wall time.
							b.ReportMetric(float64(cpu.Microseconds())/1000/ops, "cpu_ms")
							b.ReportMetric(float64(ms.putBytes.Load()-bytes)/ops, "bytes_written")
							b.ReportMetric(float64(ms.puts.Load()-puts)/ops, "objects_written")
							b.ReportMetric(float64(ms.gets.Load()-gets)/ops, "objects_read")
							b.ReportMetric(float64(buildMS), "build_ms")
							b.ReportMetric(float64(headObjects), "head_objects")
						})
					}
				})
			}
		}
	}
}

// scalingChanges returns new values (salted with salt) for min(k, n) of
// the keys 0..n-1, sorted: random ones, or a random run of consecutive
// ones.
func scalingChanges(r *rand.Rand, n, k int, random bool, salt uint64) []graveler.ValueRecord {
	idx := map[int]bool{}
	if random {
		for len(idx) < min(k, n) {
			idx[r.IntN(n)] = true
		}
	} else {
		s := r.IntN(n - min(k, n) + 1)
		for i := s; i < s+min(k, n); i++ {
			idx[i] = true
		}
	}
	keys := slices.Sorted(maps.Keys(idx))
	changes := make([]graveler.ValueRecord, len(keys))
	for j, i := range keys {
		changes[j] = scalingRecord(i, salt)
	}
	return changes
}

// BenchmarkDiffScaling times a full Diff of two trees of N entries that
// differ in k = 1,000 random keys (the head and the head with one commit
// of them applied), beside a full List of one of them in the same run: the
// cost a diff that could not skip equal subtrees would pay at least. Each
// iteration uses a fresh Manager, so no node or range is cached: what it
// reads is what a cold diff reads. Sizes from COMMIT_SCALING_N.
//
//	COMMIT_SCALING_N=1000000 go test -run '^$' -bench DiffScaling -benchtime 5x ./graveler/committed/
func BenchmarkDiffScaling(b *testing.B) {
	const k = 1000
	for _, n := range scalingSizes() {
		b.Run(fmt.Sprintf("store=file/n=%d", n), func(b *testing.B) {
			dir := filepath.Join(b.TempDir(), "data")
			blobs := committed.NewBucketStore(committed.BucketConfig{})
			defer blobs.Close()
			ns := graveler.StorageNamespace("file://" + filepath.ToSlash(dir))
			ms := &meteredStore{BlobStore: blobs}
			cfg := scalingConfig(b)
			ctx := context.Background()
			m := committed.NewManager(ms, cfg)
			left, err := m.WriteMetaRangeByIterator(ctx, ns, &genIter{n: n})
			if err != nil {
				b.Fatal(err)
			}
			changes := scalingChanges(rand.New(rand.NewPCG(uint64(n), 11)), n, k, true, 99)
			right, _, err := m.Apply(ctx, ns, left, &recIter{recs: changes}, graveler.ApplyOptions{})
			if err != nil {
				b.Fatal(err)
			}
			for _, op := range []string{"diff", "list"} {
				b.Run("op="+op, func(b *testing.B) {
					var elapsed time.Duration
					gets := ms.gets.Load()
					rows := 0
					for b.Loop() {
						cold := committed.NewManager(ms, cfg)
						t0 := time.Now()
						var it interface {
							Next() bool
							Err() error
							Close()
						}
						var err error
						if op == "diff" {
							it, err = cold.Diff(ctx, ns, left, right)
						} else {
							it, err = cold.List(ctx, ns, right)
						}
						if err != nil {
							b.Fatal(err)
						}
						for rows = 0; it.Next(); rows++ {
						}
						if err := it.Err(); err != nil {
							b.Fatal(err)
						}
						it.Close()
						elapsed += time.Since(t0)
					}
					if op == "diff" && rows != len(changes) {
						b.Fatalf("diff found %d differences, want %d", rows, len(changes))
					}
					ops := float64(b.N)
					b.ReportMetric(float64(elapsed.Microseconds())/1000/ops, "ms")
					b.ReportMetric(float64(ms.gets.Load()-gets)/ops, "objects_read")
					b.ReportMetric(float64(rows), "rows")
				})
			}
		})
	}
}
