package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "graveler/api/graveler/v1"
	"graveler/client"
	"graveler/etcdkv"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/staging"
	"graveler/server/daemon"
)

func TestParseDefaults(t *testing.T) {
	c, err := parse(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.ListenAddr != "127.0.0.1:7070" || len(c.Etcd.Endpoints) != 0 || !strings.HasSuffix(c.DataDir, "graveler-data") ||
		!strings.HasPrefix(c.StorageNamespaceRoot, "file://") || c.Etcd.Prefix != "/graveler" {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestParseEnvAndFlags(t *testing.T) {
	env := map[string]string{
		"GRAVELER_LISTEN":            "127.0.0.1:9999",
		"GRAVELER_ETCD_ENDPOINTS":    "http://a:2379,http://b:2379",
		"GRAVELER_ETCD_DIAL_TIMEOUT": "3s",
	}
	c, err := parse([]string{"-listen", "127.0.0.1:8888"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.ListenAddr != "127.0.0.1:8888" {
		t.Fatalf("flag did not win over env: %s", c.ListenAddr)
	}
	if len(c.Etcd.Endpoints) != 2 || c.Etcd.DialTimeout != 3*time.Second {
		t.Fatalf("env not applied: %+v", c.Etcd)
	}
}

func TestParseRejectsBadConfig(t *testing.T) {
	_, err := parse([]string{"-tls-cert", "/nonexistent/cert.pem", "-listen", "nocolon", "-storage-namespace-root", "ftp://x"},
		func(string) string { return "" }, io.Discard)
	if !errors.Is(err, daemon.ErrInvalidConfig) {
		t.Fatalf("got %v", err)
	}
	for _, want := range []string{`--tls-cert="/nonexistent/cert.pem" given without --tls-key`, `--listen="nocolon"`, "storage namespace", "/nonexistent/cert.pem"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if _, err := parse(nil, func(k string) string {
		if k == "GRAVELER_ETCD_DIAL_TIMEOUT" {
			return "soon"
		}
		return ""
	}, io.Discard); err == nil || !strings.Contains(err.Error(), "GRAVELER_ETCD_DIAL_TIMEOUT") {
		t.Fatalf("bad env value: %v", err)
	}
}

func TestParseCommitTuning(t *testing.T) {
	c, err := parse([]string{"-commit-read-rate", "25000", "-separate-fence-read", "-fenced-batch-size", "32"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.CommitReadRate != 25000 || !c.SeparateFenceRead || c.FencedBatchSize != 32 {
		t.Fatalf("commit tuning flags not applied: rate %v, separate fence read %v", c.CommitReadRate, c.SeparateFenceRead)
	}
	c, err = parse(nil, func(k string) string {
		if k == "GRAVELER_COMMIT_READ_RATE" {
			return "5000"
		}
		return ""
	}, io.Discard)
	if err != nil || c.CommitReadRate != 5000 || c.SeparateFenceRead {
		t.Fatalf("from the environment: %+v, %v", c, err)
	}
	for _, bad := range []string{"-1", "500"} {
		_, err := parse([]string{"-fenced-batch-size", bad}, func(string) string { return "" }, io.Discard)
		if !errors.Is(err, daemon.ErrInvalidConfig) || !strings.Contains(err.Error(), "fenced batch size") {
			t.Errorf("fenced batch size %s: %v", bad, err)
		}
	}
	for _, bad := range []string{"-1", "NaN", "+Inf"} {
		_, err := parse([]string{"-commit-read-rate", bad}, func(string) string { return "" }, io.Discard)
		if !errors.Is(err, daemon.ErrInvalidConfig) || !strings.Contains(err.Error(), "commit read rate") {
			t.Errorf("commit read rate %s: %v", bad, err)
		}
	}
}

func TestParseEtcdRequestBounds(t *testing.T) {
	c, err := parse(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Etcd.RequestTimeout != etcdkv.DefaultRequestTimeout || c.Etcd.KeepAliveTime != etcdkv.DefaultDialKeepAliveTime || c.Etcd.KeepAliveTimeout != etcdkv.DefaultDialKeepAliveTimeout {
		t.Fatalf("defaults: %+v", c.Etcd)
	}
	env := map[string]string{"GRAVELER_ETCD_REQUEST_TIMEOUT": "750ms", "GRAVELER_ETCD_KEEPALIVE_TIMEOUT": "3s"}
	c, err = parse([]string{"-etcd-keepalive-time", "20s"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Etcd.RequestTimeout != 750*time.Millisecond || c.Etcd.KeepAliveTime != 20*time.Second || c.Etcd.KeepAliveTimeout != 3*time.Second {
		t.Fatalf("flags and env not applied: %+v", c.Etcd)
	}
	if _, err := parse([]string{"-etcd-keepalive-timeout", "-1s"}, func(string) string { return "" }, io.Discard); !errors.Is(err, daemon.ErrInvalidConfig) {
		t.Fatalf("negative keepalive timeout: %v", err)
	}
}

func TestParseCommitPacing(t *testing.T) {
	none := func(string) string { return "" }
	c, err := parse(nil, none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.CommitPacing.Off || c.CommitPacing.Floor != graveler.DefaultCommitPaceFloor || c.CommitPacing.LatencyFactor != graveler.DefaultCommitPaceLatencyFactor || c.CommitReadRate != 0 {
		t.Fatalf("default commit pacing: %+v, ceiling %v; want adaptive with no ceiling", c.CommitPacing, c.CommitReadRate)
	}
	c, err = parse([]string{"-commit-pacing=false", "-commit-pace-floor", "200", "-commit-pace-latency-factor", "3"}, none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (graveler.CommitPacing{Off: true, Floor: 200, LatencyFactor: 3}); c.CommitPacing != want {
		t.Fatalf("commit pacing flags: %+v, want %+v", c.CommitPacing, want)
	}
	for _, bad := range [][]string{{"-commit-pace-floor", "-5"}, {"-commit-pace-latency-factor", "1"}, {"-commit-pace-latency-factor", "NaN"}} {
		if _, err := parse(bad, none, io.Discard); !errors.Is(err, daemon.ErrInvalidConfig) || !strings.Contains(err.Error(), "commit pace") {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

// The in-memory caches of committed trees: the package's defaults, set by
// flag or environment, and a negative size refused.
func TestParseMemoryCaches(t *testing.T) {
	c, err := parse(nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeCacheBytes != committed.DefaultNodeCacheBytes || c.RangeMemoryBytes != committed.DefaultRangeCacheBytes {
		t.Fatalf("defaults: nodes %d, ranges %d", c.NodeCacheBytes, c.RangeMemoryBytes)
	}
	env := map[string]string{"GRAVELER_RANGE_MEMORY_CACHE_BYTES": "1048576"}
	c, err = parse([]string{"-node-cache-bytes", "268435456"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeCacheBytes != 256<<20 || c.RangeMemoryBytes != 1<<20 {
		t.Fatalf("set: nodes %d, ranges %d", c.NodeCacheBytes, c.RangeMemoryBytes)
	}
	_, err = parse([]string{"-node-cache-bytes", "-1", "-range-memory-cache-bytes", "-5"}, func(string) string { return "" }, io.Discard)
	if !errors.Is(err, daemon.ErrInvalidConfig) || !strings.Contains(err.Error(), "node cache size -1") || !strings.Contains(err.Error(), "range memory cache size -5") {
		t.Fatalf("negative sizes: %v", err)
	}
}

// A configuration error is printed once prefixed with the program's name,
// and exits 2.
func TestRunBadConfigMessage(t *testing.T) {
	var out, errOut strings.Builder
	if rc := run([]string{"-node-cache-bytes", "-1"}, &out, &errOut); rc != 2 {
		t.Fatalf("exit %d, want 2", rc)
	}
	if msg := errOut.String(); !strings.HasPrefix(msg, "gravelerd: invalid configuration: node cache size -1") || strings.Count(msg, "gravelerd:") != 1 {
		t.Fatalf("stderr %q", msg)
	}
	errOut.Reset()
	if rc := run([]string{"-no-such-flag"}, &out, &errOut); rc != 2 || strings.Count(errOut.String(), "gravelerd: ") < 1 {
		t.Fatalf("unknown flag: exit %d, stderr %q", rc, errOut.String())
	}
}

// TestParseRefusesBlankEtcdEndpoints: an etcd endpoint list given on the
// command line or in GRAVELER_ETCD_ENDPOINTS that holds only blanks or
// commas is an operator's mistake (a mis-templated ConfigMap), not a
// request for the embedded etcd: parse refuses it, naming the flag, so
// that a replica never starts a private etcd under its data dir.
func TestParseRefusesBlankEtcdEndpoints(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"flag comma", []string{"--etcd-endpoints=,"}, nil},
		{"flag space", []string{"--etcd-endpoints= "}, nil},
		{"env space", nil, map[string]string{"GRAVELER_ETCD_ENDPOINTS": " "}},
	} {
		c, err := parse(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
		if err == nil {
			t.Errorf("%s: accepted; endpoints %q: gravelerd would run an embedded etcd", tc.name, c.Etcd.Endpoints)
		} else if !strings.Contains(err.Error(), "--etcd-endpoints") {
			t.Errorf("%s: error %q does not name --etcd-endpoints", tc.name, err)
		}
	}
}

// TestParseRefusesEtcdTLSWithPlaintextEndpoint: etcd TLS files with an
// http:// endpoint would be silently ignored by the etcd client (it talks
// plaintext to http://), so parse refuses the pair, naming the flags; an
// https:// endpoint without TLS files is accepted (system roots).
func TestParseRefusesEtcdTLSWithPlaintextEndpoint(t *testing.T) {
	env := func(string) string { return "" }
	// Files that exist, so that only the endpoint's scheme is at fault.
	dir := t.TempDir()
	file := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("pem"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ca, cert, key := file("ca.crt"), file("c.crt"), file("c.key")
	for _, args := range [][]string{
		{"--etcd-endpoints=http://etcd:2379", "--etcd-ca=" + ca},
		{"--etcd-endpoints=https://a:2379,http://b:2379", "--etcd-cert=" + cert, "--etcd-key=" + key},
	} {
		_, err := parse(args, env, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--etcd-") || !strings.Contains(err.Error(), "http://") {
			t.Errorf("%v: %v, want an error naming the TLS flags and the http:// endpoint", args, err)
		}
	}
	if _, err := parse([]string{"--etcd-endpoints=https://etcd:2379"}, env, io.Discard); err != nil {
		t.Errorf("https:// without TLS files: %v", err)
	}
}

// TestParseRefusesRootEtcdPrefix: --etcd-prefix=/ (or only slashes) is no
// prefix the store can use; parse refuses it, naming the flag and the
// value, rather than the daemon failing later with exit 1 and a message
// that shows the prefix as "".
func TestParseRefusesRootEtcdPrefix(t *testing.T) {
	for _, p := range []string{"/", "//"} {
		_, err := parse([]string{"--etcd-prefix=" + p}, func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--etcd-prefix") || !strings.Contains(err.Error(), `"`+p+`"`) {
			t.Errorf("--etcd-prefix=%s: %v, want an error naming the flag and the value", p, err)
		}
	}
}

// TestParseRefusesMalformedEtcdEndpoint: an endpoint the etcd client
// cannot dial as written (no port, an unknown scheme) is a bad flag naming
// --etcd-endpoints, not a daemon that starts and serves NOT_SERVING for
// ever; a well-formed endpoint is left to the dial.
func TestParseRefusesMalformedEtcdEndpoint(t *testing.T) {
	env := func(string) string { return "" }
	for _, e := range []string{"localhost", "ftp://127.0.0.1:1"} {
		if _, err := parse([]string{"--etcd-endpoints=" + e}, env, io.Discard); err == nil || !strings.Contains(err.Error(), "--etcd-endpoints") {
			t.Errorf("%s: %v, want an error naming --etcd-endpoints", e, err)
		}
	}
	if _, err := parse([]string{"--etcd-endpoints=http://127.0.0.1:1"}, env, io.Discard); err != nil {
		t.Errorf("well-formed endpoint: %v", err)
	}
}

// TestParseNamesEachFlagAtFault: settings checked alike are reported one
// by one, each naming its flag and the value it got, not as one message
// listing several flags without their values.
func TestParseNamesEachFlagAtFault(t *testing.T) {
	none := func(string) string { return "" }
	_, err := parse([]string{"--shutdown-timeout=-1s", "--default-call-timeout=-2s"}, none, io.Discard)
	if !errors.Is(err, daemon.ErrInvalidConfig) {
		t.Fatalf("negative timeouts: %v", err)
	}
	for _, want := range []string{"--shutdown-timeout=-1s must not be negative", "--default-call-timeout=-2s must not be negative"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "health interval") {
		t.Errorf("%q names a setting that is not at fault", err)
	}
	_, err = parse([]string{"--default-call-timeout=-2s"}, none, io.Discard)
	if err == nil || strings.Contains(err.Error(), "shutdown") {
		t.Errorf("only --default-call-timeout negative: %v", err)
	}

	dir := t.TempDir()
	key := filepath.Join(dir, "k.pem")
	if err := os.WriteFile(key, []byte("pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-key=" + key}, fmt.Sprintf("--tls-key=%q given without --tls-cert", key)},
		{[]string{"--etcd-endpoints=https://e:2379", "--etcd-key=" + key}, fmt.Sprintf("--etcd-key=%q given without --etcd-cert", key)},
		{[]string{"--etcd-endpoints=https://e:2379", "--etcd-username=ops"}, `--etcd-username="ops" given without --etcd-password`},
		{[]string{"--etcd-endpoints=https://e:2379", "--etcd-password=s3cret"}, "--etcd-password given without --etcd-username"},
		{[]string{"--etcd-ca=" + key, "--etcd-username=ops", "--etcd-password=s3cret"}, "--etcd-ca, --etcd-username, --etcd-password given without --etcd-endpoints"},
	} {
		_, err := parse(tc.args, none, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%v: %v, want %q (and no password)", tc.args, err, tc.want)
		}
	}
}

// TestParseRefusesListenAddressOutOfRange: a listen address whose port is
// out of range, not a number or missing is a bad flag (exit 2) naming the
// flag and the value, not a failure to bind after start; the forms
// gravelerd binds (port 0 for any, no host for every interface, IPv6,
// names) are accepted.
func TestParseRefusesListenAddressOutOfRange(t *testing.T) {
	none := func(string) string { return "" }
	for _, flag := range []string{"--listen", "--metrics-listen"} {
		// parse, not run: an address accepted by mistake would start a daemon.
		for _, addr := range []string{"127.0.0.1:70000", ":-1", "127.0.0.1:http", "127.0.0.1", "127.0.0.1:", "::1:7070"} {
			_, err := parse([]string{flag + "=" + addr}, none, io.Discard)
			if want := fmt.Sprintf("%s=%q", flag, addr); !errors.Is(err, daemon.ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s=%s: %v; want an error naming %s", flag, addr, err, want)
			}
		}
		for _, addr := range []string{"127.0.0.1:0", ":7070", "[::1]:7070", "localhost:7071", "0.0.0.0:65535"} {
			// The other listener on a port of its own.
			if _, err := parse([]string{"--listen=127.0.0.1:7000", flag + "=" + addr}, none, io.Discard); err != nil {
				t.Errorf("%s=%s: %v", flag, addr, err)
			}
		}
	}
	// A port out of range fails to bind after start: the data dir keeps
	// the embedded etcd such a start makes out of the package's directory.
	var errOut strings.Builder
	if code := run([]string{"--listen=127.0.0.1:70000", "--data-dir=" + t.TempDir()}, io.Discard, &errOut); code != 2 || !strings.Contains(errOut.String(), `--listen="127.0.0.1:70000"`) {
		t.Errorf("--listen=127.0.0.1:70000: exit %d, stderr %q; want 2 naming the flag", code, errOut.String())
	}
	env := map[string]string{"GRAVELER_METRICS_LISTEN": ":90900"}
	if _, err := parse(nil, func(k string) string { return env[k] }, io.Discard); err == nil || !strings.Contains(err.Error(), `--metrics-listen=":90900"`) {
		t.Errorf("GRAVELER_METRICS_LISTEN=:90900: %v", err)
	}
}

// TestParseRefusesMetricsOnTheListenPort: --metrics-listen naming the port
// --listen binds, on the same host or a wildcard one, is a bad flag naming
// both, not "address already in use" after start; port 0 (any free port)
// twice, other ports, and distinct hosts are accepted.
func TestParseRefusesMetricsOnTheListenPort(t *testing.T) {
	none := func(string) string { return "" }
	for _, tc := range [][2]string{
		{"127.0.0.1:7070", "127.0.0.1:7070"},
		{"LOCALHOST:7070", "localhost:7070"},
		{":7070", "127.0.0.1:7070"},
		{"127.0.0.1:7070", "0.0.0.0:7070"},
		{"[::1]:7070", "[::]:7070"},
		{"[::1]:7070", "[0:0:0:0:0:0:0:1]:7070"},
	} {
		// parse, not run: a pair accepted by mistake would start a daemon.
		_, err := parse([]string{"--listen=" + tc[0], "--metrics-listen=" + tc[1]}, none, io.Discard)
		want := fmt.Sprintf("--metrics-listen=%q and --listen=%q would both bind port 7070", tc[1], tc[0])
		if !errors.Is(err, daemon.ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("--listen=%s --metrics-listen=%s: %v; want %q", tc[0], tc[1], err, want)
		}
	}
	env := map[string]string{"GRAVELER_METRICS_LISTEN": "127.0.0.1:7070"} // --listen's default
	if _, err := parse(nil, func(k string) string { return env[k] }, io.Discard); err == nil || !strings.Contains(err.Error(), "--listen=") {
		t.Errorf("GRAVELER_METRICS_LISTEN on the default --listen: %v", err)
	}
	for _, tc := range [][2]string{
		{"127.0.0.1:0", "127.0.0.1:0"},
		{":7070", ":9090"},
		{"127.0.0.1:7070", "[::1]:7070"},
		{"127.0.0.1:7070", "127.0.0.2:7070"},
	} {
		if _, err := parse([]string{"--listen=" + tc[0], "--metrics-listen=" + tc[1]}, none, io.Discard); err != nil {
			t.Errorf("--listen=%s --metrics-listen=%s: %v", tc[0], tc[1], err)
		}
	}
}

// TestParseRefusesTinyMaxRecvMsgSize: a --max-recv-msg-size below what the
// largest request within graveler's limits takes (after which every such
// call fails RESOURCE_EXHAUSTED) is a bad flag naming the flag, the value
// and the least; the least fits the largest PutEntry, Commit and Merge.
func TestParseRefusesTinyMaxRecvMsgSize(t *testing.T) {
	none := func(string) string { return "" }
	// parse, not run: a value accepted by mistake would start a daemon.
	for _, v := range []int{1, 64 << 10, daemon.MinMaxRecvMsgSize - 1, -1} {
		_, err := parse([]string{fmt.Sprint("--max-recv-msg-size=", v)}, none, io.Discard)
		want := fmt.Sprintf("--max-recv-msg-size=%d is below %d", v, daemon.MinMaxRecvMsgSize)
		if !errors.Is(err, daemon.ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("--max-recv-msg-size=%d: %v, want %q", v, err, want)
		}
	}
	if c, err := parse([]string{fmt.Sprint("--max-recv-msg-size=", daemon.MinMaxRecvMsgSize)}, none, io.Discard); err != nil || c.MaxRecvMsgSize != daemon.MinMaxRecvMsgSize {
		t.Errorf("--max-recv-msg-size at the least: %d, %v", c.MaxRecvMsgSize, err)
	}

	branch := client.Branch(strings.Repeat("r", graveler.MaxRepositoryIDLen), strings.Repeat("b", graveler.MaxBranchIDLen))
	// A commit's content at graveler's limit: the longest message, and a
	// committer taking the rest of MaxCommitUserBytes.
	msg := strings.Repeat("m", graveler.MaxCommitMessageLen)
	committer := strings.Repeat("c", graveler.MaxCommitUserBytes-graveler.CommitUserBytes(msg, "", nil)-4)
	if n := graveler.CommitUserBytes(msg, committer, nil); n != graveler.MaxCommitUserBytes || graveler.ValidateCommitContent(msg, committer, nil) != nil {
		t.Fatalf("the largest commit takes %d bytes, want %d", n, graveler.MaxCommitUserBytes)
	}
	opts := &pb.CommitOptions{Message: msg, Committer: committer, AllowEmpty: true}
	for _, req := range []proto.Message{
		&pb.PutEntryRequest{Branch: branch, IfAbsent: true, Entry: &pb.Entry{
			Key:   make([]byte, graveler.MaxKeyLen),
			Value: &pb.Value{Identity: make([]byte, graveler.MaxIdentityLen), Data: make([]byte, graveler.MaxValueDataLen)},
		}},
		&pb.CommitRequest{Branch: branch, Options: opts},
		&pb.MergeRequest{Destination: branch, SourceRef: strings.Repeat("s", graveler.MaxRefLen), Options: opts, Strategy: pb.MergeStrategy_MERGE_STRATEGY_SOURCE_WINS, NoFf: true},
	} {
		if n := proto.Size(req); n > daemon.MinMaxRecvMsgSize {
			t.Errorf("the largest %s takes %d bytes, over the least --max-recv-msg-size %d", proto.MessageName(req).Name(), n, daemon.MinMaxRecvMsgSize)
		}
	}
}

// TestParseRefusesZeroForFlagsWithoutNone: 0 for a flag whose setting
// reads 0 as its default (and that has no "none" to mean) is refused,
// naming the flag and the default to leave it out for, on the command line
// and in the variable alike, instead of silently becoming the default.
func TestParseRefusesZeroForFlagsWithoutNone(t *testing.T) {
	none := func(string) string { return "" }
	for _, tc := range []struct{ arg, want string }{
		{"--shutdown-timeout=0", "--shutdown-timeout=0s must be above 0 (leave it out for 30s)"},
		{"--etcd-dial-timeout=0s", "--etcd-dial-timeout=0s must be above 0 (leave it out for 5s)"},
		{"--range-cache-size=0", "--range-cache-size=0 must be above 0"},
		{"--max-recv-msg-size=0", fmt.Sprintf("--max-recv-msg-size=0 must be at least %d", daemon.MinMaxRecvMsgSize)},
	} {
		// parse, not run: a value accepted by mistake would start a daemon.
		_, err := parse([]string{tc.arg}, none, io.Discard)
		if !errors.Is(err, daemon.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.arg, err, tc.want)
		}
	}
	env := map[string]string{"GRAVELER_SHUTDOWN_TIMEOUT": "0s", "GRAVELER_RANGE_CACHE_SIZE": "0"}
	_, err := parse(nil, func(k string) string { return env[k] }, io.Discard)
	for _, want := range []string{"--shutdown-timeout=0s", "--range-cache-size=0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("variables at 0: %v, want %q", err, want)
		}
	}
	c, err := parse([]string{"--shutdown-timeout=1s", "--etcd-dial-timeout=1s", "--range-cache-size=1", "--max-recv-msg-size=8388608"}, none, io.Discard)
	if err != nil || c.ShutdownTimeout != time.Second || c.Etcd.DialTimeout != time.Second || c.RangeCacheSize != 1 || c.MaxRecvMsgSize != 8<<20 {
		t.Errorf("small positive values: %+v, %v", c, err)
	}
	var help bytes.Buffer
	if code := run([]string{"--help"}, io.Discard, &help); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, f := range []string{"shutdown-timeout", "etcd-dial-timeout", "range-cache-size"} {
		_, usage, _ := strings.Cut(help.String(), "  -"+f+" ")
		if usage, _, _ = strings.Cut(usage, "\n  -"); !strings.Contains(usage, "(above 0") {
			t.Errorf("--help of -%s does not say it must be above 0: %q", f, usage)
		}
	}
}

// TestParseEmbeddedEtcdListen: --embedded-etcd-listen (or its variable)
// pins the embedded etcd's client address on a loopback host; any other
// host is refused (that etcd has no authentication), as are a malformed
// address, a port --listen takes, and the flag with --etcd-endpoints,
// each as an invalid configuration (exit 2) naming the flag.
func TestParseEmbeddedEtcdListen(t *testing.T) {
	// parse, not run: a value accepted by mistake would start a daemon.
	none := func(string) string { return "" }
	c, err := parse(nil, none, io.Discard)
	if err != nil || c.EmbeddedEtcdListen != "" {
		t.Fatalf("default: %q, %v", c.EmbeddedEtcdListen, err)
	}
	for _, addr := range []string{"127.0.0.1:23790", "[::1]:23790", "localhost:23790", "127.0.0.1:0"} {
		c, err := parse([]string{"--embedded-etcd-listen=" + addr}, none, io.Discard)
		if err != nil || c.EmbeddedEtcdListen != addr {
			t.Errorf("--embedded-etcd-listen=%s: %q, %v", addr, c.EmbeddedEtcdListen, err)
		}
	}
	env := map[string]string{"GRAVELER_EMBEDDED_ETCD_LISTEN": "127.0.0.1:23791"}
	if c, err := parse(nil, func(k string) string { return env[k] }, io.Discard); err != nil || c.EmbeddedEtcdListen != "127.0.0.1:23791" {
		t.Errorf("GRAVELER_EMBEDDED_ETCD_LISTEN: %q, %v", c.EmbeddedEtcdListen, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--embedded-etcd-listen=0.0.0.0:2379"}, `--embedded-etcd-listen="0.0.0.0:2379": host "0.0.0.0" is not 127.0.0.1, ::1 or localhost`},
		{[]string{"--embedded-etcd-listen=:2379"}, `--embedded-etcd-listen=":2379": host "" is not 127.0.0.1, ::1 or localhost`},
		{[]string{"--embedded-etcd-listen=10.0.0.5:2379"}, `host "10.0.0.5" is not 127.0.0.1, ::1 or localhost`},
		{[]string{"--embedded-etcd-listen=etcd.example.com:2379"}, `host "etcd.example.com" is not`},
		// etcd binds a name only if it is exactly "localhost".
		{[]string{"--embedded-etcd-listen=LOCALHOST:2379"}, `host "LOCALHOST" is not`},
		{[]string{"--embedded-etcd-listen=127.0.0.1"}, `--embedded-etcd-listen="127.0.0.1": want host:port`},
		{[]string{"--embedded-etcd-listen=127.0.0.1:70000"}, `--embedded-etcd-listen="127.0.0.1:70000": port "70000"`},
		{[]string{"--embedded-etcd-listen=127.0.0.1:7070"}, `--embedded-etcd-listen="127.0.0.1:7070" and --listen="127.0.0.1:7070" would both bind port 7070`},
		{[]string{"--embedded-etcd-listen=127.0.0.1:2379", "--etcd-endpoints=http://etcd:2379"}, `--embedded-etcd-listen="127.0.0.1:2379" given with --etcd-endpoints`},
	} {
		_, err := parse(tc.args, none, io.Discard)
		if !errors.Is(err, daemon.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want %q", tc.args, err, tc.want)
		}
	}
}

// TestFencedBatchSizeRangeInHelp: --help states the range of
// --fenced-batch-size that parse accepts, from the same constant, and
// that a larger value is refused at start, not sent to etcd.
func TestFencedBatchSizeRangeInHelp(t *testing.T) {
	var help bytes.Buffer
	if code := run([]string{"--help"}, io.Discard, &help); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	_, usage, _ := strings.Cut(help.String(), "-fenced-batch-size")
	usage, _, _ = strings.Cut(usage, "\n  -")
	usage = strings.Join(strings.Fields(usage), " ")
	for _, want := range []string{fmt.Sprintf("1 to %d", staging.MaxFencedBatchSize), "a larger value is refused at start", "0: the default"} {
		if !strings.Contains(usage, want) {
			t.Errorf("--fenced-batch-size help %q does not say %q", usage, want)
		}
	}
	none := func(string) string { return "" }
	if c, err := parse([]string{fmt.Sprint("--fenced-batch-size=", staging.MaxFencedBatchSize)}, none, io.Discard); err != nil || c.FencedBatchSize != staging.MaxFencedBatchSize {
		t.Errorf("--fenced-batch-size=%d: %d, %v", staging.MaxFencedBatchSize, c.FencedBatchSize, err)
	}
	_, err := parse([]string{fmt.Sprint("--fenced-batch-size=", staging.MaxFencedBatchSize+1)}, none, io.Discard)
	if want := fmt.Sprintf("fenced batch size %d must be between 1 and %d", staging.MaxFencedBatchSize+1, staging.MaxFencedBatchSize); !errors.Is(err, daemon.ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
		t.Errorf("--fenced-batch-size=%d: %v; want %q", staging.MaxFencedBatchSize+1, err, want)
	}
}
