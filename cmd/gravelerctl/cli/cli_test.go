package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"graveler/cmd/gravelerctl/cli"
	"graveler/server/daemon/daemontest"
)

func TestQuickstartFlow(t *testing.T) {
	srv := daemontest.Start(t, nil)
	c := ctl{t: t, base: []string{"--server", srv.Addr}}

	c.ok("repo", "create", "demo")
	c.fails(cli.ExitAlreadyExists, "repo", "create", "demo")
	c.ok("put", "demo", "main", "datasets/a.parquet", "--data", "hello")
	c.ok("put", "demo", "main", "datasets/b.parquet", "--data", "world")
	if out := c.ok("status", "demo", "main"); !strings.Contains(out, "+ datasets/a.parquet") {
		t.Fatalf("status: %s", out)
	}
	out := c.ok("commit", "demo", "main", "-m", "add datasets")
	if !strings.Contains(out, "add datasets") || !strings.HasPrefix(out, "commit ") {
		t.Fatalf("commit output: %s", out)
	}
	c.fails(cli.ExitFailedPrecondition, "commit", "demo", "main", "-m", "nothing")
	c.ok("branch", "create", "demo", "experiment", "--source", "main")
	c.ok("put", "demo", "experiment", "datasets/c.parquet", "--data", "new")
	c.ok("commit", "demo", "experiment", "-m", "add c")
	c.ok("merge", "demo", "experiment", "main", "--no-ff")
	if out := c.ok("get", "demo", "main", "datasets/c.parquet"); out != "new" {
		t.Fatalf("get: %q", out)
	}
	log := c.ok("log", "demo", "main")
	if strings.Count(log, "commit ") != 4 || !strings.Contains(log, "Merge experiment into main") || !strings.Contains(log, "Merge: ") {
		t.Fatalf("log:\n%s", log)
	}
	if out := c.ok("ls", "demo", "main", "--delimiter", "/"); !strings.Contains(out, "datasets/") || !strings.Contains(out, "(prefix)") {
		t.Fatalf("ls: %s", out)
	}
	if out := c.ok("ls", "demo", "main", "--page-size", "1"); strings.Count(out, "datasets/") != 3 {
		t.Fatalf("ls paged: %s", out)
	}

	// -o json: one object per line.
	out = c.ok("-o", "json", "branch", "list", "demo")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("json branches: %q", out)
	}
	var b struct {
		Name     string `json:"name"`
		CommitID string `json:"commit_id"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &b); err != nil || b.Name != "repositories/demo/branches/experiment" || len(b.CommitID) != 64 {
		t.Fatalf("json branch %q: %+v %v", lines[0], b, err)
	}

	// Exit codes by class.
	c.fails(cli.ExitNotFound, "get", "demo", "main", "nope")
	c.fails(cli.ExitNotFound, "repo", "get", "nosuch")
	c.fails(cli.ExitUsage, "repo", "create")
	c.fails(cli.ExitInvalidArgument, "repo", "create", "Bad_Name")
	c.fails(cli.ExitUsage, "--nosuchflag")
	errOut := c.fails(cli.ExitAborted, "reset-hard", "demo", "experiment", "main", "--etag", strings.Repeat("0", 64))
	if !strings.Contains(errOut, "BRANCH_HEAD_MOVED") {
		t.Fatalf("stderr: %s", errOut)
	}
	c.ok("tag", "create", "demo", "v1", "main")
	c.fails(cli.ExitAlreadyExists, "tag", "create", "demo", "v1", "main")

	// Bulk put from JSON lines, dump, restore into a new repository.
	dir := t.TempDir()
	var bulk strings.Builder
	for i := range 1200 {
		fmt.Fprintf(&bulk, `{"key": "bulk/%04d", "data": "d%d"}`+"\n", i, i)
	}
	bulkFile := filepath.Join(dir, "bulk.jsonl")
	if err := os.WriteFile(bulkFile, []byte(bulk.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := c.run("", "--progress", "put-bulk", "demo", "main", bulkFile)
	if code != 0 || !strings.Contains(out, "staged 1200 entries") || !strings.Contains(errOut, "put: ") {
		t.Fatalf("put-bulk: %d %q %q", code, out, errOut)
	}
	c.ok("commit", "demo", "main", "-m", "bulk")
	if out := c.ok("get", "demo", "main", "bulk/1199"); out != "d1199" {
		t.Fatalf("bulk entry: %q", out)
	}
	dump := filepath.Join(dir, "dump.jsonl")
	c.ok("dump", "demo", "--file", dump)
	code, out, errOut = c.run("", "--progress", "restore", "demo2", dump, "--create")
	if code != 0 || !strings.Contains(out, "restored") || !strings.Contains(errOut, "restore: ") {
		t.Fatalf("restore: %d %q %q", code, out, errOut)
	}
	if a, b := c.ok("-o", "json", "branch", "get", "demo", "main"), c.ok("-o", "json", "branch", "get", "demo2", "main"); strings.ReplaceAll(a, "demo/", "demo2/") != b {
		t.Fatalf("restored main differs:\n%s\n%s", a, b)
	}
	c.ok("health")
}
