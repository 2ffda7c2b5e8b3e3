package cli_test

import (
	"net"
	"strings"
	"testing"

	"graveler/cmd/gravelerctl/cli"
	"graveler/graveler/gravelertest"
	"graveler/kv"
	"graveler/server"
)

// TestRepositoryDeletingExitCode: a repository whose delete stopped after
// marking it deleting is a failed precondition (exit 6, reason
// REPOSITORY_DELETING) to reads and writes, not "not found"; its name can
// be created again at once, on another storage namespace.
func TestRepositoryDeletingExitCode(t *testing.T) {
	store := kv.NewMemoryStore()
	t.Cleanup(func() { _ = store.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := server.NewGRPCServer(server.New(gravelertest.New(t, store, gravelertest.Options{}), server.Config{StorageNamespaceRoot: "mem://ctl"}), server.GRPCOptions{})
	go func() { _ = g.Server.Serve(lis) }()
	t.Cleanup(g.Server.Stop)
	c := ctl{t: t, base: []string{"--server", lis.Addr().String()}}

	c.ok("repo", "create", "going")
	c.ok("put", "going", "main", "k", "--data", "v1")
	// A delete that stopped after its first step: the record marked deleting.
	gravelertest.MarkDeleting(t, store, "going")

	for _, args := range [][]string{{"repo", "get", "going"}, {"put", "going", "main", "k", "--data", "v2"}, {"get", "going", "main", "k"}} {
		if errOut := c.fails(cli.ExitFailedPrecondition, args...); !strings.Contains(errOut, "REPOSITORY_DELETING") {
			t.Fatalf("%v: stderr %s", args, errOut)
		}
	}
	if out := c.ok("repo", "list"); strings.Contains(out, "going") {
		t.Fatalf("listed a repository being deleted:\n%s", out)
	}
	// The name is reusable at once (the default namespace is one per
	// incarnation); the deleted incarnation's entries are not seen.
	c.ok("repo", "create", "going")
	c.fails(cli.ExitNotFound, "get", "going", "main", "k")
}
