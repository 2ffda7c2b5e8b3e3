package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"graveler/buildinfo"
	"graveler/server"
	"graveler/server/daemon"
)

// TestVersionFlag: --version prints the build and exits 0, even beside a
// configuration that would not start; GRAVELER_VERSION is not the flag.
func TestVersionFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"--version", "--listen=nocolon"}, &out, &errOut); code != 0 {
		t.Fatalf("--version: exit %d\n%s", code, errOut.String())
	}
	if got, want := strings.TrimSpace(out.String()), "gravelerd "+buildinfo.Version+" ("+runtime.Version()+")"; got != want {
		t.Fatalf("--version printed %q, want %q", got, want)
	}
	env := func(k string) string {
		if k == "GRAVELER_VERSION" {
			return "true"
		}
		return ""
	}
	if _, err := parse(nil, env, io.Discard); err != nil {
		t.Fatalf("GRAVELER_VERSION set: %v", err)
	}
}

// TestOperatorFlags: log level, access log, slow-call threshold and pprof
// come from flags or the environment, with documented defaults, and bad
// values are refused.
func TestOperatorFlags(t *testing.T) {
	c, err := parse(nil, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.LogLevel != zapcore.InfoLevel || c.AccessLog != server.AccessLogSampled || c.SlowCallThreshold != time.Second || c.EnablePprof {
		t.Fatalf("defaults: level %v, access log %v, slow %v, pprof %v", c.LogLevel, c.AccessLog, c.SlowCallThreshold, c.EnablePprof)
	}
	env := map[string]string{"GRAVELER_LOG_LEVEL": "warn", "GRAVELER_ACCESS_LOG": "off", "GRAVELER_ENABLE_PPROF": "true"}
	c, err = parse([]string{"--access-log=all", "--slow-call-threshold=250ms"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.LogLevel != zapcore.WarnLevel || c.AccessLog != server.AccessLogAll || c.SlowCallThreshold != 250*time.Millisecond || !c.EnablePprof {
		t.Fatalf("from flags and env: level %v, access log %v, slow %v, pprof %v", c.LogLevel, c.AccessLog, c.SlowCallThreshold, c.EnablePprof)
	}
	for _, args := range [][]string{{"--log-level=loud"}, {"--log-level=fatal"}, {"--access-log=some"}} {
		if _, err := parse(args, noEnv, io.Discard); err == nil {
			t.Errorf("%v accepted", args)
		} else if args[0] == "--log-level=fatal" && !errors.Is(err, daemon.ErrInvalidConfig) {
			t.Errorf("%v: %v", args, err)
		}
	}
	var help bytes.Buffer
	if code := run([]string{"--help"}, io.Discard, &help); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, f := range []string{"version", "log-level", "access-log", "slow-call-threshold", "enable-pprof"} {
		if !strings.Contains(help.String(), "  -"+f) {
			t.Errorf("--help does not list -%s", f)
		}
	}
}

func noEnv(string) string { return "" }

// TestBadDurationSaysWhatADurationIs: a duration without a unit, as a flag
// or in its variable, exits 2 saying what a duration looks like instead of
// the flag package's "parse error".
func TestBadDurationSaysWhatADurationIs(t *testing.T) {
	var errOut bytes.Buffer
	if code := run([]string{"--shutdown-timeout=5x"}, io.Discard, &errOut); code != 2 ||
		!strings.Contains(errOut.String(), `gravelerd: invalid value "5x" for flag -shutdown-timeout: not a duration (use a unit: 500ms, 5s, 2m)`) {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	env := func(k string) string {
		if k == "GRAVELER_ETCD_DIAL_TIMEOUT" {
			return "5"
		}
		return ""
	}
	if _, err := parse(nil, env, io.Discard); err == nil || err.Error() != `GRAVELER_ETCD_DIAL_TIMEOUT="5": not a duration (use a unit: 500ms, 5s, 2m)` {
		t.Fatalf("GRAVELER_ETCD_DIAL_TIMEOUT=5: %v", err)
	}
}

// TestEmptyTokensFileSaysWhatItMustHold: gravelerd started with an empty
// --tokens-file exits 1 saying what the file must hold, and speaks of a
// Kubernetes Secret only as a hint for a file mounted from one.
func TestEmptyTokensFileSaysWhatItMustHold(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.txt")
	if err := os.WriteFile(tokens, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	code := run([]string{"--tokens-file=" + tokens, "--data-dir=" + filepath.Join(dir, "data"), "--listen=127.0.0.1:0"}, io.Discard, &errOut)
	msg := errOut.String()
	if code != 1 || !strings.Contains(msg, tokens+" holds no token") || !strings.Contains(msg, "it must hold one token per line") {
		t.Fatalf("exit %d, stderr %q", code, msg)
	}
	if before, _, _ := strings.Cut(msg, "if it is mounted from a Kubernetes Secret"); strings.Contains(before, "Secret") {
		t.Fatalf("stderr %q speaks of a Secret as if the file were one", msg)
	}
}
