// Package docs_test keeps the operator documentation honest: every error
// reason the server can return and every metric the code defines must be
// documented in operations.md, every metric it documents must exist, and
// every relative link in docs/ and the README must resolve.
package docs_test

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler/staging"
	"graveler/keys"
)

const repoRoot = ".."

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var reasonRE = regexp.MustCompile(`\{[^{}]*, "([A-Z][A-Z_]+)"\}`)

// TestErrorReasonsDocumented checks that every ErrorInfo reason of the
// server's error mapping has a row in the reasons table.
func TestErrorReasonsDocumented(t *testing.T) {
	src := read(t, filepath.Join(repoRoot, "server", "errors.go"))
	doc := read(t, "operations.md")
	matches := reasonRE.FindAllStringSubmatch(src, -1)
	if len(matches) < 20 {
		t.Fatalf("found only %d reasons in server/errors.go; has the mapping moved?", len(matches))
	}
	for _, m := range matches {
		if !strings.Contains(doc, "`"+m[1]+"`") {
			t.Errorf("reason %s (server/errors.go) is not documented in operations.md", m[1])
		}
	}
}

var (
	// metricOptsRE matches the options literal of every Prometheus metric
	// the code defines, up to its first closing brace (the name comes
	// before any buckets).
	metricOptsRE = regexp.MustCompile(`prometheus\.(?:Counter|Gauge|Histogram|Summary)Opts\{[^}]*`)
	metricNameRE = regexp.MustCompile(`\bName:\s*"([a-zA-Z_:][a-zA-Z0-9_:]*)"`)
	metricDocRE  = regexp.MustCompile("`(graveler_[a-z0-9_]+)")
	// metricCellRE is a metric name in the first cell of a metrics table,
	// labels ({...}) aside.
	metricCellRE = regexp.MustCompile("`([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\\{[^`]*\\})?`")
)

// definedMetrics returns the metrics defined in the module's non-test Go
// files, whatever their prefix, under the names they are exported as.
func definedMetrics(t *testing.T) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		for _, opts := range metricOptsRE.FindAllString(read(t, path), -1) {
			// Namespace and Subsystem would prefix the name: the
			// literal alone would not be what Prometheus scrapes.
			if strings.Contains(opts, "Namespace:") || strings.Contains(opts, "Subsystem:") {
				t.Errorf("%s: a metric with Namespace or Subsystem; teach definedMetrics to join them: %s", path, opts)
				continue
			}
			m := metricNameRE.FindStringSubmatch(opts)
			if m == nil {
				t.Errorf("%s: a metric whose name is not a string literal: %s", path, opts)
				continue
			}
			if !slices.Contains(names, m[1]) {
				names = append(names, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// tabledMetrics returns the metric names in the first column of
// operations.md's tables of Graveler's metrics (header "| metric | what it
// ... | alert when |"; etcd's own metrics have a two-column table).
func tabledMetrics(doc string) []string {
	var names []string
	inTable := false
	for _, line := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "| metric | what it "):
			inTable = true
		case !strings.HasPrefix(line, "|"):
			inTable = false
		case inTable && !strings.HasPrefix(line, "| ---"):
			cell, _, _ := strings.Cut(strings.TrimPrefix(line, "|"), "|")
			for _, m := range metricCellRE.FindAllStringSubmatch(cell, -1) {
				names = append(names, m[1])
			}
		}
	}
	return names
}

// TestMetricsDocumented checks operations.md against the metrics the code
// defines, both ways: every metric has a row in a metrics table, every
// metric a table lists exists, and so does every graveler_ metric the text
// names anywhere.
func TestMetricsDocumented(t *testing.T) {
	defined := definedMetrics(t)
	if len(defined) < 20 {
		t.Fatalf("found only %d metric definitions; have they moved?", len(defined))
	}
	doc := read(t, "operations.md")
	tabled := tabledMetrics(doc)
	if len(tabled) < 20 {
		t.Fatalf("found only %d metrics in operations.md's tables; have they moved?", len(tabled))
	}
	for _, name := range defined {
		if !slices.Contains(tabled, name) {
			t.Errorf("metric %s is defined but has no row in operations.md's metric tables", name)
		}
	}
	for _, name := range tabled {
		if !slices.Contains(defined, name) {
			t.Errorf("operations.md's metric tables list %s, which no code defines", name)
		}
	}
	for _, m := range metricDocRE.FindAllStringSubmatch(doc, -1) {
		name := m[1]
		if name == keys.PartitionDeleted {
			continue // the cleaner's partition, not a metric
		}
		if !slices.Contains(defined, name) {
			t.Errorf("operations.md documents metric %s, which no code defines", name)
		}
	}
}

var (
	kvOpRE   = regexp.MustCompile(`\bobserve\("([a-z_]+)"`)
	backtick = regexp.MustCompile("`([^`]+)`")
)

// TestKVOpsDocumented checks the op values of graveler_kv_ops_total listed
// in operations.md against those etcdkv emits, both ways, so that an alert
// written on a listed op matches something.
func TestKVOpsDocumented(t *testing.T) {
	dir := filepath.Join(repoRoot, "etcdkv")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var emitted []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		for _, m := range kvOpRE.FindAllStringSubmatch(read(t, f), -1) {
			if !slices.Contains(emitted, m[1]) {
				emitted = append(emitted, m[1])
			}
		}
	}
	if len(emitted) < 10 {
		t.Fatalf("found only %d kv ops in etcdkv; has observe moved?", len(emitted))
	}
	var row string
	for _, line := range strings.Split(read(t, "operations.md"), "\n") {
		if strings.HasPrefix(line, "| `graveler_kv_ops_total") {
			row = line
		}
	}
	cells := strings.Split(row, "|")
	if len(cells) < 4 {
		t.Fatal("operations.md has no graveler_kv_ops_total row")
	}
	var listed []string
	for _, m := range backtick.FindAllStringSubmatch(cells[2], -1) {
		listed = append(listed, m[1])
	}
	for _, op := range emitted {
		if !slices.Contains(listed, op) {
			t.Errorf("etcdkv counts op %q, which operations.md's graveler_kv_ops_total row does not list", op)
		}
	}
	for _, op := range listed {
		if !slices.Contains(emitted, op) {
			t.Errorf("operations.md lists op %q of graveler_kv_ops_total, which etcdkv never counts", op)
		}
	}
}

var linkRE = regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)

// TestLinks checks the relative links of docs/ and the README.
func TestLinks(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(repoRoot, "README.md"))
	for _, f := range files {
		for _, m := range linkRE.FindAllStringSubmatch(read(t, f), -1) {
			target := m[1]
			if strings.Contains(target, "://") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				t.Errorf("%s links to %s: %v", f, target, err)
			}
		}
	}
}

// TestCLIExamples runs every gravelerctl command line of the docs with
// --help appended: cobra then checks the command path and the flags (an
// unknown command or flag exits non-zero) without calling a server.
func TestCLIExamples(t *testing.T) {
	var lines [][]string
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		for _, line := range strings.Split(read(t, f), "\n") {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "gravelerctl ") && !strings.ContainsAny(line, `"'$|<>`) {
				lines = append(lines, strings.Fields(line)[1:])
			}
		}
	}
	if len(lines) < 3 {
		t.Fatalf("found %d gravelerctl examples; expected the dump/restore ones at least", len(lines))
	}
	bin := filepath.Join(t.TempDir(), "gravelerctl")
	build := exec.Command("go", "build", "-o", bin, "./cmd/gravelerctl")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/gravelerctl: %v\n%s", err, out)
	}
	for _, args := range lines {
		cmd := exec.Command(bin, append(slices.Clone(args), "--help")...)
		cmd.Env = []string{"HOME=" + t.TempDir()}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("gravelerctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// The check can fail: a misspelt flag is rejected.
	if err := exec.Command(bin, "dump", "sales", "--fil", "x", "--help").Run(); err == nil {
		t.Errorf("gravelerctl accepted an unknown flag with --help; the examples are not checked")
	}
}

// TestLayoutOnEtcd writes one key of every kind in keys.Layout through the
// etcd store and reads the raw etcd keyspace: each key sits at
// $ROOT/<partition element>/<key> (etcdkv.PartitionElement: '/' in the
// name written ':'), the path the tree in key-layout.md shows, and nothing
// else is written.
func TestLayoutOnEtcd(t *testing.T) {
	ctx := t.Context()
	srv := etcdkvtest.NewServer(t)
	store := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	sample := strings.NewReplacer(
		keys.PlaceholderRepo, "sales",
		keys.PlaceholderUniqueID, "u1",
		keys.PlaceholderStagingToken, "tok1",
		keys.PlaceholderBranch, "main",
		keys.PlaceholderCommitID, "c0ffee",
		keys.PlaceholderTag, "v1",
		keys.PlaceholderEntryKey, "tables/a/part-0",
	)
	var want []string
	for _, k := range keys.Layout() {
		p, key := sample.Replace(k.Partition), sample.Replace(k.Key)
		if err := store.Set(ctx, []byte(p), []byte(key), []byte("v")); err != nil {
			t.Fatalf("set %s %s: %v", p, key, err)
		}
		want = append(want, etcdkv.DefaultPrefix+"/"+etcdkv.PartitionElement([]byte(p))+"/"+key)
	}
	// And the store's write fence, outside every partition.
	want = append(want, store.FenceKey())
	resp, err := srv.Client.Get(ctx, etcdkv.DefaultPrefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, kv := range resp.Kvs {
		got = append(got, string(kv.Key))
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("raw etcd keys:\n%s\nwant (the layout's paths):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

var testNameRE = regexp.MustCompile("`((?:Test|test)[A-Za-z0-9_]+)`")

// TestCorrectnessTableNamesRealTests checks that every test correctness.md
// names for a compare-and-swap path is a test function of the module, so
// the table cannot silently outlive a renamed or removed test.
func TestCorrectnessTableNamesRealTests(t *testing.T) {
	doc := read(t, "correctness.md")
	names := testNameRE.FindAllStringSubmatch(doc, -1)
	if len(names) < 20 {
		t.Fatalf("correctness.md names only %d tests; has the table moved?", len(names))
	}
	defined := map[string]bool{}
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != repoRoot {
			return filepath.SkipDir
		}
		// The kv conformance suite lives in package kvtest's ordinary files.
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") && !strings.Contains(filepath.ToSlash(path), "/kv/kvtest/") {
			return nil
		}
		for _, m := range testFuncRE.FindAllStringSubmatch(read(t, path), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range names {
		if !defined[m[1]] {
			t.Errorf("correctness.md names %s, which no test file defines", m[1])
		}
	}
}

var testFuncRE = regexp.MustCompile(`(?m)^func ((?:Test|test)[A-Za-z0-9_]+)\(`)

// TestFencedBatchSizeRangeDocumented checks that the tuning table gives
// --fenced-batch-size the range gravelerd accepts.
func TestFencedBatchSizeRangeDocumented(t *testing.T) {
	doc := read(t, "operations.md")
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "| `--fenced-batch-size` |") {
			if want := fmt.Sprintf("1 to %d", staging.MaxFencedBatchSize); !strings.Contains(line, want) {
				t.Errorf("operations.md's --fenced-batch-size row does not say %q: %s", want, line)
			}
			return
		}
	}
	t.Error("operations.md has no --fenced-batch-size row")
}
