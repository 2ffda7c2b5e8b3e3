package cli_test

import (
	"context"
	"fmt"
	"iter"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"graveler/cmd/gravelerctl/cli"
	"graveler/graveler"
	"graveler/server"
)

// fakeService keeps repositories in memory; every other method panics
// (nil interface), which the server reports as INTERNAL. It lets the CLI's
// output, paging and exit codes be tested without the storage stack.
type fakeService struct {
	server.Service
	mu    sync.Mutex
	repos map[graveler.RepositoryID]*graveler.Repository
}

func (f *fakeService) CreateRepository(ctx context.Context, id graveler.RepositoryID, ns graveler.StorageNamespace, def graveler.BranchID) (*graveler.RepositoryRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.repos[id]; ok {
		return nil, fmt.Errorf("fake: %w: %s", graveler.ErrRepositoryExists, id)
	}
	r := &graveler.Repository{StorageNamespace: ns, DefaultBranchID: def, State: graveler.RepositoryStateActive}
	f.repos[id] = r
	return &graveler.RepositoryRecord{RepositoryID: id, Repository: r}, nil
}

func (f *fakeService) GetRepository(ctx context.Context, id graveler.RepositoryID) (*graveler.RepositoryRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.repos[id]
	if !ok {
		return nil, fmt.Errorf("fake: %w: %s", graveler.ErrRepositoryNotFound, id)
	}
	return &graveler.RepositoryRecord{RepositoryID: id, Repository: r}, nil
}

func (f *fakeService) ListRepositories(ctx context.Context, opts graveler.ListOptions) iter.Seq2[*graveler.RepositoryRecord, error] {
	f.mu.Lock()
	var ids []graveler.RepositoryID
	for id := range f.repos {
		if string(id) > opts.After {
			ids = append(ids, id)
		}
	}
	f.mu.Unlock()
	slices.Sort(ids)
	return func(yield func(*graveler.RepositoryRecord, error) bool) {
		for _, id := range ids {
			r, err := f.GetRepository(ctx, id)
			if !yield(r, err) {
				return
			}
		}
	}
}

func startFake(t *testing.T, o server.GRPCOptions) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := server.NewGRPCServer(server.New(&fakeService{repos: map[graveler.RepositoryID]*graveler.Repository{}}, server.Config{StorageNamespaceRoot: "mem://fake"}), o)
	g.SetServing(true)
	go func() { _ = g.Server.Serve(lis) }()
	t.Cleanup(g.Server.Stop)
	return lis.Addr().String()
}

func TestOutputAndExitCodesOnFake(t *testing.T) {
	c := ctl{t: t, base: []string{"--server", startFake(t, server.GRPCOptions{})}}
	for i := range 7 {
		c.ok("repo", "create", fmt.Sprintf("repo-%d", i))
	}
	out := c.ok("repo", "list", "--page-size", "2")
	if strings.Count(out, "\n") != 8 || !strings.HasPrefix(out, "REPOSITORY") || !strings.Contains(out, "mem://fake/repo-3") {
		t.Fatalf("human list:\n%s", out)
	}
	out = c.ok("-o", "json", "repo", "list", "--page-size", "3")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 7 || !strings.Contains(lines[6], `"name":"repositories/repo-6"`) {
		t.Fatalf("json list:\n%s", out)
	}
	if out := c.ok("-o", "json", "repo", "get", "repo-2"); !strings.Contains(out, `"default_branch":"main"`) {
		t.Fatalf("json get: %s", out)
	}
	c.fails(cli.ExitAlreadyExists, "repo", "create", "repo-1")
	if errOut := c.fails(cli.ExitNotFound, "repo", "get", "nosuch"); !strings.Contains(errOut, "REPOSITORY_NOT_FOUND") {
		t.Fatalf("stderr: %s", errOut)
	}
	c.fails(cli.ExitInvalidArgument, "repo", "get", "Not_Valid")
	c.fails(cli.ExitUsage, "repo", "get")
	c.fails(cli.ExitUsage, "-o", "yaml", "repo", "list")
	c.fails(cli.ExitUsage, "reset", "repo-1", "main", "--key", "a", "--prefix", "b")
	// The fake does not implement branches: the server reports INTERNAL.
	if errOut := c.fails(cli.ExitError, "branch", "get", "repo-1", "main"); !strings.Contains(errOut, "request id") {
		t.Fatalf("stderr: %s", errOut)
	}
	c.ok("health")
}

func TestAuthAndUnavailableOnFake(t *testing.T) {
	addr := startFake(t, server.GRPCOptions{Tokens: server.NewTokens(map[string]string{"tok-1": "ci"})})
	ctl{t: t, base: []string{"--server", addr}}.fails(cli.ExitUnauthenticated, "repo", "list")
	ctl{t: t, base: []string{"--server", addr, "--token", "bad"}}.fails(cli.ExitUnauthenticated, "repo", "list")
	t.Setenv("GRAVELER_TOKEN", "tok-1")
	ctl{t: t, base: []string{"--server", addr}}.ok("repo", "list")

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	lis.Close()
	ctl{t: t, base: []string{"--server", closed, "--timeout", "300ms"}}.fails(cli.ExitUnavailable, "repo", "list")
}

func TestPutFromStdinAndBadBulkFile(t *testing.T) {
	c := ctl{t: t, base: []string{"--server", startFake(t, server.GRPCOptions{})}}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"key\": \"a\"}\nnot json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The first line is fine, the second is not: invalid input (the
	// command line was right) naming the line.
	// (Nothing reaches the server: batches are sent when full or at the end.)
	if errOut := c.fails(cli.ExitInvalidArgument, "put-bulk", "r1x", "main", bad); !strings.Contains(errOut, "bad.jsonl:2: not an entry line") {
		t.Fatalf("stderr: %s", errOut)
	}
}

// TestRestoreUndecodableDumpIsInvalidInput: a dump file whose line does
// not decode (cut short, not a dump) exits 9, invalid input, naming the
// file and the line, not 2: the command line was right. So does a line
// longer than the CLI reads, in a dump and a put-bulk file alike.
func TestRestoreUndecodableDumpIsInvalidInput(t *testing.T) {
	c := ctl{t: t, base: []string{"--server", startFake(t, server.GRPCOptions{})}}
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.jsonl")
	if err := os.WriteFile(broken, []byte("\n{\"commit\": {\"id\": \"ab\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	errOut := c.fails(cli.ExitInvalidArgument, "restore", "r1x", broken)
	if !strings.Contains(errOut, "invalid input: "+broken+":2: not a dump record: ") || strings.Contains(errOut, "usage") {
		t.Fatalf("stderr: %s", errOut)
	}
	long := filepath.Join(dir, "long.jsonl")
	if err := os.WriteFile(long, []byte("{}\n"+strings.Repeat("x", 5<<20)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"restore", "r1x", long}, {"put-bulk", "r1x", "main", long}} {
		if errOut := c.fails(cli.ExitInvalidArgument, args...); !strings.Contains(errOut, long+":2: line longer than") {
			t.Errorf("%v: stderr: %s", args, errOut)
		}
	}
}
