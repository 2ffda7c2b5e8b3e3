package daemon

import (
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"graveler/graveler"
	"graveler/graveler/staging"
	"graveler/internal/hostport"
	"graveler/server"
)

// ErrInvalidConfig is wrapped by every Validate error.
var ErrInvalidConfig = errors.New("gravelerd: invalid configuration")

// EtcdConfig names the etcd cluster. No endpoints: start an embedded
// single-node etcd under the data directory.
type EtcdConfig struct {
	Endpoints   []string
	CAFile      string
	CertFile    string
	KeyFile     string
	Username    string
	Password    string
	Prefix      string
	DialTimeout time.Duration
	// RequestTimeout bounds each attempt of an etcd request, so that one
	// stopped member costs a request at most this long before a read is
	// sent again and a write settled (0: etcdkv.DefaultRequestTimeout;
	// negative: only the call's deadline).
	RequestTimeout time.Duration
	// KeepAliveTime and KeepAliveTimeout shape the pings on connections
	// with etcd requests in flight (0: etcdkv's defaults; KeepAliveTime
	// negative: no pings). gRPC raises a KeepAliveTime below 10s to 10s.
	KeepAliveTime    time.Duration
	KeepAliveTimeout time.Duration
}

// Config is gravelerd's configuration. Validate fills in the defaults noted.
type Config struct {
	// ListenAddr is the gRPC listen address (default 127.0.0.1:7070).
	ListenAddr string
	// DataDir holds the embedded etcd, the file blob store and the range
	// cache unless configured elsewhere (default ./graveler-data).
	DataDir string
	Etcd    EtcdConfig
	// StorageNamespaceRoot prefixes the storage namespace of repositories
	// created without one (default file://<DataDir>/blobs).
	StorageNamespaceRoot string
	// RangeCacheDir and RangeCacheSize bound the local cache of range files
	// (defaults <DataDir>/cache and 1 GiB).
	RangeCacheDir  string
	RangeCacheSize int64
	// NodeCacheBytes and RangeMemoryBytes bound the in-memory caches of
	// decoded inner nodes and ranges, by the bytes they take in the blob
	// store (0: committed.DefaultNodeCacheBytes and DefaultRangeCacheBytes,
	// 64 MiB each). Decoded, a node takes about one and a half times its
	// stored bytes (192 MiB more of node cache took about 300 MB more).
	// A commit reads the nodes above its changes that are not held: a
	// tree of 10M entries has about 110 MB of them.
	NodeCacheBytes   int
	RangeMemoryBytes int
	// TLSCertFile and TLSKeyFile serve TLS; TLSClientCAFile additionally
	// requires client certificates signed by that CA (mTLS).
	TLSCertFile     string
	TLSKeyFile      string
	TLSClientCAFile string
	// TokensFile enables bearer-token auth (see server.LoadTokens).
	TokensFile string
	// MetricsAddr serves /metrics, and /debug/pprof with EnablePprof
	// (empty: off).
	MetricsAddr string
	// EnablePprof serves Go's profiler under /debug/pprof/ on MetricsAddr.
	// Off by default: a profile costs CPU and shows internals, and the
	// metrics port is often reachable from more places than it should be.
	EnablePprof bool
	// MaxRecvMsgSize bounds a request message (default 4 MiB; at least
	// MinMaxRecvMsgSize).
	MaxRecvMsgSize int
	// DefaultCallTimeout bounds unary calls that arrive without a deadline
	// (0: no bound; a client's own deadline always applies).
	DefaultCallTimeout time.Duration
	// ShutdownTimeout bounds the drain of in-flight calls (default 30s).
	ShutdownTimeout time.Duration
	// HealthInterval is the period of the etcd probe (default 5s).
	HealthInterval time.Duration
	// BranchCacheTTL bounds how stale a writer's first read of a branch may
	// be (0: graveler.DefaultBranchCacheTTL; negative: no cache).
	BranchCacheTTL time.Duration
	// ReadWindow shapes the amortized branch and repository reads (0: group
	// mode, no added wait; positive: first reader waits this long for
	// others; negative: no amortization). See ref.Config.BranchReadWindow.
	ReadWindow time.Duration
	// MaxSealedTokens bounds a branch's sealed tokens (0: default).
	MaxSealedTokens int
	// CommitReadRate paces a commit's read of its staged entries, in
	// entries a second (0: unpaced). See graveler.Config.CommitReadRate.
	CommitReadRate float64
	// CommitPacing tunes the adaptive pacing of that read by the writers'
	// latency, on by default (Off: CommitReadRate alone). See
	// graveler.CommitPacing.
	CommitPacing graveler.CommitPacing
	// SeparateFenceRead turns off folding the writer's fence into the
	// write's etcd transaction. See graveler.Config.SeparateFenceRead.
	SeparateFenceRead bool
	// GCGrace is the grace period the cleaner's collector of unreferenced
	// committed objects uses (its --gc-grace must be at least this): a
	// commit refreshes the objects it reuses that are older than half of
	// it (0: committed.DefaultGCGrace).
	GCGrace time.Duration
	// FencedBatchSize bounds the staged writes of one staging token that
	// share an etcd transaction: 1 to staging.MaxFencedBatchSize, larger
	// values are refused (0: staging.DefaultFencedBatchSize).
	FencedBatchSize int
	// EmbeddedEtcdListen is the embedded etcd's client address, host:port
	// on loopback (127.0.0.1, ::1 or localhost: that etcd has no
	// authentication and no TLS), so that the cleaner and gravelerfsck can
	// be pointed at http://<it> (default: 127.0.0.1 on a free port, named
	// by the "embedded etcd started" log line). Only without
	// Etcd.Endpoints.
	EmbeddedEtcdListen string
	// EmbeddedEtcdUnsafeNoFsync and EmbeddedEtcdFast are for tests.
	EmbeddedEtcdUnsafeNoFsync bool
	EmbeddedEtcdFast          bool
	// Logger (default: a production zap logger at LogLevel).
	Logger *zap.Logger
	// LogLevel is the least level the default logger writes: debug, info
	// (the zero value), warn or error. It does not apply to a given Logger.
	LogLevel zapcore.Level
	// AccessLog chooses the calls logged (default server.AccessLogSampled:
	// failed and slow calls, and one in 100 others); health checks never
	// are. See server.GRPCOptions.
	AccessLog server.AccessLog
	// SlowCallThreshold: unary calls that take longer are logged at warn
	// (default 1s; negative: none).
	SlowCallThreshold time.Duration
	// Ready, when set, is called with the listen address once serving.
	Ready func(addr string)
}

// Defaults.
const (
	DefaultListenAddr     = "127.0.0.1:7070"
	DefaultDataDir        = "graveler-data"
	DefaultRangeCacheSize = 1 << 30
	DefaultEtcdPrefix     = "/graveler"
	// MinMaxRecvMsgSize is the least MaxRecvMsgSize (1 MiB + 3 KiB): below
	// it a request within graveler's own limits would be refused for its
	// size. The largest is a commit (or a merge, revert or cherry-pick)
	// whose message, committer and metadata take graveler.MaxCommitUserBytes,
	// with its branch and ref names (under 1 KiB) and framing; a PutEntry
	// with the longest key, identity and data takes about half of it.
	MinMaxRecvMsgSize = graveler.MaxCommitUserBytes + 4<<10
)

// Validate fills in defaults and checks every setting, reporting all
// problems at once, each naming the one setting at fault (by its gravelerd
// flag where several are alike) and the value it got.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.ListenAddr == "" {
		c.ListenAddr = DefaultListenAddr
	}
	// Checked here rather than when bound, so that a port out of range is a
	// bad flag naming it, not a failure to start.
	if _, _, err := hostport.Split(c.ListenAddr, 0); err != nil {
		bad("--listen=%q: %v", c.ListenAddr, err)
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if abs, err := filepath.Abs(c.DataDir); err == nil {
		c.DataDir = abs
	} else {
		bad("data dir %q: %v", c.DataDir, err)
	}
	if c.Etcd.Prefix == "" {
		c.Etcd.Prefix = DefaultEtcdPrefix
	}
	if !strings.HasPrefix(c.Etcd.Prefix, "/") {
		bad("etcd prefix %q must start with '/'", c.Etcd.Prefix)
	}
	if c.Etcd.DialTimeout == 0 {
		c.Etcd.DialTimeout = 5 * time.Second
	}
	if c.Etcd.DialTimeout < 0 {
		bad("etcd dial timeout %v is negative", c.Etcd.DialTimeout)
	}
	if c.Etcd.KeepAliveTimeout < 0 {
		bad("etcd keepalive timeout %v is negative", c.Etcd.KeepAliveTimeout)
	}
	for _, e := range c.Etcd.Endpoints {
		if e == "" {
			bad("empty etcd endpoint")
		}
	}
	switch {
	case c.Etcd.CertFile != "" && c.Etcd.KeyFile == "":
		bad("--etcd-cert=%q given without --etcd-key", c.Etcd.CertFile)
	case c.Etcd.KeyFile != "" && c.Etcd.CertFile == "":
		bad("--etcd-key=%q given without --etcd-cert", c.Etcd.KeyFile)
	}
	switch {
	case c.Etcd.Username != "" && c.Etcd.Password == "":
		bad("--etcd-username=%q given without --etcd-password", c.Etcd.Username)
	case c.Etcd.Password != "" && c.Etcd.Username == "":
		bad("--etcd-password given without --etcd-username")
	}
	if len(c.Etcd.Endpoints) == 0 {
		var given []string
		for _, f := range []struct{ flag, value string }{
			{"--etcd-ca", c.Etcd.CAFile}, {"--etcd-cert", c.Etcd.CertFile}, {"--etcd-key", c.Etcd.KeyFile},
			{"--etcd-username", c.Etcd.Username}, {"--etcd-password", c.Etcd.Password},
		} {
			if f.value != "" {
				given = append(given, f.flag)
			}
		}
		if len(given) > 0 {
			bad("%s given without --etcd-endpoints (the embedded etcd takes no TLS files or credentials)", strings.Join(given, ", "))
		}
	} else if c.EmbeddedEtcdListen != "" {
		bad("--embedded-etcd-listen=%q given with --etcd-endpoints: there is no embedded etcd to place", c.EmbeddedEtcdListen)
	}
	if c.EmbeddedEtcdListen != "" {
		if host, _, err := hostport.Split(c.EmbeddedEtcdListen, 0); err != nil {
			bad("--embedded-etcd-listen=%q: %v", c.EmbeddedEtcdListen, err)
		} else if !loopbackHost(host) {
			bad("--embedded-etcd-listen=%q: host %q is not 127.0.0.1, ::1 or localhost: the embedded etcd has no authentication and no TLS, so it listens on loopback only", c.EmbeddedEtcdListen, host)
		} else {
			for _, other := range []struct{ flag, addr string }{{"--listen", c.ListenAddr}, {"--metrics-listen", c.MetricsAddr}} {
				if port, _, same := sameListener(c.EmbeddedEtcdListen, other.addr); other.addr != "" && same {
					bad("--embedded-etcd-listen=%q and %s=%q would both bind port %d: give the embedded etcd a port of its own", c.EmbeddedEtcdListen, other.flag, other.addr, port)
				}
			}
		}
	}
	if c.StorageNamespaceRoot == "" {
		c.StorageNamespaceRoot = "file://" + filepath.ToSlash(filepath.Join(c.DataDir, "blobs"))
	}
	if err := graveler.ValidateStorageNamespace(graveler.StorageNamespace(c.StorageNamespaceRoot)); err != nil {
		bad("storage namespace root: %v", err)
	}
	if c.RangeCacheDir == "" {
		c.RangeCacheDir = filepath.Join(c.DataDir, "cache")
	}
	if c.RangeCacheSize == 0 {
		c.RangeCacheSize = DefaultRangeCacheSize
	}
	if c.RangeCacheSize < 0 {
		bad("range cache size %d is negative", c.RangeCacheSize)
	}
	if c.NodeCacheBytes < 0 {
		bad("node cache size %d is negative", c.NodeCacheBytes)
	}
	if c.RangeMemoryBytes < 0 {
		bad("range memory cache size %d is negative", c.RangeMemoryBytes)
	}
	switch {
	case c.TLSCertFile != "" && c.TLSKeyFile == "":
		bad("--tls-cert=%q given without --tls-key", c.TLSCertFile)
	case c.TLSKeyFile != "" && c.TLSCertFile == "":
		bad("--tls-key=%q given without --tls-cert", c.TLSKeyFile)
	}
	if c.TLSClientCAFile != "" && c.TLSCertFile == "" {
		bad("--tls-client-ca=%q (mTLS) needs --tls-cert and --tls-key", c.TLSClientCAFile)
	}
	for _, f := range []struct{ what, path string }{
		{"etcd CA", c.Etcd.CAFile}, {"etcd certificate", c.Etcd.CertFile}, {"etcd key", c.Etcd.KeyFile},
		{"TLS certificate", c.TLSCertFile}, {"TLS key", c.TLSKeyFile}, {"TLS client CA", c.TLSClientCAFile},
		{"tokens file", c.TokensFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			bad("%s: %v", f.what, err)
		}
	}
	if c.MetricsAddr != "" {
		if _, _, err := hostport.Split(c.MetricsAddr, 0); err != nil {
			bad("--metrics-listen=%q: %v", c.MetricsAddr, err)
		} else if port, wildcard, same := sameListener(c.ListenAddr, c.MetricsAddr); same {
			how := ""
			if wildcard {
				how = " (a host left empty, 0.0.0.0 or :: takes the port on every address)"
			}
			bad("--metrics-listen=%q and --listen=%q would both bind port %d%s: give the metrics listener a port of its own", c.MetricsAddr, c.ListenAddr, port, how)
		}
	}
	if c.MaxRecvMsgSize == 0 {
		c.MaxRecvMsgSize = 4 << 20
	}
	if c.MaxRecvMsgSize < MinMaxRecvMsgSize {
		bad("--max-recv-msg-size=%d is below %d, the largest request within graveler's limits (a commit with the most message, committer and metadata it takes, and its names)", c.MaxRecvMsgSize, MinMaxRecvMsgSize)
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.HealthInterval == 0 {
		c.HealthInterval = 5 * time.Second
	}
	if c.MaxSealedTokens < 0 {
		bad("max sealed tokens %d is negative", c.MaxSealedTokens)
	}
	if c.GCGrace < 0 {
		bad("gc grace %v is negative", c.GCGrace)
	}
	if c.FencedBatchSize < 0 || c.FencedBatchSize > staging.MaxFencedBatchSize {
		bad("fenced batch size %d must be between 1 and %d (0: default)", c.FencedBatchSize, staging.MaxFencedBatchSize)
	}
	if c.CommitReadRate < 0 || math.IsNaN(c.CommitReadRate) || math.IsInf(c.CommitReadRate, 0) {
		bad("commit read rate %v must be 0 (unpaced) or a positive number of entries a second", c.CommitReadRate)
	}
	if p := c.CommitPacing; p.Floor < 0 || math.IsNaN(p.Floor) || math.IsInf(p.Floor, 0) {
		bad("commit pace floor %v must be 0 (default) or a positive number of entries a second", p.Floor)
	}
	if p := c.CommitPacing; p.LatencyFactor != 0 && !(p.LatencyFactor >= 1.05 && p.LatencyFactor <= 100) {
		bad("commit pace latency factor %v must be 0 (default) or between 1.05 and 100", p.LatencyFactor)
	}
	if c.LogLevel < zapcore.DebugLevel || c.LogLevel > zapcore.ErrorLevel {
		bad("log level %q: want debug, info, warn or error", c.LogLevel)
	}
	if c.AccessLog < server.AccessLogSampled || c.AccessLog > server.AccessLogOff {
		bad("access log mode %v: want off, sampled or all", c.AccessLog)
	}
	if c.ShutdownTimeout < 0 {
		bad("--shutdown-timeout=%v must not be negative", c.ShutdownTimeout)
	}
	if c.HealthInterval < 0 {
		bad("health interval %v must not be negative", c.HealthInterval)
	}
	if c.DefaultCallTimeout < 0 {
		bad("--default-call-timeout=%v must not be negative", c.DefaultCallTimeout)
	}
	return errors.Join(errs...)
}

// loopbackHost reports whether a listen address's host is one of the
// loopback names the embedded etcd may listen on.
func loopbackHost(host string) bool {
	// Lower case only: etcd binds a name only if it is exactly
	// "localhost", and refuses any other at start.
	return host == "127.0.0.1" || host == "::1" || host == "localhost"
}

// sameListener reports whether listeners on a and b would take the same
// port, which the second then fails to bind ("address already in use")
// after start: the same non-zero port on the same host, or with either
// host a wildcard, which Go binds on every address, IPv4 and IPv6 alike.
// Names are not resolved: "localhost" and "127.0.0.1" are left to the bind.
func sameListener(a, b string) (port int, wildcard, same bool) {
	ha, pa, err1 := hostport.Split(a, 0)
	hb, pb, err2 := hostport.Split(b, 0)
	if err1 != nil || err2 != nil || pa != pb || pa == 0 {
		return 0, false, false
	}
	isWildcard := func(h string) bool {
		ip := net.ParseIP(h)
		return h == "" || ip != nil && ip.IsUnspecified()
	}
	if isWildcard(ha) || isWildcard(hb) {
		return pa, true, true
	}
	ia, ib := net.ParseIP(ha), net.ParseIP(hb)
	return pa, false, strings.EqualFold(ha, hb) || ia != nil && ia.Equal(ib)
}
