package cli_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"graveler/buildinfo"
	"graveler/cmd/gravelerctl/cli"
	"graveler/graveler/gravelertest"
	"graveler/kv"
	"graveler/server"
)

// startReal serves the real service on a memory store.
func startReal(t *testing.T, o server.GRPCOptions) string {
	t.Helper()
	store := kv.NewMemoryStore()
	t.Cleanup(func() { _ = store.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := server.NewGRPCServer(server.New(gravelertest.New(t, store, gravelertest.Options{}), server.Config{StorageNamespaceRoot: "mem://ctl"}), o)
	g.SetServing(true)
	go func() { _ = g.Server.Serve(lis) }()
	t.Cleanup(g.Server.Stop)
	return lis.Addr().String()
}

func closedAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// jsonLines parses stdout of -o json: one object per line.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	for l := range strings.SplitSeq(strings.TrimSuffix(out, "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON object: %q: %v\nall output:\n%s", l, err, out)
		}
		objs = append(objs, m)
	}
	return objs
}

func jsonOne(t *testing.T, out string) map[string]any {
	t.Helper()
	objs := jsonLines(t, out)
	if len(objs) != 1 {
		t.Fatalf("want one JSON line, got %d:\n%s", len(objs), out)
	}
	return objs[0]
}

// field walks a path of object keys.
func field(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// checkSnakeCase fails on any object key anywhere in v that is not
// snake_case (the commit metadata maps of these tests are empty).
func checkSnakeCase(t *testing.T, what string, v any) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if !snakeCase.MatchString(k) {
				t.Errorf("%s: field %q is not snake_case", what, k)
			}
			checkSnakeCase(t, what, e)
		}
	case []any:
		for _, e := range x {
			checkSnakeCase(t, what, e)
		}
	}
}

// TestConnectErrorsFailFast: no server, or TLS to a plain-text server,
// fails at once with the cause (not after --timeout with "context deadline
// exceeded"); version still prints the client's version.
func TestConnectErrorsFailFast(t *testing.T) {
	// A connection attempt takes milliseconds; waiting out --timeout is the bug.
	c := ctl{t: t, base: []string{"--server", closedAddr(t), "--timeout", "2m"}}
	errOut := c.fails(cli.ExitUnavailable, "repo", "list")
	if !strings.Contains(errOut, "connection refused") || strings.Contains(errOut, "deadline") {
		t.Fatalf("closed port: %s", errOut)
	}
	code, out, errOut := c.run("", "version")
	if code != cli.ExitUnavailable || out != fmt.Sprintf("client: %s (%s)\n", buildinfo.Version, buildinfo.GoVersion()) ||
		!strings.Contains(errOut, "connection refused") {
		t.Fatalf("version without a server: %d %q %q", code, out, errOut)
	}

	plain := startFake(t, server.GRPCOptions{})
	errOut = ctl{t: t, base: []string{"--server", plain, "--tls", "--insecure", "--timeout", "2m"}}.fails(cli.ExitUnavailable, "repo", "list")
	if !strings.Contains(errOut, "handshake") || strings.Contains(errOut, "deadline") {
		t.Fatalf("TLS to a plain-text server: %s", errOut)
	}
}

// TestGetWritesExactBytes: get prints a value's data byte for byte, and
// an empty --data stages an empty value rather than reading stdin.
func TestGetWritesExactBytes(t *testing.T) {
	c := ctl{t: t, base: []string{"--server", startReal(t, server.GRPCOptions{})}}
	c.ok("repo", "create", "bytes")
	big := make([]byte, 512<<10) // the largest value
	r := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(r.Uint32())
	}
	big[len(big)-1] = 'x' // not a newline: one added would be visible
	c.ok("put", "bytes", "main", "big", "--file", writeFile(t, "big", big))
	if out := c.ok("get", "bytes", "main", "big"); out != string(big) {
		t.Fatalf("get: %d bytes, want %d (equal: %v)", len(out), len(big), bytes.Equal([]byte(out), big))
	}
	c.ok("put", "bytes", "main", "line", "--data", "one line\n")
	if out := c.ok("get", "bytes", "main", "line"); out != "one line\n" {
		t.Fatalf("get: %q", out)
	}

	if code, out, errOut := c.run("not the value", "put", "bytes", "main", "empty", "--data", ""); code != 0 {
		t.Fatalf("put --data '': %d %s %s", code, out, errOut)
	}
	if out := c.ok("get", "bytes", "main", "empty"); out != "" {
		t.Fatalf("empty value: %q", out)
	}
	e := jsonOne(t, c.ok("-o", "json", "get", "bytes", "main", "empty"))
	if field(e, "value", "data") != "" || field(e, "value", "data_base64") != "" || field(e, "key") != "empty" {
		t.Fatalf("json of an empty value: %v", e)
	}
	// Without --data, stdin is the value.
	if code, _, errOut := c.run("from stdin", "put", "bytes", "main", "piped"); code != 0 {
		t.Fatal(errOut)
	}
	if out := c.ok("get", "bytes", "main", "piped"); out != "from stdin" {
		t.Fatalf("stdin value: %q", out)
	}
}

// TestLimitsAndExitCodes: requests over a limit fail before they are sent,
// naming the limit; one that reaches a server's message size limit is
// invalid input (9), not "unavailable, retry" (7); INVALID_ARGUMENT from
// the server is 9 and command-line mistakes are 2.
func TestLimitsAndExitCodes(t *testing.T) {
	c := ctl{t: t, base: []string{"--server", startReal(t, server.GRPCOptions{})}}
	c.ok("repo", "create", "limits")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"put", "limits", "main", "k", "--file", writeFile(t, "10m", make([]byte, 10<<20))}, "the limit is 524288 bytes (512 KiB)"},
		{[]string{"put", "limits", "main", strings.Repeat("k", 1025), "--data", "v"}, "the limit is 1024 bytes (1 KiB)"},
		{[]string{"put", "limits", "main", "k", "--data", "v", "--identity", strings.Repeat("i", 257)}, "the limit is 256 bytes"},
		{[]string{"repo", "create", strings.Repeat("r", 64)}, "the limit is 63 bytes"},
		{[]string{"branch", "create", "limits", strings.Repeat("b", 257)}, "the limit is 256 bytes"},
	} {
		if errOut := c.fails(cli.ExitInvalidArgument, tc.args...); !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "checked by the client") {
			t.Errorf("%.60v: %s", tc.args, errOut)
		}
	}
	if errOut := c.fails(cli.ExitInvalidArgument, "repo", "create", "Bad_Name"); !strings.Contains(errOut, "INVALID_REPOSITORY_ID") {
		t.Fatalf("server's INVALID_ARGUMENT: %s", errOut)
	}
	c.fails(cli.ExitUsage, "repo", "create")
	c.fails(cli.ExitUsage, "put", "limits", "main", "k", "--data", "v", "--file", "f")

	// A server whose message limit is below the client's idea of it.
	small := ctl{t: t, base: []string{"--server", startFake(t, server.GRPCOptions{MaxRecvMsgSize: 1024})}}
	errOut := small.fails(cli.ExitInvalidArgument, "put", "r1x", "main", "k", "--data", strings.Repeat("v", 2048))
	if !strings.Contains(errOut, "ResourceExhausted") || !strings.Contains(errOut, "message size limit") {
		t.Fatalf("over the server's message size: %s", errOut)
	}
}

// TestCommandLineMistakesExitUsage: README and the package doc promise
// exit 2 when "the command line is wrong", with the mistake on stderr.
func TestCommandLineMistakesExitUsage(t *testing.T) {
	c := ctl{t: t, base: []string{"--server", startReal(t, server.GRPCOptions{})}}
	c.ok("repo", "create", "demo")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"repo", "craete", "demo2"}, `unknown command "craete" for "gravelerctl repo"`},
		{[]string{"branch", "lst", "demo"}, `unknown command "lst" for "gravelerctl branch"`},
		{[]string{"tag"}, "gravelerctl tag needs a subcommand"},
		{[]string{"nosuch"}, `unknown command "nosuch" for "gravelerctl"`},
		{[]string{"delete-prefix", "demo", "main", ""}, "pass --all"},
	} {
		code, out, errOut := c.run("", tc.args...)
		if code != cli.ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("gravelerctl %q: exit %d, want %d (usage) and %q on stderr\nstdout: %.60q\nstderr: %q", tc.args, code, cli.ExitUsage, tc.want, out, errOut)
		}
	}
	// The typo created nothing.
	c.fails(cli.ExitNotFound, "repo", "get", "demo2")
	// Help asked for is no mistake.
	c.ok("repo", "--help")
	c.ok("help", "branch")
}

// TestCommitsListsLargeCommits: `gravelerctl log` lists commits with large
// messages (Log bounds its pages by bytes), and `gravelerctl commits` must
// list them too.
func TestCommitsListsLargeCommits(t *testing.T) {
	c := ctl{t: t, base: []string{"--server", startReal(t, server.GRPCOptions{})}}
	c.ok("repo", "create", "big")
	for i := range 20 { // 18 MiB of commit messages
		c.ok("put", "big", "main", fmt.Sprintf("k%d", i), "--data", "v")
		c.ok("commit", "big", "main", "-m", strings.Repeat(string(rune('a'+i)), 900<<10))
	}
	if out := c.ok("log", "big", "main"); strings.Count(out, "\ncommit ")+1 != 21 {
		t.Fatalf("control: log shows %d commits", strings.Count(out, "\ncommit ")+1)
	}
	for _, args := range [][]string{{"commits", "big"}, {"commits", "big", "--page-size", "2"}} {
		code, out, errOut := c.run("", args...)
		if code != 0 || strings.Count(out, "\n") != 21 {
			t.Errorf("gravelerctl %v: exit %d, %d lines\nstderr: %s", args, code, strings.Count(out, "\n"), errOut)
		}
	}

	// A response over the server's send limit is not the request's fault.
	small := ctl{t: t, base: []string{"--server", startReal(t, server.GRPCOptions{MaxSendMsgSize: 4 << 10})}}
	small.ok("repo", "create", "small")
	for i := range 2 { // each commit's response fits, a page of both does not
		small.ok("put", "small", "main", fmt.Sprint(i), "--data", "v")
		small.ok("commit", "small", "main", "-m", strings.Repeat("m", 3<<10))
	}
	errOut := small.fails(cli.ExitInvalidArgument, "commits", "small")
	if !strings.Contains(errOut, "the response is over") || strings.Contains(errOut, "the request is over") {
		t.Errorf("a response over the server's send limit: %s", errOut)
	}
}

// TestJSONOutput: -o json is one field style (snake_case) in every command
// and in dump files, shows text keys and values as strings beside their
// exact bytes, and mutations say what they did.
func TestJSONOutput(t *testing.T) {
	c := ctl{t: t, base: []string{"--server", startReal(t, server.GRPCOptions{}), "-o", "json"}}
	check := func(what string, out string) []map[string]any {
		t.Helper()
		objs := jsonLines(t, out)
		for _, o := range objs {
			checkSnakeCase(t, what, o)
		}
		return objs
	}

	repo := check("repo create", c.ok("repo", "create", "jsn"))[0]
	if field(repo, "repository", "default_branch") != "main" || field(repo, "repository", "name") != "repositories/jsn" {
		t.Fatalf("repo create: %v", repo)
	}
	put := check("put", c.ok("put", "jsn", "main", "text/a", "--data", "hello"))[0]
	if put["branch"] != "repositories/jsn/branches/main" || put["key"] != "text/a" || put["key_base64"] != "dGV4dC9h" || put["size"] != 5.0 {
		t.Fatalf("put: %v", put)
	}
	binKey := []byte{0xff, 0x00, 'b'}
	bulk := fmt.Sprintf(`{"key_base64": %q, "data_base64": %q}`+"\n", base64.StdEncoding.EncodeToString(binKey), base64.StdEncoding.EncodeToString([]byte{0xfe}))
	if b := check("put-bulk", c.ok("put-bulk", "jsn", "main", writeFile(t, "bulk", []byte(bulk))))[0]; b["entries"] != 1.0 || b["complete"] != true {
		t.Fatalf("put-bulk: %v", b)
	}
	commit := check("commit", c.ok("commit", "jsn", "main", "-m", "first"))[0]
	commitID, _ := field(commit, "commit", "id").(string)
	if len(commitID) != 64 || field(commit, "commit", "message") != "first" || field(commit, "commit", "meta_range_id") == nil {
		t.Fatalf("commit: %v", commit)
	}
	if rev, _ := commit["revision"].(string); rev == "" || rev == "0" {
		t.Fatalf("commit without a revision: %v", commit)
	}

	e := check("get", c.ok("get", "jsn", "main", "text/a"))[0]
	if field(e, "key") != "text/a" || field(e, "value", "data") != "hello" || field(e, "value", "data_base64") != "aGVsbG8=" || field(e, "value", "identity") == nil {
		t.Fatalf("get: %v", e)
	}
	ls := check("ls", c.ok("ls", "jsn", "main"))
	if len(ls) != 2 {
		t.Fatalf("ls: %v", ls)
	}
	for _, l := range ls {
		kb, _ := base64.StdEncoding.DecodeString(l["key_base64"].(string))
		switch string(kb) {
		case "text/a":
			if l["key"] != "text/a" {
				t.Errorf("text key: %v", l)
			}
		case string(binKey):
			// Not UTF-8: only the exact bytes, and data likewise.
			if _, has := l["key"]; has || field(l, "value", "data_base64") != "/g==" || field(l, "value", "data") != nil {
				t.Errorf("binary key: %v", l)
			}
		default:
			t.Errorf("ls: unexpected key %q", kb)
		}
	}

	br := check("branch create", c.ok("branch", "create", "jsn", "dev"))[0]
	if field(br, "branch", "commit_id") != commitID || br["revision"] == nil {
		t.Fatalf("branch create: %v", br)
	}
	c.ok("put", "jsn", "dev", "text/b", "--data", "b")
	st := check("status", c.ok("status", "jsn", "dev"))
	if len(st) != 1 || st[0]["key"] != "text/b" || st[0]["type"] != "DIFF_TYPE_ADDED" {
		t.Fatalf("status: %v", st)
	}
	c.ok("commit", "jsn", "dev", "-m", "b")
	if d := check("diff", c.ok("diff", "jsn", "main", "dev")); len(d) != 1 || d[0]["key"] != "text/b" {
		t.Fatalf("diff: %v", d)
	}
	m := check("merge", c.ok("merge", "jsn", "dev", "main", "--no-ff"))[0]
	if field(m, "commit", "parents") == nil || m["revision"] == nil {
		t.Fatalf("merge: %v", m)
	}
	check("log", c.ok("log", "jsn", "main"))
	check("tag create", c.ok("tag", "create", "jsn", "v1", "main"))
	check("reset-hard", c.ok("reset-hard", "jsn", "dev", "main"))

	dump := c.ok("dump", "jsn")
	recs := check("dump", dump)
	var sawCommit bool
	for _, r := range recs {
		if id, ok := field(r, "commit", "meta_range_id").(string); ok && id != "" {
			sawCommit = true
		}
	}
	if !sawCommit {
		t.Fatalf("dump has no commit with meta_range_id:\n%s", dump)
	}
	// A dump restores.
	restored := check("restore", c.ok("restore", "jsn2", writeFile(t, "dump", []byte(dump)), "--create"))[0]
	if restored["records"] == nil {
		t.Fatalf("restore: %v", restored)
	}
}

// TestCommitMessageCommitterAndKeys: commit needs -m; the committer is the
// local user without a token and the token's name with one; keys with
// control characters print quoted, one key a line.
func TestCommitMessageCommitterAndKeys(t *testing.T) {
	addr := startReal(t, server.GRPCOptions{Tokens: server.NewTokens(map[string]string{"tok-1": "ci-bot"})})
	c := ctl{t: t, base: []string{"--server", addr, "--token", "tok-1"}}
	c.ok("repo", "create", "keys")
	c.ok("put", "keys", "main", "evil\nkey\x1b[2J", "--data", "x")
	c.ok("put", "keys", "main", "plain key", "--data", "y")
	c.ok("put", "keys", "main", "ünïcode", "--data", "z")
	if out := c.ok("status", "keys", "main"); out != "+ \"evil\\nkey\\x1b[2J\"\n+ plain key\n+ ünïcode\n" {
		t.Fatalf("status:\n%s", out)
	}
	c.fails(cli.ExitUsage, "commit", "keys", "main")
	c.fails(cli.ExitUsage, "commit", "keys", "main", "-m", "  ")
	if out := c.ok("commit", "keys", "main", "-m", "keys"); !strings.Contains(out, "Committer: ci-bot\n") {
		t.Fatalf("commit with a token:\n%s", out)
	}
	out := c.ok("ls", "keys", "main")
	if strings.Count(out, "\n") != 3 || !strings.Contains(out, `"evil\nkey\x1b[2J"`) {
		t.Fatalf("ls:\n%s", out)
	}

	t.Setenv("USER", "alice")
	noToken := ctl{t: t, base: []string{"--server", startReal(t, server.GRPCOptions{})}}
	noToken.ok("repo", "create", "users")
	noToken.ok("put", "users", "main", "k", "--data", "v")
	if out := noToken.ok("commit", "users", "main", "-m", "by alice"); !strings.Contains(out, "Committer: alice\n") {
		t.Fatalf("commit without a token:\n%s", out)
	}
	noToken.ok("put", "users", "main", "k", "--data", "v2")
	if out := noToken.ok("commit", "users", "main", "-m", "by bob", "--committer", "bob"); !strings.Contains(out, "Committer: bob\n") {
		t.Fatalf("commit with --committer:\n%s", out)
	}
}

// TestMergeSaysWhetherItFastForwarded: merge sends --no-ff and prints which
// of a fast-forward or a merge commit happened.
func TestMergeSaysWhetherItFastForwarded(t *testing.T) {
	f := &rawFake{}
	c := ctl{t: t, base: []string{"--server", startRawFake(t, f)}}
	out := c.ok("merge", "r1x", "dev", "main")
	if !strings.HasPrefix(out, "fast-forward: branch main now at s00000000000") || !strings.Contains(out, "revision 41") {
		t.Fatalf("fast-forward output: %q", out)
	}
	out = c.ok("merge", "r1x", "dev", "main", "--no-ff")
	if !strings.HasPrefix(out, "commit m000") || !strings.Contains(out, "Merge dev into main") || !strings.Contains(out, "branch main now at m00000000000 (revision 42)") {
		t.Fatalf("merge commit output: %q", out)
	}
	m := jsonOne(t, c.ok("-o", "json", "merge", "r1x", "dev", "main"))
	if m["fast_forward"] != true || m["revision"] != "41" {
		t.Fatalf("json: %v", m)
	}
	if len(f.merges) != 3 || f.merges[0].GetNoFf() || !f.merges[1].GetNoFf() {
		t.Fatalf("requests: %v", f.merges)
	}
}

// TestVersion: the client's version and the server's.
func TestVersion(t *testing.T) {
	c := ctl{t: t, base: []string{"--server", startRawFake(t, &rawFake{})}}
	want := fmt.Sprintf("client: %s (%s)\nserver: v9.8.7 (go1.99)\n", buildinfo.Version, buildinfo.GoVersion())
	if out := c.ok("version"); out != want {
		t.Fatalf("version: %q, want %q", out, want)
	}
	v := jsonOne(t, c.ok("-o", "json", "version"))
	if field(v, "client", "version") != buildinfo.Version || field(v, "server", "version") != "v9.8.7" || field(v, "server", "go_version") != "go1.99" {
		t.Fatalf("json: %v", v)
	}
}

// TestPutBulkReportsAcknowledged: a bulk put that the server stops part
// way says how many entries were acknowledged and where to resume; batches
// stay under --max-request-size.
func TestPutBulkReportsAcknowledged(t *testing.T) {
	var in strings.Builder
	for i := range 50 {
		fmt.Fprintf(&in, `{"key": "k%02d", "data": %q}`+"\n", i, strings.Repeat("d", 100))
	}
	file := writeFile(t, "in.jsonl", []byte(in.String()))

	f := &rawFake{failAfter: 2}
	c := ctl{t: t, base: []string{"--server", startRawFake(t, f)}}
	code, out, errOut := c.run("", "-o", "json", "put-bulk", "r1x", "main", file, "--batch", "10")
	if code != cli.ExitUnavailable || !strings.Contains(errOut, "stopped after 20 acknowledged entries (through line 20 of") ||
		!strings.Contains(errOut, "run it again from line 21") || !strings.Contains(errOut, "server going away") {
		t.Fatalf("put-bulk: %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if r := jsonOne(t, out); r["entries"] != 20.0 || r["line"] != 20.0 || r["complete"] != false {
		t.Fatalf("json: %v", r)
	}

	// By size: about 110 bytes an entry, so at most 9 fit in 1000 bytes.
	f = &rawFake{}
	c = ctl{t: t, base: []string{"--server", startRawFake(t, f), "--max-request-size", "1000"}}
	if out := c.ok("put-bulk", "r1x", "main", file, "--batch", "1000"); out != "staged 50 entries on main\n" {
		t.Fatalf("put-bulk: %q", out)
	}
	total := 0
	for _, n := range f.batches {
		if n > 9 {
			t.Fatalf("a batch of %d entries is over 1000 bytes: %v", n, f.batches)
		}
		total += n
	}
	if total != 50 {
		t.Fatalf("batches %v", f.batches)
	}
}

// TestStorageNamespaceDefaultInHelp: the help of `repo create` and
// `restore --create` gives the default storage namespace as the server
// makes it, the root then the repository id and a unique suffix, not the
// root and the id alone (a namespace a new repository of the same name
// could never take while the old one is held).
func TestStorageNamespaceDefaultInHelp(t *testing.T) {
	c := ctl{t: t}
	for _, args := range [][]string{{"repo", "create", "--help"}, {"restore", "--help"}} {
		out := strings.Join(strings.Fields(c.ok(args...)), " ")
		if want := "<the server's --storage-namespace-root>/REPO-<unique suffix>"; !strings.Contains(out, want) {
			t.Errorf("gravelerctl %v does not give the default namespace as %q:\n%s", args, want, out)
		}
		if strings.Contains(out, "root + REPO") {
			t.Errorf("gravelerctl %v still says root + REPO:\n%s", args, out)
		}
	}
}
