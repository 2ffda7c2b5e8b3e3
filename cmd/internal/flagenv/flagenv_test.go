package flagenv

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"graveler/etcdkv"
)

func TestParse(t *testing.T) {
	env := map[string]string{"GRAVELER_ETCD_PREFIX": "/env", "GRAVELER_MAX_KEYS": "7", "GRAVELER_VERSION": "1.2"}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	prefix := fs.String("etcd-prefix", "/graveler", "")
	maxKeys := fs.Int("max-keys", 0, "")
	version := fs.Bool("version", false, "")
	if err := Parse(fs, []string{"--max-keys", "9"}, func(k string) string { return env[k] }, "version"); err != nil {
		t.Fatal(err)
	}
	if *prefix != "/env" || *maxKeys != 9 || *version {
		t.Fatalf("prefix %q max-keys %d version %v: the variable sets the default, the flag wins, skipped flags ignore theirs", *prefix, *maxKeys, *version)
	}

	env["GRAVELER_MAX_KEYS"] = "many"
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Int("max-keys", 0, "")
	err := Parse(fs, []string{"--help"}, func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), `GRAVELER_MAX_KEYS="many"`) {
		t.Fatalf("bad variable with --help: %v", err)
	}
}

func TestEndpoints(t *testing.T) {
	if got := Endpoints(" a:1, ,b:2,"); !slices.Equal(got, []string{"a:1", "b:2"}) {
		t.Fatalf("%q", got)
	}
	if got := Endpoints(""); got != nil {
		t.Fatalf("%q", got)
	}
}

// TestEtcdEndpointsRefusesBlankList: an empty value gives no endpoints,
// but a value that names none (blanks, commas) is an error naming the flag.
func TestEtcdEndpointsRefusesBlankList(t *testing.T) {
	if got, err := EtcdEndpoints(""); got != nil || err != nil {
		t.Fatalf("empty: %q, %v", got, err)
	}
	for _, v := range []string{" ", ",", " , "} {
		if got, err := EtcdEndpoints(v); err == nil || !strings.Contains(err.Error(), "--etcd-endpoints") {
			t.Errorf("%q: %q, %v", v, got, err)
		}
	}
}

// TestEtcdTLSRefusesPlaintextEndpoint: TLS files with an http:// endpoint
// are refused naming the flags given; https:// or no scheme with them, and
// any endpoint without them, are accepted.
func TestEtcdTLSRefusesPlaintextEndpoint(t *testing.T) {
	err := EtcdTLS([]string{"https://a:1", "HTTP://b:2"}, "ca", "", "")
	if err == nil || !strings.Contains(err.Error(), "--etcd-ca") || strings.Contains(err.Error(), "--etcd-cert") {
		t.Fatalf("ca with http://: %v", err)
	}
	for _, tc := range []struct {
		endpoints []string
		ca        string
	}{{[]string{"https://a:1", "b:2"}, "ca"}, {[]string{"http://a:1"}, ""}, {[]string{"https://a:1"}, ""}} {
		if err := EtcdTLS(tc.endpoints, tc.ca, "", ""); err != nil {
			t.Errorf("%v ca %q: %v", tc.endpoints, tc.ca, err)
		}
	}
}

// TestEtcdPrefix: a prefix starts with '/' and names more than slashes.
func TestEtcdPrefix(t *testing.T) {
	for _, p := range []string{"/graveler", "/a/"} {
		if err := EtcdPrefix(p); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
	for _, p := range []string{"", "/", "//", "graveler"} {
		if err := EtcdPrefix(p); err == nil || !strings.Contains(err.Error(), "--etcd-prefix") {
			t.Errorf("%q: %v", p, err)
		}
	}
}

// TestEtcdEndpointsRefusesMalformed: each endpoint must have the shape the
// etcd client dials (host:port, http(s)://host:port, unix(s)://path); a
// name without a port or an unknown scheme is refused, naming the flag.
func TestEtcdEndpointsRefusesMalformed(t *testing.T) {
	good := "a:1,http://b:2379,HTTPS://c:2379/,[::1]:2379,unix:///run/etcd.sock,unixs://etcd.sock:0"
	if got, err := EtcdEndpoints(good); err != nil || len(got) != 6 {
		t.Fatalf("%q: %q, %v", good, got, err)
	}
	for _, e := range []string{"localhost", "ftp://127.0.0.1:1", "http://a", "http://a:port", "a:0", ":2379", "http://a:1/v3", "unix://", "http://a:1,b"} {
		if got, err := EtcdEndpoints(e); err == nil || !strings.Contains(err.Error(), "--etcd-endpoints") {
			t.Errorf("%q: %q, %v", e, got, err)
		}
	}
}

// TestParseExplainsBadDuration: a duration that does not parse, on the
// command line or in its variable, is refused saying what a duration looks
// like instead of the flag package's bare "parse error"; the help still
// names the type and the default, and good values still parse.
func TestParseExplainsBadDuration(t *testing.T) {
	newFS := func(help io.Writer) (*flag.FlagSet, *time.Duration) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(help)
		return fs, fs.Duration("shutdown-timeout", 30*time.Second, "bound on draining")
	}
	const want = "not a duration (use a unit: 500ms, 5s, 2m)"
	for _, v := range []string{"5x", "5", "1d", ""} {
		fs, _ := newFS(io.Discard)
		err := Parse(fs, []string{"--shutdown-timeout=" + v}, nil)
		if err == nil || err.Error() != `invalid value "`+v+`" for flag -shutdown-timeout: `+want+`; -h lists the flags` {
			t.Errorf("--shutdown-timeout=%s: %v", v, err)
		}
	}
	// Written as a duration but too long for one: a unit is no help.
	for _, v := range []string{"3000000h", "9999999999999s"} {
		fs, _ := newFS(io.Discard)
		err := Parse(fs, []string{"--shutdown-timeout=" + v}, nil)
		if err == nil || !strings.Contains(err.Error(), "out of range") || strings.Contains(err.Error(), "use a unit") {
			t.Errorf("--shutdown-timeout=%s: %v", v, err)
		}
	}
	fs, _ := newFS(io.Discard)
	env := map[string]string{"GRAVELER_SHUTDOWN_TIMEOUT": "5"}
	if err := Parse(fs, nil, func(k string) string { return env[k] }); err == nil || err.Error() != `GRAVELER_SHUTDOWN_TIMEOUT="5": `+want {
		t.Errorf("GRAVELER_SHUTDOWN_TIMEOUT=5: %v", err)
	}

	fs, d := newFS(io.Discard)
	env["GRAVELER_SHUTDOWN_TIMEOUT"] = "2m"
	if err := Parse(fs, nil, func(k string) string { return env[k] }); err != nil || *d != 2*time.Minute {
		t.Errorf("GRAVELER_SHUTDOWN_TIMEOUT=2m: %v, %v", *d, err)
	}
	fs, d = newFS(io.Discard)
	if err := Parse(fs, []string{"--shutdown-timeout", "500ms"}, nil); err != nil || *d != 500*time.Millisecond {
		t.Errorf("--shutdown-timeout 500ms: %v, %v", *d, err)
	}
	if _, ok := fs.Lookup("shutdown-timeout").Value.(durationValue); ok {
		t.Error("the flag keeps the wrapper after Parse")
	}

	var help strings.Builder
	fs, _ = newFS(&help)
	if err := Parse(fs, []string{"--help"}, nil); err != flag.ErrHelp {
		t.Fatalf("--help: %v", err)
	}
	if want := "Usage of t:\n  -shutdown-timeout duration\n    \tbound on draining (default 30s)\n"; help.String() != want {
		t.Errorf("help %q, want %q", help.String(), want)
	}
}

// TestEtcdFlagsNamesEachFlagAtFault: a half pair names the flag given and
// its value (never the password's), and every problem is reported.
func TestEtcdFlagsNamesEachFlagAtFault(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--etcd-endpoints=a:1", "--etcd-cert=c.pem"}, []string{`--etcd-cert="c.pem" given without --etcd-key`}},
		{[]string{"--etcd-endpoints=a:1", "--etcd-key=k.pem"}, []string{`--etcd-key="k.pem" given without --etcd-cert`}},
		{[]string{"--etcd-endpoints=a:1", "--etcd-username=ops"}, []string{`--etcd-username="ops" given without --etcd-password`}},
		{[]string{"--etcd-prefix=/", "--etcd-password=s3cret"}, []string{"--etcd-endpoints is required", "--etcd-prefix", "--etcd-password given without --etcd-username"}},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var cfg etcdkv.Config
		check := EtcdFlags(fs, &cfg)
		if err := Parse(fs, tc.args, nil); err != nil {
			t.Fatal(err)
		}
		err := check()
		for _, want := range tc.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%v: %v, want %q", tc.args, err, want)
			}
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%v: %q shows the password", tc.args, err)
		}
	}
}

// TestBadFlagPrintsNoHelp: a bad flag is returned, pointing at -h, and
// nothing is printed (the program prints the error once); -h prints the
// help, with or without a Usage of the program's own.
func TestBadFlagPrintsNoHelp(t *testing.T) {
	for _, own := range []bool{false, true} {
		var out strings.Builder
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(&out)
		fs.Int("n", 1, "a number")
		if own {
			fs.Usage = func() { fmt.Fprintln(fs.Output(), "own usage") }
		}
		for _, args := range [][]string{{"--nope"}, {"--n=x"}} {
			err := Parse(fs, args, nil)
			if err == nil || !strings.HasSuffix(err.Error(), "; -h lists the flags") || out.Len() != 0 {
				t.Errorf("own usage %v, %v: %v, printed %q", own, args, err, out.String())
			}
		}
		if err := Parse(fs, []string{"-h"}, func(string) string { return "" }); err != flag.ErrHelp {
			t.Fatalf("-h: %v", err)
		}
		want := "Usage of t:\n  -n int\n    \ta number (default 1)\n"
		if own {
			want = "own usage\n"
		}
		if out.String() != want {
			t.Errorf("own usage %v: -h printed %q, want %q", own, out.String(), want)
		}
		if fs.Output() != &out {
			t.Error("the output is not given back")
		}
	}
}
