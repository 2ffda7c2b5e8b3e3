// Command gravelerd is the Graveler gRPC server. With no flags it starts an
// embedded etcd and a file:// blob store under ./graveler-data and listens
// on 127.0.0.1:7070; --embedded-etcd-listen pins the embedded etcd's
// client address (by default a free loopback port, logged at start), so
// that the cleaner and gravelerfsck can reach it. Every flag has a GRAVELER_* environment variable
// (flag --etcd-endpoints: GRAVELER_ETCD_ENDPOINTS); a flag given on the
// command line wins over its variable. SIGINT/SIGTERM shut down gracefully.
// --version prints the build's version and exits.
//
// It exits:
//
//	0  shut down by SIGINT/SIGTERM once in-flight calls drained (and
//	   after --help or --version);
//	1  it could not start (the embedded etcd failed, the data directory
//	   in use by another process, a listen address or TLS file refused)
//	   or serving failed; the error is the last line on stderr;
//	2  bad flags or an invalid configuration (every problem is listed),
//	   among them an --etcd-endpoints value that names no endpoint or a
//	   malformed one (no port, a scheme other than http, https, unix or
//	   unixs), a --listen or --metrics-listen that is not host:port
//	   with a port from 0 (any free port) to 65535, and the two naming
//	   the same port on one host (or on a wildcard host: empty, 0.0.0.0
//	   or ::), and an --embedded-etcd-listen whose host is not
//	   127.0.0.1, ::1 or localhost, or that is given with
//	   --etcd-endpoints.
//
// An external etcd that is well named but does not answer does not end
// it: gravelerd listens, its health service reports NOT_SERVING and calls
// that need etcd fail until etcd answers, then it serves.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"graveler/buildinfo"
	"graveler/cmd/internal/flagenv"
	"graveler/etcdkv"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/staging"
	"graveler/server/daemon"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// errVersion: --version was given; run prints the version and exits 0.
var errVersion = errors.New("version requested")

// parse reads flags, with GRAVELER_* environment variables as defaults.
func parse(args []string, getenv func(string) string, stderr io.Writer) (daemon.Config, error) {
	var c daemon.Config
	fs := flag.NewFlagSet("gravelerd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var endpoints string
	var dialTimeout, shutdown time.Duration
	var cacheSize int64
	var version, pacing bool
	fs.BoolVar(&version, "version", false, "print the version and exit")
	fs.StringVar(&c.ListenAddr, "listen", daemon.DefaultListenAddr, "gRPC listen address")
	fs.StringVar(&c.DataDir, "data-dir", daemon.DefaultDataDir, "data directory (embedded etcd, file blob store, range cache)")
	fs.StringVar(&endpoints, "etcd-endpoints", "", "comma-separated etcd endpoints (empty: embedded etcd under the data dir; a list of blanks is refused)")
	fs.StringVar(&c.EmbeddedEtcdListen, "embedded-etcd-listen", "", "client address of the embedded etcd, `host:port` on 127.0.0.1, ::1 or localhost only (it has no auth), for the cleaner's and gravelerfsck's --etcd-endpoints=http://host:port (empty: a free port on 127.0.0.1, in the \"embedded etcd started\" log line; refused with --etcd-endpoints)")
	fs.StringVar(&c.Etcd.CAFile, "etcd-ca", "", "etcd CA certificate file")
	fs.StringVar(&c.Etcd.CertFile, "etcd-cert", "", "etcd client certificate file")
	fs.StringVar(&c.Etcd.KeyFile, "etcd-key", "", "etcd client key file")
	fs.StringVar(&c.Etcd.Username, "etcd-username", "", "etcd username")
	fs.StringVar(&c.Etcd.Password, "etcd-password", "", "etcd password (prefer the environment variable)")
	fs.StringVar(&c.Etcd.Prefix, "etcd-prefix", daemon.DefaultEtcdPrefix, "root prefix of every key in etcd")
	fs.DurationVar(&dialTimeout, "etcd-dial-timeout", 5*time.Second, "etcd dial timeout (above 0)")
	fs.DurationVar(&c.Etcd.RequestTimeout, "etcd-request-timeout", etcdkv.DefaultRequestTimeout, "bound on each attempt of an etcd request: a read that runs out is sent again, a write settled, so a stopped member costs a call at most this (negative: only the call's deadline)")
	fs.DurationVar(&c.Etcd.KeepAliveTime, "etcd-keepalive-time", etcdkv.DefaultDialKeepAliveTime, "silence on a connection with requests in flight before the client pings the etcd member (at least 10s; negative: no pings)")
	fs.DurationVar(&c.Etcd.KeepAliveTimeout, "etcd-keepalive-timeout", etcdkv.DefaultDialKeepAliveTimeout, "unanswered ping after which the connection to an etcd member is closed")
	fs.StringVar(&c.StorageNamespaceRoot, "storage-namespace-root", "", "default blob store root for new repositories (default file://<data-dir>/blobs)")
	fs.StringVar(&c.RangeCacheDir, "range-cache-dir", "", "range cache directory, for S3 namespaces (file:// ones are read in place; default <data-dir>/cache)")
	fs.Int64Var(&cacheSize, "range-cache-size", daemon.DefaultRangeCacheSize, "range cache size in bytes (above 0: the cache cannot be turned off)")
	fs.IntVar(&c.NodeCacheBytes, "node-cache-bytes", committed.DefaultNodeCacheBytes, "in-memory cache of decoded inner nodes of committed trees, by their stored bytes (decoded, a node takes about 1.5 times that in memory); a commit reads the nodes above its changes that it does not hold")
	fs.IntVar(&c.RangeMemoryBytes, "range-memory-cache-bytes", committed.DefaultRangeCacheBytes, "in-memory cache of decoded ranges of committed trees, by their stored bytes (--range-cache-size is the on-disk cache, for S3)")
	fs.StringVar(&c.TLSCertFile, "tls-cert", "", "TLS certificate file for the gRPC listener")
	fs.StringVar(&c.TLSKeyFile, "tls-key", "", "TLS key file for the gRPC listener")
	fs.StringVar(&c.TLSClientCAFile, "tls-client-ca", "", "CA file to require and verify client certificates (mTLS)")
	fs.StringVar(&c.TokensFile, "tokens-file", "", "bearer tokens file (one token per line, optional label after a space)")
	fs.StringVar(&c.MetricsAddr, "metrics-listen", "", "address serving /metrics, and /debug/pprof with --enable-pprof (empty: off)")
	fs.BoolVar(&c.EnablePprof, "enable-pprof", false, "serve Go's profiler under /debug/pprof/ on the metrics listener (keep that listener inside the cluster)")
	fs.Var(&c.LogLevel, "log-level", "least `level` logged (JSON on stderr): debug, info (the default), warn or error")
	fs.Var(&c.AccessLog, "access-log", "which calls are logged (`mode`): sampled (the default: failed and slow calls, and one in 100 others), all, or off (only calls that failed on the server's side); health checks never")
	fs.DurationVar(&c.SlowCallThreshold, "slow-call-threshold", time.Second, "unary calls that take longer are logged at warn unless --access-log=off (negative: none)")
	fs.DurationVar(&c.GCGrace, "gc-grace", committed.DefaultGCGrace, "the cleaner's --gc-grace (it must be at least this): commits refresh reused committed objects older than half of it")
	fs.IntVar(&c.MaxRecvMsgSize, "max-recv-msg-size", 4<<20, fmt.Sprintf("largest request message in bytes; a larger one is answered RESOURCE_EXHAUSTED (at least %d, so that the largest commit fits)", daemon.MinMaxRecvMsgSize))
	fs.DurationVar(&c.DefaultCallTimeout, "default-call-timeout", 0, "bound on unary calls that arrive without a deadline (0: none)")
	fs.DurationVar(&shutdown, "shutdown-timeout", 30*time.Second, "bound on draining in-flight calls at shutdown (above 0)")
	fs.DurationVar(&c.BranchCacheTTL, "branch-cache-ttl", graveler.DefaultBranchCacheTTL, "how stale a writer's first branch read may be (negative: no cache)")
	fs.DurationVar(&c.ReadWindow, "read-window", 0, "amortized branch/repository reads: 0 shares in-flight reads with no added wait, >0 waits that long to batch, <0 off")
	fs.IntVar(&c.MaxSealedTokens, "max-sealed-tokens", graveler.DefaultMaxSealedTokens, "bound on a branch's sealed staging tokens before a commit absorbs them")
	fs.Float64Var(&c.CommitReadRate, "commit-read-rate", 0, "most entries/s a commit reads its staged entries at; with --commit-pacing=false a fixed rate (0: no bound)")
	fs.BoolVar(&pacing, "commit-pacing", true, "pace a commit's read of its staged entries by the latency of the staged writes this server sees, so that a long commit spares the writers (false: only --commit-read-rate)")
	fs.Float64Var(&c.CommitPacing.Floor, "commit-pace-floor", graveler.DefaultCommitPaceFloor, "least entries/s the commit pacing slows a commit to")
	fs.Float64Var(&c.CommitPacing.LatencyFactor, "commit-pace-latency-factor", graveler.DefaultCommitPaceLatencyFactor, "how many times their latency without a commit the staged writes' p90 may reach before the commit pacing slows the commit")
	fs.IntVar(&c.FencedBatchSize, "fenced-batch-size", staging.DefaultFencedBatchSize, fmt.Sprintf("most staged writes of one staging token sharing one etcd transaction, 1 to %d, which fits etcd's default --max-txn-ops (128); a larger value is refused at start (1: none shared; 0: the default; lower it for an etcd with a lower --max-txn-ops)", staging.MaxFencedBatchSize))
	fs.BoolVar(&c.SeparateFenceRead, "separate-fence-read", false, "read the writer's and reader's fence as a separate branch read instead of in the write's or read's etcd transaction (slower; for comparison)")
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
	var err error
	if c.Etcd.Endpoints, err = flagenv.EtcdEndpoints(endpoints); err != nil {
		return c, err
	}
	if c.Etcd.Prefix != "" { // empty: the default
		if err := flagenv.EtcdPrefix(c.Etcd.Prefix); err != nil {
			return c, err
		}
	}
	if err := flagenv.EtcdTLS(c.Etcd.Endpoints, c.Etcd.CAFile, c.Etcd.CertFile, c.Etcd.KeyFile); err != nil {
		return c, err
	}
	// The configuration reads 0 as its default for these, which an
	// operator writing 0 would not expect (no bound, no cache, "stop at
	// once"); none of those exists, so 0 is refused rather than replaced.
	var errs []error
	for _, z := range []struct {
		zero bool
		msg  string
	}{
		{dialTimeout == 0, "--etcd-dial-timeout=0s must be above 0 (leave it out for 5s)"},
		{cacheSize == 0, fmt.Sprintf("--range-cache-size=0 must be above 0: the range cache cannot be turned off (leave it out for %d, 1 GiB)", daemon.DefaultRangeCacheSize)},
		{shutdown == 0, "--shutdown-timeout=0s must be above 0 (leave it out for 30s)"},
		{c.MaxRecvMsgSize == 0, fmt.Sprintf("--max-recv-msg-size=0 must be at least %d (leave it out for 4 MiB)", daemon.MinMaxRecvMsgSize)},
	} {
		if z.zero {
			errs = append(errs, fmt.Errorf("%w: %s", daemon.ErrInvalidConfig, z.msg))
		}
	}
	c.Etcd.DialTimeout = dialTimeout
	c.RangeCacheSize = cacheSize
	c.ShutdownTimeout = shutdown
	c.CommitPacing.Off = !pacing
	return c, errors.Join(append(errs, c.Validate())...)
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parse(args, os.Getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, errVersion) {
		fmt.Fprintln(stdout, buildinfo.String("gravelerd"))
		return 0
	}
	if err != nil {
		// Errors of the configuration name the program already.
		msg := err.Error()
		if !strings.HasPrefix(msg, "gravelerd: ") {
			msg = "gravelerd: " + msg
		}
		fmt.Fprintln(stderr, msg)
		return 2
	}
	cfg.Ready = func(addr string) { fmt.Fprintf(stdout, "gravelerd listening on %s\n", addr) }
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := daemon.Run(ctx, cfg); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
