package graveler_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/kv"
)

// The service benchmarks run on a real embedded etcd (etcdkvtest: no
// fsync, fast raft ticks) and the in-memory blob store of gravelertest.
// Keys and values have the shape gravelerbench uses: 32-byte keys, 128
// bytes of data plus a 16-byte identity; raw etcd puts of the baseline
// write the same 32-byte keys with 144-byte values. They only run with
// -bench, and each accepts -benchtime 1x:
//
//	go test ./graveler -run '^$' -bench StagedWrites -benchtime 2s -count 3
//	go test ./graveler -run '^$' -bench LongCommit -benchtime 1x -count 3 -timeout 30m
//	go test ./graveler -run '^$' -bench Commit/ -benchtime 1x -timeout 60m
//
// BenchmarkCommit's 1M case stages a million entries (one etcd put each),
// which took 47 s on a 2-core machine; -short skips it. BenchmarkLongCommit
// takes the -bench.* flags below, e.g. -bench.commitrates=0,100000 for the
// commit read rates to compare, or -bench.commitprofile=commit.prof to
// profile only the commit phase. docs/performance.md records the figures.
var (
	benchStage = flag.Int("bench.stage", 200_000, "entries BenchmarkLongCommit stages before the commit")
	benchPhase = flag.Duration("bench.phase", 5*time.Second, "how long BenchmarkLongCommit measures writers with no commit running")
	benchLCW   = flag.Int("bench.writers", 8, "concurrent writers of BenchmarkLongCommit")
	// benchCommitRates are the Config.CommitReadRate values BenchmarkLongCommit
	// runs with, each a sub-benchmark of its own.
	benchCommitRates = flag.String("bench.commitrates", "adaptive,0,50000", "comma-separated commit pacings for BenchmarkLongCommit: adaptive (the default pacing) or a fixed rate in entries/s (0: unpaced)")
	benchProf        = flag.String("bench.commitprofile", "", "write a CPU profile of BenchmarkLongCommit's commit phase to this file")
	benchTrace       = flag.String("bench.committrace", "", "write an execution trace of BenchmarkLongCommit's commit phase to this file")
)

// profileCommit starts the profile and trace that -bench.commitprofile and
// -bench.committrace ask for; the returned function stops them.
func profileCommit(b *testing.B) func() {
	var stops []func()
	if *benchProf != "" {
		f, err := os.Create(*benchProf)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	if *benchTrace != "" {
		f, err := os.Create(*benchTrace)
		if err != nil {
			b.Fatal(err)
		}
		if err := trace.Start(f); err != nil {
			b.Fatal(err)
		}
		stops = append(stops, func() { trace.Stop(); f.Close() })
	}
	return func() {
		for _, stop := range stops {
			stop()
		}
	}
}

const (
	benchKeySize  = 32
	benchDataSize = 128
)

var benchData = func() []byte {
	b := make([]byte, benchDataSize)
	_, _ = rand.Read(b)
	return b
}()

// benchKey is unique to (prefix, worker, seq), padded to benchKeySize.
func benchKey(prefix string, worker, seq int) graveler.Key {
	k := fmt.Appendf(nil, "%s%04d/%012d", prefix, worker, seq)
	for len(k) < benchKeySize {
		k = append(k, 'x')
	}
	return k
}

// benchValue has a 16-byte identity unique to (worker, seq), so every
// write is a change.
func benchValue(worker, seq int) graveler.Value {
	id := make([]byte, 16)
	binary.BigEndian.PutUint64(id, uint64(worker))
	binary.BigEndian.PutUint64(id[8:], uint64(seq))
	return graveler.Value{Identity: id, Data: benchData}
}

// benchEnv is an embedded etcd with a Graveler on it (repository "repo",
// branch "main") and the raw client of the same server.
type benchEnv struct {
	srv   *etcdkvtest.Server
	store kv.Store
	f     *fixture
}

func newBenchEnv(b *testing.B, cfg graveler.Config) *benchEnv {
	b.Helper()
	srv := etcdkvtest.NewServer(b)
	var store kv.Store = etcdkvtest.NewStoreOn(b, srv, etcdkv.Config{})
	return &benchEnv{srv: srv, store: store, f: newFixture(b, store, cfg)}
}

// runOps calls op(worker, i) for i in [0, total) on n goroutines and
// returns the wall time. The first error stops every worker.
func runOps(b *testing.B, n, total int, op func(worker, i int) error) time.Duration {
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for w := range n {
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= total {
					return
				}
				if err := op(w, i); err != nil {
					if !failed.Swap(true) {
						b.Error(err)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// stage writes n entries (keys benchKey(prefix, 0, i)) to branch with
// SetBatch batches of 1000, eight batches at a time.
func stage(b *testing.B, f *fixture, branch graveler.BranchID, prefix string, n int) time.Duration {
	b.Helper()
	const batch, par = 1000, 8
	batches := (n + batch - 1) / batch
	d := runOps(b, par, batches, func(_, j int) error {
		recs := make([]*graveler.ValueRecord, 0, batch)
		for i := j * batch; i < min((j+1)*batch, n); i++ {
			v := benchValue(-1, i)
			recs = append(recs, &graveler.ValueRecord{Key: benchKey(prefix, 0, i), Value: &v})
		}
		return f.g.SetBatch(context.Background(), f.repo, branch, recs)
	})
	if b.Failed() {
		b.FailNow()
	}
	return d
}

// BenchmarkStagedWrites: N writers stage unique keys on one branch
// (Graveler.Set), against N goroutines putting the same keys and values
// straight into the same etcd. ns/op is the inverse of the throughput
// (wall time over all writes). The graveler sub-benchmarks report
// "ratio": graveler throughput over the raw sub-benchmark's just before
// them (goal: >= 0.7). "graveler" is the default writer, whose fence is
// read in the write's own etcd transaction; "graveler-separate-read" reads
// it as a separate, amortized branch read (Config.SeparateFenceRead).
func BenchmarkStagedWrites(b *testing.B) {
	env := newBenchEnv(b, graveler.Config{})
	separate := newFixtureRepo(b, env.store, graveler.Config{SeparateFenceRead: true}, "separate")
	if !env.f.g.FencedWrites() || separate.g.FencedWrites() {
		b.Fatal("the two writers do not differ")
	}
	ctx := context.Background()
	var run atomic.Int64
	for _, n := range []int{1, 16, 64} {
		var rawNs float64
		b.Run(fmt.Sprintf("writers=%d", n), func(b *testing.B) {
			b.Run("raw", func(b *testing.B) {
				prefix := fmt.Sprintf("/bench-raw/%d/", run.Add(1))
				v := string(append(benchValue(0, 0).Identity, benchData...))
				b.ResetTimer()
				d := runOps(b, n, b.N, func(w, i int) error {
					_, err := env.srv.Client.Put(ctx, prefix+string(benchKey("p", w, i)), v)
					return err
				})
				rawNs = float64(d.Nanoseconds()) / float64(b.N)
			})
			for _, c := range []struct {
				name string
				f    *fixture
			}{{"graveler", env.f}, {"graveler-separate-read", separate}} {
				b.Run(c.name, func(b *testing.B) {
					prefix := fmt.Sprintf("g%d-", run.Add(1))
					b.ResetTimer()
					d := runOps(b, n, b.N, func(w, i int) error {
						return c.f.g.Set(ctx, c.f.repo, "main", benchKey(prefix, w, i), benchValue(w, i), graveler.SetOptions{})
					})
					if ns := float64(d.Nanoseconds()) / float64(b.N); rawNs > 0 {
						b.ReportMetric(rawNs/ns, "ratio")
					}
				})
			}
		})
	}
}

// latencies is one phase's samples, merged from every writer.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d...)
	l.mu.Unlock()
}

// pct is the nearest-rank percentile, in microseconds.
func (l *latencies) pct(p float64) float64 {
	if len(l.d) == 0 {
		return 0
	}
	slices.Sort(l.d)
	rank := max(0, min(int(p/100*float64(len(l.d))+0.999999999)-1, len(l.d)-1))
	return float64(l.d[rank].Nanoseconds()) / 1e3
}

// writeUntil runs n writers staging unique keys on the branch until stop
// is closed, and returns their latencies.
func writeUntil(b *testing.B, f *fixture, n int, prefix string, stop <-chan struct{}) *latencies {
	var lat latencies
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			var mine []time.Duration
			defer func() { lat.add(mine) }()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				t := time.Now()
				if err := f.g.Set(context.Background(), f.repo, "main", benchKey(prefix, w, i), benchValue(w, i), graveler.SetOptions{}); err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(t))
			}
		})
	}
	wg.Wait()
	return &lat
}

// BenchmarkLongCommit stages -bench.stage entries (default 200,000) on
// main, then measures the latency of -bench.writers concurrent writers
// (default 8) for -bench.phase with no commit running, and again while
// one commit of the staged entries runs. It reports p50/p99 in µs for
// both phases, p99 during over p99 without (goal: <= 2), the commit's
// duration, and the time staging took. ns/op covers both phases. It runs
// once per -bench.commitrates value (default: the adaptive pacing,
// unpaced, and a fixed 50,000/s).
func BenchmarkLongCommit(b *testing.B) {
	for _, r := range strings.Split(*benchCommitRates, ",") {
		if strings.TrimSpace(r) == "adaptive" {
			b.Run("commit-pacing=adaptive", func(b *testing.B) { benchmarkLongCommit(b, graveler.Config{}) })
			continue
		}
		rate, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if err != nil || rate < 0 {
			b.Fatalf("-bench.commitrates: %q is not a rate", r)
		}
		b.Run(fmt.Sprintf("commit-read-rate=%s", strings.TrimSpace(r)), func(b *testing.B) {
			benchmarkLongCommit(b, graveler.Config{CommitReadRate: rate, CommitPacing: graveler.CommitPacing{Off: true}})
		})
	}
}

func benchmarkLongCommit(b *testing.B, cfg graveler.Config) {
	n, writers := *benchStage, *benchLCW
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		env := newBenchEnv(b, cfg)
		stageTime := stage(b, env.f, "main", "s", n)
		b.StartTimer()

		stop := make(chan struct{})
		time.AfterFunc(*benchPhase, func() { close(stop) })
		t0 := time.Now()
		without := writeUntil(b, env.f, writers, "w", stop)
		withoutTime := time.Since(t0)

		stop = make(chan struct{})
		stopProfile := profileCommit(b)
		var commitTime time.Duration
		var commitErr error
		go func() {
			defer close(stop)
			t := time.Now()
			_, commitErr = env.f.g.Commit(context.Background(), env.f.repo, "main", graveler.CommitParams{Committer: "bench", Message: "long"})
			commitTime = time.Since(t)
		}()
		during := writeUntil(b, env.f, writers, "d", stop)
		stopProfile()
		if commitErr != nil {
			b.Fatalf("commit of %d entries: %v", n, commitErr)
		}
		if b.Failed() {
			b.FailNow()
		}
		b.StopTimer()
		br, err := env.f.g.GetBranch(context.Background(), env.f.repo, "main")
		if err != nil || len(br.SealedTokens) != 0 {
			b.Fatalf("branch after the commit: %+v, %v", br, err)
		}
		p99w, p99d := without.pct(99), during.pct(99)
		b.ReportMetric(without.pct(50), "without-p50-µs")
		b.ReportMetric(p99w, "without-p99-µs")
		b.ReportMetric(during.pct(50), "during-p50-µs")
		b.ReportMetric(p99d, "during-p99-µs")
		b.ReportMetric(p99d/p99w, "p99-during/without")
		b.ReportMetric(float64(len(without.d))/withoutTime.Seconds(), "without-writes/s")
		b.ReportMetric(float64(len(during.d))/commitTime.Seconds(), "during-writes/s")
		b.ReportMetric(commitTime.Seconds(), "commit-s")
		b.ReportMetric(float64(n)/commitTime.Seconds(), "commit-entries/s")
		b.ReportMetric(stageTime.Seconds(), "stage-s")
		b.StartTimer()
	}
}

// BenchmarkCommit times one commit of 10k, 100k and 1M staged entries
// (each size on a fresh etcd), staged with parallel SetBatch calls that
// are not timed. It reports entries/s and the staging time. -short skips
// the 1M case, whose staging alone takes one to two minutes.
func BenchmarkCommit(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			if n >= 1_000_000 && testing.Short() {
				b.Skip("1M entries take minutes to stage; skipped with -short")
			}
			b.StopTimer()
			env := newBenchEnv(b, graveler.Config{})
			var staging, committing time.Duration
			for i := 0; i < b.N; i++ {
				branch := graveler.BranchID(fmt.Sprintf("b%d", i))
				if _, err := env.f.g.CreateBranch(context.Background(), env.f.repo, branch, "main"); err != nil {
					b.Fatal(err)
				}
				staging += stage(b, env.f, branch, fmt.Sprintf("c%d-", i), n)
				t := time.Now()
				b.StartTimer()
				_, err := env.f.g.Commit(context.Background(), env.f.repo, branch, graveler.CommitParams{Committer: "bench", Message: "size"})
				b.StopTimer()
				committing += time.Since(t)
				if err != nil {
					b.Fatalf("commit of %d entries: %v", n, err)
				}
			}
			b.ReportMetric(float64(n*b.N)/committing.Seconds(), "entries/s")
			b.ReportMetric(staging.Seconds()/float64(b.N), "stage-s/op")
		})
	}
}
