// Command cleaner reclaims what repository deletes and commits leave in
// etcd (package graveler/cleaner). It first checks that etcd answers
// within --etcd-dial-timeout and exits 1 naming the endpoints and the
// cause when it does not. With --once it then makes one bounded pass,
// prints a JSON summary on stdout and exits:
//
//	0  the pass finished and nothing failed;
//	1  etcd unreachable, the pass failed, a step failed (the next run
//	   retries it), or a record could not be decoded and was skipped (an
//	   operator must repair or remove it);
//	2  bad flags, found before etcd is dialled (a malformed endpoint or
//	   --metrics-addr, a value out of range), each named with the value
//	   it got;
//	3  the pass stopped at --max-keys or --timeout with nothing failed
//	   (the next run continues where it stopped).
//
// Any exit but 0, in either mode, ends with the line "cleaner: exit
// <code>: <why>" on stderr. Without --once it runs a pass every
// --interval while it leads an election among replicas, and serves
// Prometheus metrics on --metrics-addr (a daemon that cannot start, or
// whose election etcd refuses for good, exits 1, or 2 for bad flags, an
// --election-ttl above etcd's longest lease among them). With --gc a
// pass then also collects committed objects no commit references (in
// daemon mode at most once per --gc-interval); the summary's "gc" object
// says what it marked, listed, deleted and kept. A collection that could
// not read something it needs (exit 1) deleted nothing it could not prove
// unreferenced. Every flag
// but --version has a GRAVELER_* environment variable (--etcd-endpoints:
// GRAVELER_ETCD_ENDPOINTS); a flag on the command line wins.
// SIGINT/SIGTERM stop it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"graveler/buildinfo"
	"graveler/cleaner"
	"graveler/cmd/internal/flagenv"
	"graveler/etcdkv"
	"graveler/graveler/committed"
	"graveler/graveler/ref"
	"graveler/internal/hostport"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes of --once (and the code 1 for every failure to start).
const (
	exitOK         = 0
	exitFailed     = 1
	exitUsage      = 2
	exitIncomplete = 3
)

// errVersion: --version was given; run prints the version and exits 0.
var errVersion = errors.New("version requested")

// config is what the flags say.
type config struct {
	once        bool
	etcd        etcdkv.Config
	metricsAddr string
	logLevel    string
	electionTTL int
	cleaner     cleaner.Config
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("cleaner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var version bool
	fs.BoolVar(&version, "version", false, "print the version and exit")
	fs.BoolVar(&c.once, "once", false, "make one pass, print a summary and exit: 0 done, 1 failed, 3 stopped at --max-keys or --timeout (for a CronJob)")
	fs.DurationVar(&c.cleaner.Interval, "interval", cleaner.DefaultInterval, "pause between passes in daemon mode")
	checkEtcd := flagenv.EtcdFlags(fs, &c.etcd)
	fs.DurationVar(&c.etcd.DialTimeout, "etcd-dial-timeout", 5*time.Second, "bound on reaching etcd at start: no answer within it (wrong endpoint, TLS mismatch, etcd down) exits 1 naming the cause")
	fs.DurationVar(&c.etcd.RequestTimeout, "etcd-request-timeout", etcdkv.DefaultRequestTimeout, "bound on each attempt of an etcd request: a read that runs out is sent again, a write settled (negative: only --timeout)")
	fs.DurationVar(&c.etcd.DialKeepAliveTime, "etcd-keepalive-time", etcdkv.DefaultDialKeepAliveTime, "silence on a connection with requests in flight before the client pings the etcd member (at least 10s; negative: no pings)")
	fs.DurationVar(&c.etcd.DialKeepAliveTimeout, "etcd-keepalive-timeout", etcdkv.DefaultDialKeepAliveTimeout, "unanswered ping after which the connection to an etcd member is closed")
	fs.Int64Var(&c.cleaner.MaxKeys, "max-keys", 0, "keys one pass may reclaim, checked before each partition (0: no bound)")
	fs.DurationVar(&c.cleaner.Timeout, "timeout", 0, "bound on one pass; a pass cut short is finished by the next (0: none)")
	fs.BoolVar(&c.cleaner.Sweep, "sweep", false, "also reclaim partitions that nothing references (a full pass over partition names)")
	fs.DurationVar(&c.cleaner.SweepGrace, "sweep-grace", cleaner.DefaultSweepGrace, "the sweep leaves partitions younger than this alone (above 0)")
	fs.DurationVar(&c.cleaner.RepositoryCreationTimeout, "repository-creation-timeout", ref.DefaultRepositoryCreationTimeout, "age after which an initial repository is a crashed create (above 0; the default is gravelerd's fixed creation timeout)")
	fs.BoolVar(&c.cleaner.DryRun, "dry-run", false, "change nothing; report what would be reclaimed (and, with --gc, collected)")
	fs.BoolVar(&c.cleaner.GC.Enabled, "gc", false, "after the reclaim pass, delete committed objects (ranges, metaranges) that no commit of a live repository references and that are older than --gc-grace (in daemon mode at most once per --gc-interval)")
	fs.DurationVar(&c.cleaner.GC.Grace, "gc-grace", cleaner.DefaultGCGrace, "--gc keeps every object modified within this; at least gravelerd's committed-object grace (6h unless changed) and longer than any commit")
	fs.DurationVar(&c.cleaner.GC.Interval, "gc-interval", cleaner.DefaultGCInterval, "least time between two collections in daemon mode")
	fs.Float64Var(&c.cleaner.GC.DeleteRate, "gc-delete-rate", 0, "most objects deleted per second from the blob store, by --gc and by emptying deleted repositories' namespaces (0: no bound)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "host:port serving Prometheus /metrics in daemon mode (empty: off)")
	fs.IntVar(&c.electionTTL, "election-ttl", 15, fmt.Sprintf("seconds a dead leader keeps leadership before another replica takes over (1 to %d, etcd's longest lease)", int64(cleaner.MaxElectionTTL)))
	fs.StringVar(&c.logLevel, "log-level", "info", "least level logged (JSON on stderr): debug, info, warn or error")
	// Variables become the defaults, so explicit flags win; GRAVELER_VERSION
	// (or GRAVELER_O) set for another purpose must not change the output.
	if err := flagenv.Parse(fs, args, getenv, "version"); err != nil {
		return c, err
	}
	if version {
		return c, errVersion
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	// Every problem, each naming its flag and the value it got.
	errs := []error{checkEtcd()}
	for _, p := range []struct {
		bad bool
		msg string
	}{
		{c.cleaner.MaxKeys < 0, fmt.Sprintf("--max-keys=%d must not be negative (0: no bound)", c.cleaner.MaxKeys)},
		{c.cleaner.Timeout < 0, fmt.Sprintf("--timeout=%v must not be negative (0: none)", c.cleaner.Timeout)},
		{c.cleaner.Interval <= 0, fmt.Sprintf("--interval=%v must be above 0", c.cleaner.Interval)},
		{c.electionTTL <= 0, fmt.Sprintf("--election-ttl=%d must be above 0", c.electionTTL)},
		// etcd would refuse the lease on every campaign.
		{int64(c.electionTTL) > cleaner.MaxElectionTTL, fmt.Sprintf("--election-ttl=%d is above %d, the longest lease etcd grants (in seconds)", c.electionTTL, int64(cleaner.MaxElectionTTL))},
		{c.etcd.DialTimeout <= 0, fmt.Sprintf("--etcd-dial-timeout=%v must be above 0", c.etcd.DialTimeout)},
		{c.cleaner.GC.Grace <= 0, fmt.Sprintf("--gc-grace=%v must be above 0", c.cleaner.GC.Grace)},
		{c.cleaner.GC.Interval <= 0, fmt.Sprintf("--gc-interval=%v must be above 0", c.cleaner.GC.Interval)},
		{c.cleaner.GC.DeleteRate < 0 || math.IsNaN(c.cleaner.GC.DeleteRate), fmt.Sprintf("--gc-delete-rate=%v must be a number, not negative (0: no bound)", c.cleaner.GC.DeleteRate)},
		{c.etcd.DialKeepAliveTimeout < 0, fmt.Sprintf("--etcd-keepalive-timeout=%v must not be negative", c.etcd.DialKeepAliveTimeout)},
		// The library's negative grace (none) is for tests; a live
		// installation always needs one, and 0 would be read as the default.
		{c.cleaner.SweepGrace <= 0, fmt.Sprintf("--sweep-grace=%v must be above 0", c.cleaner.SweepGrace)},
		{c.cleaner.RepositoryCreationTimeout <= 0, fmt.Sprintf("--repository-creation-timeout=%v must be above 0", c.cleaner.RepositoryCreationTimeout)},
	} {
		if p.bad {
			errs = append(errs, errors.New(p.msg))
		}
	}
	if c.metricsAddr != "" {
		if _, _, err := hostport.Split(c.metricsAddr, 0); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-addr=%q (as :9090): %v", c.metricsAddr, err))
		}
	}
	if _, err := zapcore.ParseLevel(c.logLevel); err != nil {
		errs = append(errs, fmt.Errorf("--log-level: %w", err))
	}
	return c, errors.Join(errs...)
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if errors.Is(err, errVersion) {
		fmt.Fprintln(stdout, buildinfo.String("cleaner"))
		return exitOK
	}
	if err != nil {
		// No log yet: the same last line, in plain text, with every
		// problem on it.
		fmt.Fprintf(stderr, "cleaner: exit %d: %s\n", exitUsage, strings.ReplaceAll(err.Error(), "\n", "; "))
		return exitUsage
	}
	level, _ := zapcore.ParseLevel(cfg.logLevel)
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(stderr), level))
	defer func() { _ = log.Sync() }()
	code, why := runLogged(ctx, cfg, log, stdout)
	if code != exitOK {
		// One place for the last line of every failure, in either mode:
		// what a Job's log or a crash-looping pod shows first.
		log.Error("cleaner: exit "+strconv.Itoa(code)+": "+why, zap.Int("exit_code", code))
	}
	return code
}

// runLogged runs the cleaner once the log is set up and returns the exit
// code, and for a code other than exitOK why.
func runLogged(ctx context.Context, cfg config, log *zap.Logger, stdout io.Writer) (int, string) {
	log.Info("cleaner starting", zap.String("version", buildinfo.Version), zap.String("go_version", buildinfo.GoVersion()),
		zap.Bool("once", cfg.once), zap.Bool("dry_run", cfg.cleaner.DryRun), zap.Bool("gc", cfg.cleaner.GC.Enabled))

	cfg.etcd.Logger = log
	store, err := etcdkv.New(ctx, cfg.etcd)
	if err != nil {
		// A configuration the client refuses (unreadable TLS files, ...):
		// nothing was sent yet.
		return exitFailed, "etcd client for " + strings.Join(cfg.etcd.Endpoints, ",") + ": " + err.Error()
	}
	defer store.Close()
	if err := reach(ctx, store.Client(), store.Prefix()+"/", cfg.etcd.DialTimeout); err != nil {
		return exitFailed, "cannot reach etcd at " + strings.Join(cfg.etcd.Endpoints, ",") + ": " + err.Error()
	}
	cfg.cleaner.Logger = log
	cfg.cleaner.Lister = store
	// Reached the way gravelerd reaches it (s3:// through the AWS SDK's
	// configuration chain); opening costs nothing until a namespace is used.
	blobs := committed.NewBucketStore(committed.BucketConfig{})
	defer blobs.Close()
	cfg.cleaner.Blobs = blobs
	if cfg.cleaner.GC.Enabled && cfg.cleaner.GC.Grace < committed.DefaultGCGrace {
		log.Warn("cleaner: --gc-grace is below gravelerd's default committed-object grace; it must be at least the value gravelerd runs with",
			zap.Duration("gc_grace", cfg.cleaner.GC.Grace), zap.Duration("gravelerd_default", committed.DefaultGCGrace))
	}

	if cfg.once {
		sum, err := cleaner.New(store, cfg.cleaner).RunOnce(ctx)
		out, _ := json.Marshal(sum)
		fmt.Fprintln(stdout, string(out))
		return onceOutcome(sum, err, cfg.cleaner)
	}

	host, _ := os.Hostname()
	id := fmt.Sprintf("%s/%d", host, os.Getpid())
	cfg.cleaner.Elector = cleaner.NewEtcdElector(store.Client(), cleaner.ElectionKey(store.Prefix()), id, cfg.electionTTL)
	if cfg.metricsAddr != "" {
		ln, err := net.Listen("tcp", cfg.metricsAddr)
		if err != nil {
			return exitFailed, "metrics listener: " + err.Error()
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.Handler())
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		log.Info("cleaner: serving metrics", zap.String("addr", ln.Addr().String()))
	}
	log.Info("cleaner: daemon started", zap.String("id", id), zap.Duration("interval", cfg.cleaner.Interval))
	if err := cleaner.New(store, cfg.cleaner).Run(ctx); err != nil {
		return exitFailed, "stopped: " + err.Error()
	}
	return exitOK, ""
}

// reach checks that etcd answers a read of key within d, so that a wrong
// endpoint, a TLS mismatch or a cluster without a leader ends the process
// at once with the cause: the client waits for a connection as long as a
// request's context lasts, so a pass would otherwise wait for its
// --timeout, or for ever, and report nothing.
//
// It reads through the client's connection rather than its KV API, which
// waits for a connection until the deadline and then reports only the
// context's error. Here each read fails as soon as no connection can be
// made, with gRPC's error naming why (connection refused, TLS handshake),
// and is sent again until d runs out: a member that is starting gets its
// chance, and the last cause is what the operator reads.
func reach(ctx context.Context, cli *clientv3.Client, key string, d time.Duration) error {
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	kv := etcdserverpb.NewKVClient(cli.ActiveConnection())
	var last error
	for {
		_, err := kv.Range(rctx, &etcdserverpb.RangeRequest{Key: []byte(key), CountOnly: true}, grpc.WaitForReady(false))
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case rctx.Err() == nil && status.Code(err) != codes.Unavailable:
			return err // etcd answered: authentication, permission, ...
		}
		if last == nil || rctx.Err() == nil {
			last = err // not the deadline's own error, if a cause came before it
		}
		select {
		case <-rctx.Done():
			msg := status.Convert(last).Message()
			if strings.Contains(msg, "handshake") {
				msg += " (a TLS mismatch? an https:// endpoint or --etcd-ca/--etcd-cert/--etcd-key need TLS on the server, an endpoint without a scheme and no TLS flags talks plaintext)"
			}
			return fmt.Errorf("no answer within --etcd-dial-timeout=%v: %s", d, msg)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// onceOutcome turns a pass's result into the exit code and its reason.
func onceOutcome(sum cleaner.Summary, err error, cfg cleaner.Config) (int, string) {
	switch {
	case err != nil:
		return exitFailed, "pass failed: " + err.Error()
	case sum.Errors > 0:
		first := ""
		if len(sum.Failures) > 0 {
			first = "; the first: " + sum.Failures[0]
		}
		return exitFailed, fmt.Sprintf("%d steps failed and are retried by the next run%s", sum.Errors, first)
	case sum.SkippedRecords > 0:
		return exitFailed, fmt.Sprintf("%d records could not be decoded and were skipped (see the \"undecodable record skipped\" lines): repair or remove them", sum.SkippedRecords)
	case sum.Incomplete && sum.StoppedBy == cleaner.StoppedByMaxKeys:
		return exitIncomplete, fmt.Sprintf("pass incomplete: stopped at --max-keys=%d; the next run continues", cfg.MaxKeys)
	case sum.Incomplete && sum.StoppedBy == cleaner.StoppedByTimeout:
		return exitIncomplete, fmt.Sprintf("pass incomplete: stopped at --timeout=%v; the next run continues", cfg.Timeout)
	case sum.Incomplete:
		return exitIncomplete, "pass incomplete (" + sum.StoppedBy + "); the next run continues"
	}
	return exitOK, ""
}
