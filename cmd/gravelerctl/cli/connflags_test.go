package cli_test

import (
	"strings"
	"testing"

	"graveler/cmd/gravelerctl/cli"
)

// refused is an address that refuses at once: a usage check must come first.
var refused = []string{"--server", "127.0.0.1:1"}

// A connection variable whose value the matching flag refuses is refused
// too (exit 2, naming the variable and the value), not read as 0 or false:
// GRAVELER_TIMEOUT=30 and GRAVELER_CONNECT_TIMEOUT=5 (no unit) would turn
// both bounds off, so a server that accepts and never answers would hang
// the command for ever; GRAVELER_MAX_REQUEST_SIZE=4MiB would turn the size
// check off; GRAVELER_INSECURE=yes would be plaintext.
func TestBadConnectionEnvIsUsageError(t *testing.T) {
	for _, tc := range []struct{ name, value string }{
		{"GRAVELER_TIMEOUT", "30"},
		{"GRAVELER_TIMEOUT", "abc"},
		{"GRAVELER_CONNECT_TIMEOUT", "5"},
		{"GRAVELER_MAX_REQUEST_SIZE", "4MiB"},
		{"GRAVELER_INSECURE", "yes"},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			t.Setenv(tc.name, tc.value)
			errOut := ctl{t: t, base: refused}.fails(cli.ExitUsage, "repo", "list")
			if !strings.Contains(errOut, tc.name) || !strings.Contains(errOut, tc.value) {
				t.Errorf("stderr does not name %s and %q: %s", tc.name, tc.value, errOut)
			}
		})
	}
	// The flag, given, overrides the variable.
	t.Setenv("GRAVELER_TIMEOUT", "30")
	ctl{t: t, base: append([]string{"--timeout", "1s"}, refused...)}.fails(cli.ExitUnavailable, "repo", "list")
}

// A negative --timeout, --connect-timeout or --max-request-size (or its
// variable) is a usage error naming it: only 0 means "no bound", and a
// negative value must not silently mean it too.
func TestNegativeBoundIsUsageError(t *testing.T) {
	for _, flag := range []string{"timeout", "connect-timeout", "max-request-size"} {
		value := "-1s"
		if flag == "max-request-size" {
			value = "-1"
		}
		t.Run(flag, func(t *testing.T) {
			errOut := ctl{t: t, base: append([]string{"--" + flag + "=" + value}, refused...)}.fails(cli.ExitUsage, "repo", "list")
			if !strings.Contains(errOut, "--"+flag) {
				t.Errorf("stderr does not name --%s: %s", flag, errOut)
			}
			name := "GRAVELER_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
			t.Setenv(name, value)
			errOut = ctl{t: t, base: refused}.fails(cli.ExitUsage, "repo", "list")
			if !strings.Contains(errOut, name) {
				t.Errorf("stderr does not name %s: %s", name, errOut)
			}
		})
	}
}

// A --server (or GRAVELER_SERVER) that is no address is a usage error
// naming it (exit 2), not "unavailable, retry later" (exit 7), which a
// retrying script would retry for ever. The forms that are addresses,
// host:port and gRPC's unix: and dns: targets, still reach the dial.
func TestMalformedServerIsUsageError(t *testing.T) {
	for _, server := range []string{
		"http://127.0.0.1:17080", "127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1", "127.0.0.1:", ":7070",
		"127.0.0.1:http", "", "unix:", "dns:///", "dns:///127.0.0.1:99999",
	} {
		t.Run(server, func(t *testing.T) {
			errOut := ctl{t: t, base: []string{"--server", server}}.fails(cli.ExitUsage, "repo", "list")
			if !strings.Contains(errOut, "--server") {
				t.Errorf("stderr does not name --server: %s", errOut)
			}
		})
	}
	t.Run("GRAVELER_SERVER", func(t *testing.T) {
		t.Setenv("GRAVELER_SERVER", "http://127.0.0.1:17080")
		errOut := ctl{t: t}.fails(cli.ExitUsage, "repo", "list")
		if !strings.Contains(errOut, "GRAVELER_SERVER") {
			t.Errorf("stderr does not name GRAVELER_SERVER: %s", errOut)
		}
	})
	for _, server := range []string{"127.0.0.1:1", "[::1]:1", "localhost:1", "dns:///127.0.0.1:1", "unix:" + t.TempDir() + "/none.sock"} {
		t.Run(server, func(t *testing.T) {
			ctl{t: t, base: []string{"--server", server}}.fails(cli.ExitUnavailable, "repo", "list")
		})
	}
}

// --tls-cert without --tls-key, or the reverse (flags or variables), is a
// usage error naming the missing one (exit 2), not a failure to open an
// empty file name (exit 1).
func TestHalfClientCertificateIsUsageError(t *testing.T) {
	for given, missing := range map[string]string{"--tls-cert": "--tls-key", "--tls-key": "--tls-cert"} {
		t.Run(given, func(t *testing.T) {
			errOut := ctl{t: t, base: append([]string{given, "/nonexistent/file.pem"}, refused...)}.fails(cli.ExitUsage, "repo", "list")
			if !strings.Contains(errOut, missing) {
				t.Errorf("stderr does not name %s: %s", missing, errOut)
			}
		})
	}
	t.Setenv("GRAVELER_TLS_CERT", "/nonexistent/cert.pem")
	errOut := ctl{t: t, base: refused}.fails(cli.ExitUsage, "repo", "list")
	if !strings.Contains(errOut, "--tls-key") {
		t.Errorf("stderr does not name --tls-key: %s", errOut)
	}
}

// The connection settings are checked when connecting, so version, which
// prints the client's version also without a server, prints it with a
// refused setting too, and then fails with the usage error.
func TestVersionWithBadConnectionSettingPrintsClient(t *testing.T) {
	code, out, errOut := ctl{t: t, base: []string{"--server", "http://127.0.0.1:17080"}}.run("", "version")
	if code != cli.ExitUsage || !strings.Contains(out, "client: ") || !strings.Contains(errOut, "--server") {
		t.Fatalf("exit %d, want 2 after the client's version\nstdout: %s\nstderr: %s", code, out, errOut)
	}
}
