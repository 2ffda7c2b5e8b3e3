package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/lease"
	"go.uber.org/zap"

	"graveler/cleaner"
	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/ref"
	"graveler/keys"
	"graveler/kv"
)

func noEnv(string) string { return "" }

func TestHelpListsFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"--help"}, noEnv, &out, &errOut); code != 0 {
		t.Fatalf("--help: exit %d\n%s", code, errOut.String())
	}
	for _, f := range []string{"once", "interval", "etcd-endpoints", "etcd-prefix", "etcd-ca", "etcd-cert", "etcd-key",
		"etcd-username", "etcd-password", "etcd-request-timeout", "etcd-keepalive-time", "etcd-keepalive-timeout",
		"max-keys", "timeout", "sweep", "sweep-grace", "dry-run", "metrics-addr",
		"gc", "gc-grace", "gc-interval", "gc-delete-rate"} {
		if !strings.Contains(errOut.String(), "  -"+f+" ") && !strings.Contains(errOut.String(), "  -"+f+"\n") {
			t.Errorf("--help does not list -%s", f)
		}
	}
	// The CronJob's arguments parse before --help.
	args := []string{"--once", "--etcd-endpoints=http://etcd:2379", "--etcd-prefix=/graveler", "--max-keys=10000", "--timeout=10m", "--sweep", "--dry-run",
		"--gc", "--gc-grace=6h", "--gc-delete-rate=200", "--help"}
	if code := run(t.Context(), args, noEnv, &out, &errOut); code != 0 {
		t.Fatalf("CronJob arguments with --help: exit %d\n%s", code, errOut.String())
	}
}

func TestEtcdRequestFlags(t *testing.T) {
	env := map[string]string{"GRAVELER_ETCD_REQUEST_TIMEOUT": "750ms"}
	c, err := parse([]string{"--etcd-endpoints=x:2379", "--etcd-keepalive-time=20s"}, func(k string) string { return env[k] }, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.etcd.RequestTimeout != 750*time.Millisecond || c.etcd.DialKeepAliveTime != 20*time.Second ||
		c.etcd.DialKeepAliveTimeout != etcdkv.DefaultDialKeepAliveTimeout {
		t.Fatalf("etcd request bounds: %+v", c.etcd)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--no-such-flag"},
		{"--once"}, // no endpoints
		{"--once", "--etcd-endpoints=x:2379", "--max-keys=many"},
		{"--once", "--etcd-endpoints=x:2379", "--timeout=-1s"},
		{"--once", "--etcd-endpoints=x:2379", "--etcd-prefix=graveler"},
		{"--once", "--etcd-endpoints=x:2379", "--etcd-cert=c"},
		{"--once", "--etcd-endpoints=x:2379", "extra"},
		{"--once", "--etcd-endpoints=x:2379", "--gc", "--gc-grace=0s"},
		{"--once", "--etcd-endpoints=x:2379", "--gc-interval=-1m"},
		{"--once", "--etcd-endpoints=x:2379", "--gc-delete-rate=-5"},
	} {
		var out, errOut bytes.Buffer
		if code := run(t.Context(), args, noEnv, &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", args, code, errOut.String())
		}
		if last := lastLine(errOut.String()); !strings.HasPrefix(last, "cleaner: exit 2: ") {
			t.Errorf("%v: last stderr line %q, want cleaner: exit 2: <why>", args, last)
		}
	}
	// A bad environment variable too.
	env := func(k string) string {
		if k == "GRAVELER_MAX_KEYS" {
			return "lots"
		}
		return ""
	}
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"--once"}, env, &out, &errOut); code != 2 {
		t.Errorf("bad GRAVELER_MAX_KEYS: exit %d", code)
	}
}

// TestOnce: against an embedded etcd, --once reclaims a deleted
// repository, prints the summary and exits 0; endpoints and prefix come
// from the environment.
func TestOnce(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	const prefix = "/tenant"
	store := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{Prefix: prefix})
	ctx := t.Context()
	m := ref.New(store, ref.Config{})
	params := graveler.Repository{StorageNamespace: "mem://ns", DefaultBranchID: "main"}
	rec, err := m.CreateRepository(ctx, "doomed", params, graveler.Commit{Committer: "t", Message: "init"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.GetBranch(ctx, rec, "main")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Set(ctx, keys.StagingPartition(string(b.StagingToken)), keys.Entry([]byte("k")), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteRepository(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	// Closed, the store ends its write fence's lease, which deletes the
	// fence key: afterwards nothing at all is left under the prefix.
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"GRAVELER_ETCD_ENDPOINTS": strings.Join(srv.Endpoints(), ","),
		"GRAVELER_ETCD_PREFIX":    prefix,
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"--once", "--sweep"}, func(k string) string { return env[k] }, &out, &errOut); code != 0 {
		t.Fatalf("--once: exit %d\nstdout: %s\nstderr: %s", code, out.String(), errOut.String())
	}
	var sum cleaner.Summary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatalf("summary %q: %v", out.String(), err)
	}
	if sum.RepositoriesReclaimed != 1 || sum.KeysReclaimed < 3 || sum.Errors != 0 {
		t.Fatalf("summary %+v", sum)
	}
	resp, err := srv.Client.Get(ctx, prefix+"/", clientPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("%d keys left under %s", resp.Count, prefix)
	}
}

func clientPrefix() clientv3.OpOption { return clientv3.WithPrefix() }

// TestOnceSkipsUndecodableRecords: an undecodable repository record and
// an undecodable branch record do not stop --once: the deleted repository
// is reclaimed, the summary counts both skips, and the exit code is 1 so a
// CronJob reports the records for an operator.
func TestOnceSkipsUndecodableRecords(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	store := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	ctx := t.Context()
	m := ref.New(store, ref.Config{})
	params := graveler.Repository{StorageNamespace: "mem://ns", DefaultBranchID: "main"}
	initial := graveler.Commit{Committer: "t", Message: "init"}
	doomed, err := m.CreateRepository(ctx, "doomed", params, initial)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteRepository(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	params.StorageNamespace = "mem://ns-live" // the deleted repository holds mem://ns
	live, err := m.CreateRepository(ctx, "live", params, initial)
	if err != nil {
		t.Fatal(err)
	}
	garbage := []byte{0xff, 0xff, 0xff}
	if err := store.Set(ctx, keys.Graveler(), keys.Repository("bad"), garbage); err != nil {
		t.Fatal(err)
	}
	livePart := keys.RepositoryPartition("live", string(live.UniqueID))
	if err := store.Set(ctx, livePart, keys.Branch("broken"), garbage); err != nil {
		t.Fatal(err)
	}

	var out, errOut bytes.Buffer
	code := run(ctx, []string{"--once", "--etcd-endpoints=" + strings.Join(srv.Endpoints(), ",")}, noEnv, &out, &errOut)
	if code != 1 {
		t.Fatalf("--once with undecodable records: exit %d, want 1\nstdout: %s\nstderr: %s", code, out.String(), errOut.String())
	}
	var sum cleaner.Summary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
		t.Fatalf("summary %q: %v", out.String(), err)
	}
	if sum.SkippedRecords != 2 || sum.RepositoriesReclaimed != 1 || sum.Errors != 0 {
		t.Fatalf("summary %+v", sum)
	}
	for _, want := range []string{`"key":"repos/bad"`, `"key":"branches/broken"`} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("log does not name %s:\n%s", want, errOut.String())
		}
	}
	for e, err := range store.Scan(ctx, keys.RepositoryPartition("doomed", string(doomed.UniqueID)), kv.ScanOptions{}) {
		t.Fatalf("deleted repository not reclaimed: %q, %v", e.Key, err)
	}
	if _, err := m.GetRepository(ctx, "live"); err != nil {
		t.Fatalf("live repository: %v", err)
	}
}

// TestDaemon: without --once the cleaner elects itself, makes passes until
// the work list is empty, serves metrics, and exits 0 when stopped.
func TestDaemon(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	store := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	ctx := t.Context()
	if err := store.Set(ctx, keys.StagingPartition("rep.tok"), keys.Entry([]byte("k")), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := store.Set(ctx, keys.Deleted(), keys.DeletedToken("rep.tok"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan int, 1)
	var out, errOut syncBuffer
	go func() {
		done <- run(runCtx, []string{"--etcd-endpoints=" + strings.Join(srv.Endpoints(), ","), "--interval=5ms",
			"--metrics-addr=127.0.0.1:0", "--election-ttl=5"}, noEnv, &out, &errOut)
	}()
	// Wait for the work list to drain (a watch, not a timer).
	w := srv.Client.Watch(ctx, store.RawPrefix(keys.Deleted()), clientPrefix())
	for {
		resp, err := srv.Client.Get(ctx, store.RawPrefix(keys.Deleted()), clientPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == 0 {
			break
		}
		select {
		case <-w:
		case code := <-done:
			t.Fatalf("daemon exited early with %d\n%s", code, errOut.String())
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("daemon exit %d\n%s", code, errOut.String())
	}
	for _, want := range []string{"serving metrics", "daemon started", "leading", "cleaner: run "} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, errOut.String())
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTLSWithPlaintextEndpointIsBadFlag: --etcd-ca (or a client
// certificate) with an http:// endpoint would be silently plaintext, so it
// is a bad flag (exit 2) naming the flag, before etcd is dialled.
func TestTLSWithPlaintextEndpointIsBadFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"--once", "--etcd-endpoints=http://127.0.0.1:1", "--etcd-ca=ca.crt"}, noEnv, &out, &errOut)
	if code != exitUsage || !strings.Contains(errOut.String(), "--etcd-ca") {
		t.Fatalf("exit %d (want %d naming --etcd-ca); stderr: %s", code, exitUsage, errOut.String())
	}
}

// TestRootEtcdPrefixIsBadFlag: --etcd-prefix=/ is a bad flag (exit 2)
// naming the flag and "/", not a failure after etcd is dialled (exit 1).
func TestRootEtcdPrefixIsBadFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"--once", "--etcd-endpoints=http://127.0.0.1:1", "--etcd-dial-timeout=200ms", "--etcd-prefix=/"}, noEnv, &out, &errOut)
	if code != exitUsage || !strings.Contains(errOut.String(), `--etcd-prefix "/"`) {
		t.Fatalf("exit %d (want %d naming --etcd-prefix \"/\"); stderr: %s", code, exitUsage, errOut.String())
	}
}

// TestMalformedEndpointIsBadFlag: an endpoint without a port or with an
// unknown scheme is a bad flag (exit 2) naming --etcd-endpoints.
func TestMalformedEndpointIsBadFlag(t *testing.T) {
	for _, e := range []string{"localhost", "ftp://127.0.0.1:1"} {
		var out, errOut bytes.Buffer
		code := run(t.Context(), []string{"--once", "--etcd-dial-timeout=200ms", "--etcd-endpoints=" + e}, noEnv, &out, &errOut)
		if code != exitUsage || !strings.Contains(errOut.String(), "--etcd-endpoints") {
			t.Errorf("%s: exit %d (want %d naming --etcd-endpoints); stderr: %s", e, code, exitUsage, errOut.String())
		}
	}
}

// TestBadValuesAreBadFlags: values no run can use are bad flags (exit 2)
// naming the flag, found before etcd is dialled: a negative
// --etcd-keepalive-timeout (gravelerd refuses it too), a --sweep-grace
// that is not above 0 (it would turn the sweep's safety grace off), a
// --repository-creation-timeout not above 0 (it was silently replaced by
// 2m), a NaN --gc-delete-rate, and a --metrics-addr that is not host:port
// (it was found only after etcd was reached, exit 1).
func TestBadValuesAreBadFlags(t *testing.T) {
	for _, extra := range []string{
		"--etcd-keepalive-timeout=-1s",
		"--sweep-grace=-1h",
		"--sweep-grace=0s",
		"--repository-creation-timeout=-1s",
		"--repository-creation-timeout=0s",
		"--gc-delete-rate=NaN",
		"--metrics-addr=nocolon",
		"--metrics-addr=:90900",
		"--metrics-addr=:http",
	} {
		var out, errOut bytes.Buffer
		code := run(t.Context(), []string{"--etcd-endpoints=http://127.0.0.1:1", "--etcd-dial-timeout=200ms", extra}, noEnv, &out, &errOut)
		flag := strings.SplitN(strings.TrimPrefix(extra, "--"), "=", 2)[0]
		if code != exitUsage || !strings.Contains(errOut.String(), "--"+flag) {
			t.Errorf("%s: exit %d (want %d naming --%s); stderr: %s", extra, code, exitUsage, flag, errOut.String())
		}
	}
}

// TestBadDurationSaysWhatADurationIs: a duration without a unit is a bad
// flag (exit 2) saying what a duration looks like, not "parse error".
func TestBadDurationSaysWhatADurationIs(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"--once", "--etcd-endpoints=x:2379", "--interval=5"}, noEnv, &out, &errOut)
	if code != exitUsage || !strings.Contains(lastLine(errOut.String()), `invalid value "5" for flag -interval: not a duration (use a unit: 500ms, 5s, 2m)`) {
		t.Fatalf("exit %d; stderr: %s", code, errOut.String())
	}
}

// TestEachBadFlagNamedWithItsValue: flags checked alike are refused one by
// one, each naming its flag and the value it got, all of them on the one
// last line.
func TestEachBadFlagNamedWithItsValue(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"--etcd-endpoints=x:2379", "--max-keys=-1", "--interval=0s", "--election-ttl=0", "--gc-grace=0s", "--etcd-dial-timeout=-1s", "--etcd-cert=c.pem"}, noEnv, &out, &errOut)
	last := lastLine(errOut.String())
	if code != exitUsage || !strings.HasPrefix(last, "cleaner: exit 2: ") {
		t.Fatalf("exit %d; stderr: %s", code, errOut.String())
	}
	for _, want := range []string{"--max-keys=-1 must not be negative", "--interval=0s must be above 0", "--election-ttl=0 must be above 0",
		"--gc-grace=0s must be above 0", "--etcd-dial-timeout=-1s must be above 0", `--etcd-cert="c.pem" given without --etcd-key`} {
		if !strings.Contains(last, want) {
			t.Errorf("last line %q does not say %q", last, want)
		}
	}
	for _, notAtFault := range []string{"--timeout", "--gc-interval"} {
		if strings.Contains(last, notAtFault) {
			t.Errorf("last line %q names %s, which is not at fault", last, notAtFault)
		}
	}
}

// TestElectionTTLAboveEtcdsLongestLease: an --election-ttl etcd would
// refuse on every campaign is a bad flag (exit 2) naming the flag, the
// value and the longest lease, before etcd is dialled; the longest itself
// is accepted, and MaxElectionTTL is etcd's own.
func TestElectionTTLAboveEtcdsLongestLease(t *testing.T) {
	if cleaner.MaxElectionTTL != lease.MaxLeaseTTL {
		t.Fatalf("cleaner.MaxElectionTTL %d, etcd's lease.MaxLeaseTTL %d", int64(cleaner.MaxElectionTTL), int64(lease.MaxLeaseTTL))
	}
	if strconv.IntSize < 64 {
		t.Skip("an int flag cannot exceed the limit")
	}
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"--etcd-endpoints=http://127.0.0.1:1", "--etcd-dial-timeout=200ms", "--election-ttl=9000000001"}, noEnv, &out, &errOut)
	if want := "--election-ttl=9000000001 is above 9000000000"; code != exitUsage || !strings.Contains(lastLine(errOut.String()), want) {
		t.Fatalf("exit %d (want %d saying %q); stderr: %s", code, exitUsage, want, errOut.String())
	}
	if _, err := parse([]string{"--etcd-endpoints=x:2379", "--election-ttl=9000000000"}, noEnv, io.Discard); err != nil {
		t.Fatalf("the longest lease: %v", err)
	}
}

// TestElectionRefusedByEtcdEnds: when etcd refuses the election's lease
// for its TTL (here past the flag check), the daemon exits 1 naming it
// instead of campaigning again for ever.
func TestElectionRefusedByEtcdEnds(t *testing.T) {
	if strconv.IntSize < 64 {
		t.Skip("an int cannot exceed the limit")
	}
	srv := etcdkvtest.NewServer(t)
	cfg, err := parse([]string{"--etcd-endpoints=" + strings.Join(srv.Endpoints(), ","), "--interval=10ms"}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ttl := int64(cleaner.MaxElectionTTL) + 1
	cfg.electionTTL = int(ttl)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	code, why := runLogged(ctx, cfg, zap.NewNop(), io.Discard)
	if code != exitFailed || !strings.Contains(why, "election refused") || !strings.Contains(why, "9000000001") || ctx.Err() != nil {
		t.Fatalf("exit %d, %q (ctx %v); want exit %d naming the refused lease, at once", code, why, ctx.Err(), exitFailed)
	}
}
