// Command cleaner reclaims what repository deletes and commits leave in
// etcd (package graveler/cleaner). With --once it makes one bounded pass,
// prints a JSON summary on stdout and exits 0, or 1 when a step failed
// (the next run retries it) or a record could not be decoded and was
// skipped (an operator must repair or remove it); bad flags exit 2.
// Without --once it runs a pass every --interval while it leads an
// election among replicas, and serves Prometheus metrics on
// --metrics-addr. Every flag has a GRAVELER_* environment variable
// (--etcd-endpoints: GRAVELER_ETCD_ENDPOINTS); a flag on the command line
// wins. SIGINT/SIGTERM stop it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"graveler/cleaner"
	"graveler/etcdkv"
	"graveler/graveler/ref"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func envName(flagName string) string {
	return "GRAVELER_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

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
	var endpoints string
	fs.BoolVar(&c.once, "once", false, "make one pass, print a summary and exit (for a CronJob)")
	fs.DurationVar(&c.cleaner.Interval, "interval", cleaner.DefaultInterval, "pause between passes in daemon mode")
	fs.StringVar(&endpoints, "etcd-endpoints", "", "comma-separated etcd endpoints (required)")
	fs.StringVar(&c.etcd.Prefix, "etcd-prefix", etcdkv.DefaultPrefix, "root prefix of every key in etcd (gravelerd's)")
	fs.StringVar(&c.etcd.TLS.CAFile, "etcd-ca", "", "etcd CA certificate file")
	fs.StringVar(&c.etcd.TLS.CertFile, "etcd-cert", "", "etcd client certificate file")
	fs.StringVar(&c.etcd.TLS.KeyFile, "etcd-key", "", "etcd client key file")
	fs.StringVar(&c.etcd.Username, "etcd-username", "", "etcd username")
	fs.StringVar(&c.etcd.Password, "etcd-password", "", "etcd password (prefer the environment variable)")
	fs.DurationVar(&c.etcd.DialTimeout, "etcd-dial-timeout", 5*time.Second, "etcd dial timeout")
	fs.DurationVar(&c.etcd.RequestTimeout, "etcd-request-timeout", etcdkv.DefaultRequestTimeout, "bound on each attempt of an etcd request: a read that runs out is sent again, a write settled (negative: only --timeout)")
	fs.DurationVar(&c.etcd.DialKeepAliveTime, "etcd-keepalive-time", etcdkv.DefaultDialKeepAliveTime, "silence on a connection with requests in flight before the client pings the etcd member (at least 10s; negative: no pings)")
	fs.DurationVar(&c.etcd.DialKeepAliveTimeout, "etcd-keepalive-timeout", etcdkv.DefaultDialKeepAliveTimeout, "unanswered ping after which the connection to an etcd member is closed")
	fs.Int64Var(&c.cleaner.MaxKeys, "max-keys", 0, "keys one pass may reclaim, checked before each partition (0: no bound)")
	fs.DurationVar(&c.cleaner.Timeout, "timeout", 0, "bound on one pass; a pass cut short is finished by the next (0: none)")
	fs.BoolVar(&c.cleaner.Sweep, "sweep", false, "also reclaim partitions that nothing references (a full pass over partition names)")
	fs.DurationVar(&c.cleaner.SweepGrace, "sweep-grace", cleaner.DefaultSweepGrace, "the sweep leaves partitions younger than this alone")
	fs.DurationVar(&c.cleaner.RepositoryCreationTimeout, "repository-creation-timeout", ref.DefaultRepositoryCreationTimeout, "age after which an initial repository is a crashed create (gravelerd's value)")
	fs.BoolVar(&c.cleaner.DryRun, "dry-run", false, "change nothing; report what would be reclaimed")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "address serving Prometheus /metrics in daemon mode (empty: off)")
	fs.IntVar(&c.electionTTL, "election-ttl", 15, "seconds a dead leader keeps leadership before another replica takes over")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	// Environment variables become the defaults, so explicit flags win.
	var envErrs []error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(envName(f.Name)); v != "" {
			if err := f.Value.Set(v); err != nil {
				envErrs = append(envErrs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
			}
		}
	})
	if err := errors.Join(envErrs...); err != nil {
		return c, err
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	for _, e := range strings.Split(endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			c.etcd.Endpoints = append(c.etcd.Endpoints, e)
		}
	}
	switch {
	case len(c.etcd.Endpoints) == 0:
		return c, errors.New("--etcd-endpoints is required")
	case !strings.HasPrefix(c.etcd.Prefix, "/"):
		return c, fmt.Errorf("--etcd-prefix %q must start with '/'", c.etcd.Prefix)
	case (c.etcd.TLS.CertFile == "") != (c.etcd.TLS.KeyFile == ""):
		return c, errors.New("--etcd-cert and --etcd-key must be given together")
	case (c.etcd.Username == "") != (c.etcd.Password == ""):
		return c, errors.New("--etcd-username and --etcd-password must be given together")
	case c.cleaner.MaxKeys < 0, c.cleaner.Timeout < 0, c.cleaner.Interval <= 0, c.electionTTL <= 0:
		return c, errors.New("--max-keys, --timeout, --interval and --election-ttl must not be negative (--interval, --election-ttl above 0)")
	}
	if _, err := zapcore.ParseLevel(c.logLevel); err != nil {
		return c, fmt.Errorf("--log-level: %w", err)
	}
	return c, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "cleaner:", err)
		return 2
	}
	level, _ := zapcore.ParseLevel(cfg.logLevel)
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(stderr), level))
	defer func() { _ = log.Sync() }()

	cfg.etcd.Logger = log
	store, err := etcdkv.New(ctx, cfg.etcd)
	if err != nil {
		log.Error("cleaner: connect to etcd", zap.Error(err))
		return 1
	}
	defer store.Close()
	cfg.cleaner.Logger = log
	cfg.cleaner.Lister = store

	if cfg.once {
		sum, err := cleaner.New(store, cfg.cleaner).RunOnce(ctx)
		out, _ := json.Marshal(sum)
		fmt.Fprintln(stdout, string(out))
		if err != nil || sum.Errors > 0 || sum.SkippedRecords > 0 {
			return 1
		}
		return 0
	}

	host, _ := os.Hostname()
	id := fmt.Sprintf("%s/%d", host, os.Getpid())
	cfg.cleaner.Elector = cleaner.NewEtcdElector(store.Client(), cleaner.ElectionKey(store.Prefix()), id, cfg.electionTTL)
	if cfg.metricsAddr != "" {
		ln, err := net.Listen("tcp", cfg.metricsAddr)
		if err != nil {
			log.Error("cleaner: metrics listener", zap.Error(err))
			return 1
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
		log.Error("cleaner: stopped", zap.Error(err))
		return 1
	}
	return 0
}
