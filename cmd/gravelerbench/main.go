// Command gravelerbench drives a gravelerd over gRPC with a configurable
// load and prints throughput and latency percentiles (p50/p90/p99/max) per
// operation. In the same run it applies the same write (or read) load as
// plain etcd puts (or gets) against the same etcd and prints the ratio, so
// figures are comparable across machines. The two sides run in turns, in
// --pairs pairs of alternating phases, and the ratio quoted is the median
// of the pairs, with the load average at the start and end (compare, in
// load.go); the raw side uses as many etcd connections as gravelerd.
//
//	gravelerbench --embedded --scenario staged-writes --writers 1,16,64 --duration 10s
//	gravelerbench --server 127.0.0.1:7070 --etcd http://127.0.0.1:2379 --scenario reads
//
// Scenarios: staged-writes, reads, long-commit, small-commits-one-branch,
// small-commits-many-branches, commit-sizes, commit-scaling, tombstones
// (what staged deletes cost a listing; it runs the library on etcd, so it
// needs --embedded or --etcd). --embedded starts an embedded etcd and an
// in-process gravelerd on loopback, so one command measures everything
// with no setup. Lines starting with RATIO and COMMIT are the figures to
// quote. Against separate etcd and gravelerd processes, --etcd-pid and
// --server-pid add a PROCESS_CPU line under each RATIO line: each side's
// CPU per call in etcd and in gravelerd (Linux), which is what bounds a
// deployment whose gravelerd replicas scale out.
//
// It exits 0 when the scenario ran (calls that failed under load are
// counted in its figures, by operation and gRPC code, not fatal), 1 when
// it could not finish (a target it needs missing, a setup step, a
// timed commit or a profile write failed) or measured nothing (every call
// of an operation in a table failed; the tables are printed first), the
// error being the last line on stderr, and 2 for bad flags (among them a
// --key-size or --value-size over the server's limits).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"graveler/cmd/internal/flagenv"
	"graveler/graveler"
)

type config struct {
	server       string
	etcd         string
	embedded     bool
	noFsync      bool
	commitRate   float64
	baselineOnly bool
	writers      []int
	readers      int
	readerList   []int // --readers as given; reads runs once per count
	committers   int
	keySize      int
	valueSize    int
	duration     time.Duration
	scenario     string
	preload      int
	stage        int
	sizes        []int
	conns        int
	etcdConns    int
	pairs        int
	warmup       time.Duration
	cpuProfile   string
	memProfile   string
	etcdPIDs     []int
	serverPIDs   []int
	scaling      scalingFlags
}

var scenarios = []string{"staged-writes", "reads", "long-commit", "small-commits-one-branch", "small-commits-many-branches", "commit-sizes", "commit-scaling", "tombstones"}

func intList(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a list of positive integers", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("gravelerbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &config{}
	var writers, sizes, readers string
	fs.StringVar(&c.server, "server", "", "gravelerd gRPC address (host:port)")
	fs.StringVar(&c.etcd, "etcd", "", "comma-separated etcd endpoints for the raw-etcd baseline (the cluster gravelerd uses)")
	fs.BoolVar(&c.embedded, "embedded", false, "start an embedded etcd and an in-process gravelerd on loopback")
	fs.BoolVar(&c.noFsync, "embedded-unsafe-no-fsync", false, "embedded etcd skips fsync (both sides of a ratio alike)")
	fs.Float64Var(&c.commitRate, "embedded-commit-read-rate", 0, "the in-process gravelerd's --commit-read-rate (entries/s; 0: unpaced)")
	fs.BoolVar(&c.baselineOnly, "baseline-only", false, "measure raw etcd only")
	fs.StringVar(&writers, "writers", "16", "concurrent writers; a comma-separated list runs the scenario once per count")
	fs.StringVar(&readers, "readers", "16", "concurrent readers; a comma-separated list runs the reads scenario once per count (other scenarios take the first)")
	fs.IntVar(&c.committers, "committers", 4, "concurrent committers (small-commits scenarios)")
	fs.IntVar(&c.keySize, "key-size", 32, fmt.Sprintf("key size in bytes (at most %d, the server's limit)", graveler.MaxKeyLen))
	fs.IntVar(&c.valueSize, "value-size", 128, fmt.Sprintf("value data size in bytes, plus a 16-byte identity (at most %d, the server's limit)", graveler.MaxValueDataLen))
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "measurement time per side of a comparison (split into --pairs phases), or per phase elsewhere")
	fs.IntVar(&c.pairs, "pairs", 4, "graveler/raw-etcd comparisons: pairs of alternating phases; RATIO quotes the median")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "graveler/raw-etcd comparisons: unmeasured warm-up of each side (at most one phase)")
	fs.StringVar(&c.scenario, "scenario", "staged-writes", strings.Join(scenarios, " | "))
	fs.IntVar(&c.preload, "preload", 10000, "entries loaded before the reads scenario")
	fs.IntVar(&c.stage, "stage", 200000, "entries staged before the long commit")
	fs.StringVar(&sizes, "sizes", "1000,10000,100000", "staged entries per commit (commit-sizes)")
	c.scaling.register(fs)
	fs.IntVar(&c.conns, "conns", 1, "gRPC connections to gravelerd (default: one, as the client library and the raw baseline's etcd client hold)")
	fs.IntVar(&c.etcdConns, "etcd-conns", gravelerdEtcdConns, "etcd clients of the raw-etcd baseline (default: as many as a gravelerd holds)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured run (with --embedded: etcd and gravelerd included) to this file")
	fs.StringVar(&c.memProfile, "memprofile", "", "write an allocation profile (allocs since the start of the process, -sample_index=alloc_objects for counts) to this file at the end of the run")
	var etcdPIDs, serverPIDs string
	fs.StringVar(&etcdPIDs, "etcd-pid", "", "comma-separated process ids of the etcd members (Linux, with --server and --etcd): RATIO cells add each side's etcd CPU per call")
	fs.StringVar(&serverPIDs, "server-pid", "", "comma-separated process ids of the gravelerd replicas (Linux, with --server): RATIO cells add gravelerd's CPU per call")
	if err := flagenv.Parse(fs, args, nil); err != nil {
		return nil, err
	}
	var errs []error
	var err error
	if c.etcdPIDs, err = pidList(etcdPIDs); err != nil {
		errs = append(errs, fmt.Errorf("--etcd-pid: %w", err))
	}
	if c.serverPIDs, err = pidList(serverPIDs); err != nil {
		errs = append(errs, fmt.Errorf("--server-pid: %w", err))
	}
	if c.embedded && (len(c.etcdPIDs) > 0 || len(c.serverPIDs) > 0) {
		// With --embedded, etcd and gravelerd are this process: the CPU
		// line already counts them, and no other process would.
		errs = append(errs, errors.New("--etcd-pid and --server-pid name separate processes; with --embedded etcd and gravelerd run in this one (see the CPU line)"))
	}
	if c.readerList, err = intList(readers); err != nil {
		errs = append(errs, fmt.Errorf("--readers: %w", err))
	} else {
		c.readers = c.readerList[0]
	}
	if c.writers, err = intList(writers); err != nil {
		errs = append(errs, fmt.Errorf("--writers: %w", err))
	}
	if c.sizes, err = intList(sizes); err != nil {
		errs = append(errs, fmt.Errorf("--sizes: %w", err))
	}
	errs = append(errs, c.scaling.check())
	if !strings.Contains(" "+strings.Join(scenarios, " ")+" ", " "+c.scenario+" ") {
		errs = append(errs, fmt.Errorf("--scenario %q: want one of %s", c.scenario, strings.Join(scenarios, ", ")))
	}
	if !c.embedded && c.server == "" && !c.baselineOnly {
		errs = append(errs, errors.New("--server or --embedded is required (or --baseline-only with --etcd)"))
	}
	if !c.embedded && c.baselineOnly && c.etcd == "" {
		errs = append(errs, errors.New("--baseline-only needs --etcd or --embedded"))
	}
	// --readers, --writers and --sizes are checked above.
	for _, p := range []struct {
		bad bool
		msg string
	}{
		{c.committers <= 0, fmt.Sprintf("--committers=%d must be above 0", c.committers)},
		{c.keySize <= 0, fmt.Sprintf("--key-size=%d must be above 0", c.keySize)},
		{c.valueSize < 0, fmt.Sprintf("--value-size=%d must not be negative", c.valueSize)},
		// Over the server's limits every write is INVALID_ARGUMENT. The
		// value's 16-byte identity is sent apart from its data, far within
		// its own limit (graveler.MaxIdentityLen).
		{c.keySize > graveler.MaxKeyLen, fmt.Sprintf("--key-size=%d is over the server's limit on a key, %d bytes", c.keySize, graveler.MaxKeyLen)},
		{c.valueSize > graveler.MaxValueDataLen, fmt.Sprintf("--value-size=%d is over the server's limit on a value's data, %d bytes (the 16-byte identity is apart)", c.valueSize, graveler.MaxValueDataLen)},
		{c.duration <= 0, fmt.Sprintf("--duration=%v must be above 0", c.duration)},
		{c.preload <= 0, fmt.Sprintf("--preload=%d must be above 0", c.preload)},
		{c.stage <= 0, fmt.Sprintf("--stage=%d must be above 0", c.stage)},
		{c.conns <= 0, fmt.Sprintf("--conns=%d must be above 0", c.conns)},
		{c.etcdConns <= 0, fmt.Sprintf("--etcd-conns=%d must be above 0", c.etcdConns)},
		{c.pairs <= 0, fmt.Sprintf("--pairs=%d must be above 0", c.pairs)},
		{c.warmup < 0, fmt.Sprintf("--warmup=%v must not be negative", c.warmup)},
	} {
		if p.bad {
			errs = append(errs, errors.New(p.msg))
		}
	}
	return c, errors.Join(errs...)
}

func run(ctx context.Context, c *config, out io.Writer) error {
	endpoints := []string{}
	if c.etcd != "" {
		endpoints = strings.Split(c.etcd, ",")
	}
	addr := c.server
	if c.embedded {
		s, err := startEmbedded(ctx, c.noFsync, !c.baselineOnly, c.commitRate, zap.NewNop())
		if err != nil {
			return err
		}
		defer s.Close()
		endpoints, addr = s.endpoints, s.addr
		if c.baselineOnly {
			fmt.Fprintf(out, "embedded etcd %v (fsync=%v), no gravelerd (baseline only)\n", endpoints, !c.noFsync)
		} else {
			fmt.Fprintf(out, "embedded etcd %v (fsync=%v), in-process gravelerd %s\n", endpoints, !c.noFsync, addr)
		}
	}
	b := &bench{
		out: out, w: workload{KeySize: c.keySize, ValueSize: c.valueSize},
		writers: c.writers, readers: c.readers, readerList: c.readerList, committers: c.committers, duration: c.duration,
		preload: c.preload, stage: c.stage, sizes: c.sizes,
		runID:    strconv.FormatInt(time.Now().Unix()%100000000, 36),
		embedded: c.embedded, endpoints: endpoints,
		pairs: c.pairs, warmup: c.warmup, etcdConns: c.etcdConns,
		etcdPIDs: c.etcdPIDs, serverPIDs: c.serverPIDs,
	}
	for _, pids := range [][]int{c.etcdPIDs, c.serverPIDs} {
		for _, pid := range pids {
			if _, err := pidCPU(pid); err != nil {
				return fmt.Errorf("process %d: %w", pid, err)
			}
		}
	}
	if !c.baselineOnly {
		g, err := dialGraveler(ctx, addr, c.conns)
		if err != nil {
			return err
		}
		defer g.Close()
		b.g = g
	}
	if len(endpoints) > 0 {
		r, err := dialEtcd(endpoints, c.etcdConns)
		if err != nil {
			return err
		}
		defer r.Close()
		defer func() {
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = r.cleanup(cctx)
		}()
		b.raw = r
	}
	fmt.Fprintf(out, "scenario=%s writers=%v readers=%d committers=%d key-size=%d value-size=%d duration=%s pairs=%d preload=%d stage=%d sizes=%v\n",
		c.scenario, c.writers, c.readers, c.committers, c.keySize, c.valueSize, c.duration, c.pairs, c.preload, c.stage, c.sizes)
	fmt.Fprintf(out, "etcd connections: gravelerd %d (one etcd client), raw baseline %d; load1 at start %s\n", gravelerdEtcdConns, c.etcdConns, loadAvg())
	defer func() { fmt.Fprintf(out, "load1 at end %s\n", loadAvg()) }()
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if c.memProfile != "" {
		defer func() {
			if err := writeAllocs(c.memProfile); err != nil {
				fmt.Fprintln(out, "gravelerbench: memprofile:", err)
			}
		}()
	}
	if err := b.scenario(ctx, c); err != nil {
		return err
	}
	return b.allCallsFailed()
}

func (b *bench) scenario(ctx context.Context, c *config) error {
	switch c.scenario {
	case "staged-writes":
		return b.stagedWrites(ctx)
	case "reads":
		return b.reads(ctx)
	case "long-commit":
		return b.longCommit(ctx)
	case "small-commits-one-branch":
		return b.smallCommits(ctx, false)
	case "small-commits-many-branches":
		return b.smallCommits(ctx, true)
	case "commit-scaling":
		return b.commitScaling(ctx, c.scaling)
	case "commit-sizes":
		return b.commitSizes(ctx)
	case "tombstones":
		return b.tombstones(ctx)
	}
	return fmt.Errorf("unknown scenario %q", c.scenario)
}

// writeAllocs writes the allocation profile to path.
func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func main() {
	c, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gravelerbench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gravelerbench:", err)
		os.Exit(1)
	}
}
