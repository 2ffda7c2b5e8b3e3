package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"graveler/buildinfo"
	"graveler/cleaner"
	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/keys"
)

// lastLine is the last line the cleaner wrote on stderr: it must say why
// the cleaner exits as it does.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// caFile writes a self-signed CA certificate.
func caFile(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cleaner test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestUnreachableEtcd: against a closed port, or a plaintext etcd spoken
// to over TLS, --once neither hangs nor reports an empty successful pass:
// it exits 1 and names the endpoints and the cause.
func TestUnreachableEtcd(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	plain := strings.TrimPrefix(srv.Endpoints()[0], "http://")
	for _, tc := range []struct {
		name     string
		endpoint string
		extra    []string
		cause    string
	}{
		{"closed port", "http://" + closedAddr(t), nil, "connection refused"},
		{"TLS to a plaintext etcd", "https://" + plain, []string{"--etcd-ca=" + caFile(t)}, "tls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"--once", "--etcd-endpoints=" + tc.endpoint, "--etcd-dial-timeout=2s"}, tc.extra...)
			code := run(t.Context(), args, noEnv, &out, &errOut)
			if code != exitFailed {
				t.Errorf("exit %d, want %d", code, exitFailed)
			}
			if out.Len() != 0 {
				t.Errorf("a summary was printed for a pass that never ran: %s", out.String())
			}
			last := lastLine(errOut.String())
			if !strings.Contains(last, "cleaner: exit 1: cannot reach etcd at "+tc.endpoint+": ") || !strings.Contains(strings.ToLower(last), tc.cause) {
				t.Errorf("last stderr line does not name the endpoint and %q:\n%s", tc.cause, errOut.String())
			}
		})
	}
}

// TestDaemonFailureLastLine: a daemon that cannot start (its metrics
// address is taken) ends with the same last line as --once does.
func TestDaemonFailureLastLine(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	var out, errOut bytes.Buffer
	code := run(t.Context(), []string{"--etcd-endpoints=" + strings.Join(srv.Endpoints(), ","),
		"--metrics-addr=" + taken.Addr().String()}, noEnv, &out, &errOut)
	if code != exitFailed {
		t.Fatalf("exit %d, want %d\n%s", code, exitFailed, errOut.String())
	}
	if last := lastLine(errOut.String()); !strings.Contains(last, "cleaner: exit 1: metrics listener: ") {
		t.Errorf("last stderr line does not say why:\n%s", errOut.String())
	}
}

// TestOnceIncomplete: a pass stopped by --max-keys exits 3 and says so
// on stderr, while its summary is still printed.
func TestOnceIncomplete(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	store := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	ctx := t.Context()
	for _, tok := range []string{"rep.tok1", "rep.tok2"} {
		if err := store.Set(ctx, keys.StagingPartition(tok), keys.Entry([]byte("k")), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if err := store.Set(ctx, keys.Deleted(), keys.DeletedToken(tok), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	var out, errOut bytes.Buffer
	code := run(ctx, []string{"--once", "--max-keys=1", "--etcd-endpoints=" + strings.Join(srv.Endpoints(), ",")}, noEnv, &out, &errOut)
	if code != exitIncomplete {
		t.Fatalf("exit %d, want %d\n%s", code, exitIncomplete, errOut.String())
	}
	var sum cleaner.Summary
	if err := json.Unmarshal(out.Bytes(), &sum); err != nil || !sum.Incomplete || sum.StoppedBy != cleaner.StoppedByMaxKeys {
		t.Fatalf("summary %q: %v", out.String(), err)
	}
	if last := lastLine(errOut.String()); !strings.Contains(last, "exit 3") || !strings.Contains(last, "stopped at --max-keys=1") {
		t.Fatalf("last stderr line: %s", last)
	}
	// The next run finishes the work and exits 0.
	out.Reset()
	errOut.Reset()
	if code := run(ctx, []string{"--once", "--etcd-endpoints=" + strings.Join(srv.Endpoints(), ",")}, noEnv, &out, &errOut); code != exitOK {
		t.Fatalf("second run: exit %d\n%s", code, errOut.String())
	}
}

// TestDryRunSaysWould: the dry run's log lines say what would be
// reclaimed, never that something was.
func TestDryRunSaysWould(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	store := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	ctx := t.Context()
	// A staging token whose UUIDv7 was made two hours ago: past the
	// sweep's grace of one hour.
	ms := fmt.Sprintf("%012x", time.Now().Add(-2*time.Hour).UnixMilli())
	orphan := "rep." + ms[:8] + "-" + ms[8:] + "-7000-8000-000000000001"
	if err := store.Set(ctx, keys.StagingPartition(orphan), keys.Entry([]byte("k")), []byte("v")); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := run(ctx, []string{"--once", "--dry-run", "--sweep", "--sweep-grace=1h", "--log-level=debug",
		"--etcd-endpoints=" + strings.Join(srv.Endpoints(), ",")}, noEnv, &out, &errOut)
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, errOut.String())
	}
	var would int
	for _, line := range strings.Split(strings.TrimSpace(errOut.String()), "\n") {
		var e struct{ Msg string }
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if strings.Contains(e.Msg, "reclaimed") || strings.Contains(e.Msg, "dropped") {
			t.Errorf("dry run logs %q", e.Msg)
		}
		if strings.Contains(e.Msg, "would reclaim orphan staging partition") {
			would++
		}
	}
	if would != 1 {
		t.Errorf("%d lines say what would be reclaimed, want 1:\n%s", would, errOut.String())
	}
	if resp, err := srv.Client.Get(ctx, store.RawPrefix(keys.StagingPartition(orphan)), clientPrefix()); err != nil || resp.Count != 1 {
		t.Fatalf("the dry run changed the orphan: %v, %v", resp, err)
	}
}

// TestVersion: --version prints the build and exits 0 whatever else is
// missing; a GRAVELER_VERSION variable is not the flag; and a start logs
// the version.
func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"--version"}, noEnv, &out, &errOut); code != exitOK {
		t.Fatalf("--version: exit %d\n%s", code, errOut.String())
	}
	if got, want := strings.TrimSpace(out.String()), "cleaner "+buildinfo.Version+" ("+runtime.Version()+")"; got != want {
		t.Fatalf("--version printed %q, want %q", got, want)
	}
	out.Reset()
	errOut.Reset()
	env := func(k string) string {
		if k == "GRAVELER_VERSION" {
			return "1.2.3"
		}
		return ""
	}
	if code := run(t.Context(), []string{"--once"}, env, &out, &errOut); code != exitUsage || out.Len() != 0 {
		t.Fatalf("GRAVELER_VERSION acted as --version: exit %d, %q", code, out.String())
	}
	srv := etcdkvtest.NewServer(t)
	errOut.Reset()
	if code := run(t.Context(), []string{"--once", "--etcd-endpoints=" + srv.Endpoints()[0]}, noEnv, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d\n%s", code, errOut.String())
	}
	if !strings.Contains(errOut.String(), `"msg":"cleaner starting","version":"`+buildinfo.Version+`"`) {
		t.Fatalf("the start does not log the version:\n%s", errOut.String())
	}
}

// TestVersionFromLinker: the version a release build sets with -ldflags
// -X reaches --version (the Dockerfile sets it so).
func TestVersionFromLinker(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "cleaner")
	build := exec.CommandContext(t.Context(), goTool, "build", "-ldflags=-X graveler/buildinfo.Version=v9.8.7-test", "-o", bin, ".")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	b, err := exec.CommandContext(t.Context(), bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); !strings.HasPrefix(got, "cleaner v9.8.7-test (go") {
		t.Fatalf("--version printed %q", got)
	}
}
