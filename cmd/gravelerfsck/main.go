// Command gravelerfsck checks the consistency of a Graveler installation
// (package graveler/fsck): refs and staged entries in etcd, committed
// objects in the blob store, and etcd's own health. It reads etcd at one
// revision and changes nothing, unless --repair, which only queues
// orphaned staging partitions for the cleaner.
//
// It prints a report on stdout, for a person (the default) or as one JSON
// object (-o json), and exits:
//
//	0  healthy: every check was made and found nothing;
//	1  problems found (the report lists them, with what to do);
//	2  bad flags (each named with the value it got, on stderr);
//	3  the check could not complete (etcd unreachable within
//	   --etcd-dial-timeout, a read failed, the revision was compacted, a
//	   blob could not be read); the last line on stderr says why, and the
//	   report shows what was checked.
//
// It is a command of its own, not a gravelerctl subcommand nor a cleaner
// mode: gravelerctl talks to gravelerd over gRPC and holds no etcd or blob
// store credentials, while a consistency check must read etcd and every
// storage namespace directly, below the service; and the cleaner is a
// writer with leader election, while this is a read-only tool that can run
// with read-only credentials (--repair aside) beside a live installation.
//
// Every flag but --version has a GRAVELER_* environment variable
// (--etcd-endpoints: GRAVELER_ETCD_ENDPOINTS); a flag on the command line
// wins. Blob stores are reached as gravelerd reaches them: s3:// through
// the AWS SDK's default configuration (environment, shared files), file://
// through the local file system (mount gravelerd's volume at the same
// path). SIGINT/SIGTERM stop it (exit 3).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"graveler/buildinfo"
	"graveler/cmd/internal/flagenv"
	"graveler/etcdkv"
	"graveler/fsck"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/ref"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitHealthy    = 0
	exitProblems   = 1
	exitUsage      = 2
	exitIncomplete = 3
)

// errVersion: --version was given; run prints the version and exits 0.
var errVersion = errors.New("version requested")

// config is what the flags say.
type config struct {
	etcd     etcdkv.Config
	fsck     fsck.Config
	output   string
	timeout  time.Duration
	logLevel string
}

func parse(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("gravelerfsck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var version bool
	fs.BoolVar(&version, "version", false, "print the version and exit")
	checkEtcd := flagenv.EtcdFlags(fs, &c.etcd)
	fs.DurationVar(&c.fsck.ConnectTimeout, "etcd-dial-timeout", fsck.DefaultConnectTimeout, "bound on etcd's first answer: none within it (wrong endpoint, TLS mismatch, etcd down) exits 3 naming the cause")
	fs.DurationVar(&c.fsck.RequestTimeout, "etcd-request-timeout", fsck.DefaultRequestTimeout, "bound on each etcd request, or each chunk of a scan")
	fs.Int64Var(&c.fsck.EtcdQuotaBytes, "etcd-quota-bytes", fsck.DefaultEtcdQuotaBytes, "etcd's --quota-backend-bytes: a member's database past 80% of it is a finding")
	fs.BoolVar(&c.fsck.SkipEtcdHash, "skip-etcd-hash", false, "do not compare the members' hashes of the key space (each member hashes all of it)")
	fs.BoolVar(&c.fsck.Full, "full", false, "read and verify every metarange and range (hash, decoding, order, bounds); without it ranges are only checked to exist")
	fs.BoolVar(&c.fsck.Repair, "repair", false, "queue orphaned staging partitions for the cleaner, after checking them again (the only change fsck ever makes)")
	fs.IntVar(&c.fsck.Parallel, "parallel", fsck.DefaultParallel, "blob store requests in flight, for metaranges and as many for ranges")
	fs.IntVar(&c.fsck.MaxSealedTokens, "max-sealed-tokens", graveler.DefaultMaxSealedTokens, "a branch with more sealed staging tokens is a finding (gravelerd's value)")
	fs.Int64Var(&c.fsck.MaxTombstones, "max-tombstones", fsck.DefaultMaxTombstones, "a branch with more staged tombstones is a finding")
	fs.DurationVar(&c.fsck.RepositoryCreationTimeout, "repository-creation-timeout", ref.DefaultRepositoryCreationTimeout, "age after which an initial repository is a crashed create (the default is gravelerd's fixed creation timeout)")
	fs.DurationVar(&c.fsck.DeletingTimeout, "deleting-timeout", fsck.DefaultDeletingTimeout, "age after which a deleting repository is a stuck delete")
	fs.DurationVar(&c.fsck.OrphanGrace, "orphan-grace", fsck.DefaultOrphanGrace, "unreferenced staging partitions younger than this are not reported (the cleaner's --sweep-grace; negative: none)")
	fs.DurationVar(&c.timeout, "timeout", 0, "bound on the whole check; one cut short exits 3 (0: none)")
	fs.StringVar(&c.output, "o", "text", "report format: text or json")
	fs.StringVar(&c.output, "output", "text", "report format: text or json (same as -o)")
	fs.StringVar(&c.logLevel, "log-level", "warn", "least level logged (JSON on stderr): debug, info, warn or error")
	// Variables become the defaults, so explicit flags win; GRAVELER_VERSION
	// (or GRAVELER_O) set for another purpose must not change the output.
	if err := flagenv.Parse(fs, args, getenv, "version", "o"); err != nil {
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
		{c.output != "text" && c.output != "json", fmt.Sprintf("-o %q: want text or json", c.output)},
		{c.fsck.ConnectTimeout <= 0, fmt.Sprintf("--etcd-dial-timeout=%v must be above 0", c.fsck.ConnectTimeout)},
		{c.fsck.RequestTimeout <= 0, fmt.Sprintf("--etcd-request-timeout=%v must be above 0", c.fsck.RequestTimeout)},
		{c.fsck.Parallel <= 0, fmt.Sprintf("--parallel=%d must be above 0", c.fsck.Parallel)},
		{c.fsck.MaxSealedTokens <= 0, fmt.Sprintf("--max-sealed-tokens=%d must be above 0", c.fsck.MaxSealedTokens)},
		{c.fsck.MaxTombstones <= 0, fmt.Sprintf("--max-tombstones=%d must be above 0", c.fsck.MaxTombstones)},
		{c.fsck.EtcdQuotaBytes <= 0, fmt.Sprintf("--etcd-quota-bytes=%d must be above 0", c.fsck.EtcdQuotaBytes)},
		{c.fsck.RepositoryCreationTimeout <= 0, fmt.Sprintf("--repository-creation-timeout=%v must be above 0", c.fsck.RepositoryCreationTimeout)},
		{c.fsck.DeletingTimeout <= 0, fmt.Sprintf("--deleting-timeout=%v must be above 0", c.fsck.DeletingTimeout)},
		{c.timeout < 0, fmt.Sprintf("--timeout=%v must not be negative (0: none)", c.timeout)},
	} {
		if p.bad {
			errs = append(errs, errors.New(p.msg))
		}
	}
	if _, err := zapcore.ParseLevel(c.logLevel); err != nil {
		errs = append(errs, fmt.Errorf("--log-level: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	if c.fsck.OrphanGrace == 0 {
		c.fsck.OrphanGrace = -1 // 0 on the command line means none, as negative does
	}
	// The client's own dial bound: the check's connect deadline.
	c.etcd.DialTimeout = c.fsck.ConnectTimeout
	c.etcd.RequestTimeout = c.fsck.RequestTimeout
	return c, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitHealthy
	}
	if errors.Is(err, errVersion) {
		fmt.Fprintln(stdout, buildinfo.String("gravelerfsck"))
		return exitHealthy
	}
	if err != nil {
		fmt.Fprintln(stderr, "gravelerfsck:", strings.ReplaceAll(err.Error(), "\n", "\ngravelerfsck: "))
		return exitUsage
	}
	level, _ := zapcore.ParseLevel(cfg.logLevel)
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(stderr), level))
	defer func() { _ = log.Sync() }()
	if cfg.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.timeout)
		defer cancel()
	}

	cfg.etcd.Logger = log
	store, err := etcdkv.New(ctx, cfg.etcd)
	if err != nil {
		// A configuration the client refuses (unreadable TLS files, ...).
		fmt.Fprintf(stderr, "gravelerfsck: etcd client for %s: %v\n", strings.Join(cfg.etcd.Endpoints, ","), err)
		return exitIncomplete
	}
	defer store.Close()
	blobs := committed.NewBucketStore(committed.BucketConfig{})
	defer blobs.Close()

	cfg.fsck.Logger = log
	rep, runErr := fsck.New(store, blobs, cfg.fsck).Run(ctx)
	if cfg.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "gravelerfsck: write the report:", err)
		}
	} else if err := rep.WriteText(stdout); err != nil {
		fmt.Fprintln(stderr, "gravelerfsck: write the report:", err)
	}
	code, why := outcome(rep, runErr, cfg.etcd.Endpoints)
	if code != exitHealthy {
		fmt.Fprintf(stderr, "gravelerfsck: exit %d: %s\n", code, why)
	}
	return code
}

// outcome turns a run into the exit code and its reason.
func outcome(rep *fsck.Report, err error, endpoints []string) (int, string) {
	switch {
	case errors.Is(err, fsck.ErrUnreachable):
		return exitIncomplete, fmt.Sprintf("cannot reach etcd at %s: %v", strings.Join(endpoints, ","), err)
	case err != nil:
		return exitIncomplete, err.Error()
	case !rep.Healthy:
		return exitProblems, fmt.Sprintf("%d problems found; the report says what to do for each", len(rep.Findings))
	}
	return exitHealthy, ""
}
