package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {90, 90 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0.5, time.Millisecond}} {
		if got := percentile(d, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %v", got)
	}
	if got := percentile(d[:1], 99); got != time.Millisecond {
		t.Errorf("p99 of one sample = %v", got)
	}
}

func TestSummarizeMergesWorkers(t *testing.T) {
	a, b := newRecorder(), newRecorder()
	for i := range 10 {
		a.observe("put", time.Duration(i+1)*time.Millisecond, nil)
		b.observe("put", time.Duration(i+11)*time.Millisecond, nil)
	}
	b.observe("put", time.Second, errors.New("boom"))
	b.observe("get", time.Second, errors.New("boom"))
	stats := summarize(2*time.Second, a, b)
	put, ok := find(stats, "put")
	if !ok || put.Count != 20 || put.ErrorCount() != 1 || put.Max != 20*time.Millisecond || put.P50 != 10*time.Millisecond {
		t.Fatalf("put stats %+v", put)
	}
	if put.Throughput() != 10 {
		t.Fatalf("throughput %v, want 10/s", put.Throughput())
	}
	get, ok := find(stats, "get")
	if !ok || get.Count != 0 || get.Errors["other"] != 1 {
		t.Fatalf("get stats %+v", get)
	}
}

func TestKeysAreUniqueAndSized(t *testing.T) {
	w := workload{KeySize: 40}
	seen := map[string]bool{}
	for worker := range 3 {
		for seq := range 100 {
			k := string(w.key("p", worker, seq))
			if len(k) != 40 || seen[k] {
				t.Fatalf("key %q: length %d, duplicate %v", k, len(k), seen[k])
			}
			seen[k] = true
		}
	}
}

func TestParseFlags(t *testing.T) {
	c, err := parseFlags([]string{"--embedded", "--writers", "1,16,64", "--scenario", "reads"}, io.Discard)
	if err != nil || len(c.writers) != 3 || c.writers[2] != 64 || c.scenario != "reads" {
		t.Fatalf("parse: %+v, %v", c, err)
	}
	for _, args := range [][]string{
		{"--embedded", "--scenario", "nope"},
		{"--embedded", "--writers", "1,x"},
		{"--scenario", "reads"},
		{"--baseline-only"},
		{"--embedded", "--duration", "0s"},
		{"--server", "127.0.0.1:7070", "--etcd-pid", "x"},
		{"--server", "127.0.0.1:7070", "--server-pid", "0"},
		{"--embedded", "--etcd-pid", "1"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

// TestBaselineAgainstEmbeddedEtcd runs the raw-etcd half end to end on a
// real embedded etcd and checks it reports the figures it promises.
func TestBaselineAgainstEmbeddedEtcd(t *testing.T) {
	var out bytes.Buffer
	c, err := parseFlags([]string{"--embedded", "--embedded-unsafe-no-fsync", "--baseline-only", "--writers", "1,4",
		"--duration", "300ms", "--scenario", "staged-writes"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), c, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	s := out.String()
	re := regexp.MustCompile(`(?m)^\s*etcd\.put\s+(\d+)\s+0\s+\d+\s+\S+\s+\S+\s+\S+\s+\S+\s*$`)
	m := re.FindAllStringSubmatch(s, -1)
	if len(m) != 2 {
		t.Fatalf("want two etcd.put rows (1 and 4 writers), got %d:\n%s", len(m), s)
	}
	for _, row := range m {
		if row[1] == "0" {
			t.Fatalf("no successful puts:\n%s", s)
		}
	}
	if !strings.Contains(s, "raw etcd, 4 writers") {
		t.Fatalf("missing the 4-writer run:\n%s", s)
	}
}

// --cpuprofile writes a profile of the run.
func TestCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	c, err := parseFlags([]string{"--embedded", "--embedded-unsafe-no-fsync", "--baseline-only", "--writers", "2",
		"--duration", "200ms", "--cpuprofile", path}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), c, io.Discard); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("profile %s: %v, %v", path, fi, err)
	}
}

// TestDocNamesEveryScenario: the package doc lists every scenario --scenario
// accepts, so a new one is not left for readers of the code to find.
func TestDocNamesEveryScenario(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, _, ok := strings.Cut(string(src), "\npackage main")
	if !ok {
		t.Fatal("main.go has no package clause")
	}
	i := strings.Index(doc, "// Scenarios:")
	if i < 0 {
		t.Fatal("the package doc has no \"Scenarios:\" list")
	}
	list, _, _ := strings.Cut(doc[i:], ". ")
	named := regexp.MustCompile(`[a-z]+(?:-[a-z]+)*`).FindAllString(list, -1)
	for _, s := range scenarios {
		found := false
		for _, n := range named {
			found = found || n == s
		}
		if !found {
			t.Errorf("the package doc's scenario list does not name %q", s)
		}
	}
}

// TestParseFlagsExplainsBadDuration: a duration without a unit says what
// a duration looks like, not the flag package's "parse error".
func TestParseFlagsExplainsBadDuration(t *testing.T) {
	_, err := parseFlags([]string{"--embedded", "--duration", "10"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `invalid value "10" for flag -duration: not a duration (use a unit`) {
		t.Fatalf("--duration 10: %v", err)
	}
}

// TestParseFlagsNamesEachFlagAtFault: each bad count or size is refused
// naming its flag and value, not as "counts, sizes and --duration".
func TestParseFlagsNamesEachFlagAtFault(t *testing.T) {
	_, err := parseFlags([]string{"--embedded", "--committers", "0", "--duration", "0s", "--warmup", "-1s"}, io.Discard)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"--committers=0 must be above 0", "--duration=0s must be above 0", "--warmup=-1s must not be negative"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "--pairs") {
		t.Errorf("%q names --pairs, which is not at fault", err)
	}
}

// TestParseFlagsRefusesSizesOverTheServersLimits: a key or value data size
// the server refuses on every write is a bad flag naming the limit; the
// limits themselves are accepted.
func TestParseFlagsRefusesSizesOverTheServersLimits(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--key-size", "1025"}, "--key-size=1025 is over the server's limit on a key, 1024 bytes"},
		{[]string{"--value-size", "524289"}, "--value-size=524289 is over the server's limit on a value's data, 524288 bytes"},
	} {
		if _, err := parseFlags(append([]string{"--embedded"}, tc.args...), io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
	if _, err := parseFlags([]string{"--embedded", "--key-size", "1024", "--value-size", "524288"}, io.Discard); err != nil {
		t.Errorf("sizes at the limits: %v", err)
	}
}
