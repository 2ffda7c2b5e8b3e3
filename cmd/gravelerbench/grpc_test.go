package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"graveler/graveler"
	"graveler/server"
)

// memService is an in-memory stand-in for the Graveler service, enough for
// the tool's scenarios, behind the real gRPC server on loopback. It checks
// the gRPC half of the tool (requests, names, paging of the scenarios);
// figures come only from a real gravelerd.
type memService struct {
	server.Service
	mu      sync.Mutex
	repos   map[graveler.RepositoryID]bool
	entries map[string][]byte
	commits int
	delay   time.Duration
	// refuseSets answers every Set as a key over the limit would be.
	refuseSets bool
	// commitTime is how long a commit takes, so that the long-commit
	// scenario has load running while it does however fast the machine is
	// (a real commit of its 1500 entries can finish before one put does).
	commitTime atomic.Int64
}

func (m *memService) CreateRepository(ctx context.Context, id graveler.RepositoryID, ns graveler.StorageNamespace, b graveler.BranchID) (*graveler.RepositoryRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.repos[id] {
		return nil, graveler.ErrRepositoryExists
	}
	m.repos[id] = true
	return &graveler.RepositoryRecord{RepositoryID: id, Repository: &graveler.Repository{StorageNamespace: ns, DefaultBranchID: b}}, nil
}

func (m *memService) CreateBranch(ctx context.Context, repo graveler.RepositoryID, b graveler.BranchID, src graveler.Ref) (*graveler.BranchRecord, error) {
	return &graveler.BranchRecord{BranchID: b, Branch: &graveler.Branch{CommitID: "c0"}}, nil
}

func (m *memService) set(repo graveler.RepositoryID, key graveler.Key, v graveler.Value) error {
	if !m.repos[repo] {
		return graveler.ErrRepositoryNotFound
	}
	m.entries[string(repo)+"/"+string(key)] = v.Data
	return nil
}

func (m *memService) Set(ctx context.Context, repo graveler.RepositoryID, b graveler.BranchID, key graveler.Key, v graveler.Value, _ graveler.SetOptions) error {
	time.Sleep(m.delay)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refuseSets {
		return graveler.ErrInvalidKey
	}
	return m.set(repo, key, v)
}

func (m *memService) SetBatch(ctx context.Context, repo graveler.RepositoryID, b graveler.BranchID, recs []*graveler.ValueRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range recs {
		if err := m.set(repo, r.Key, *r.Value); err != nil {
			return err
		}
	}
	return nil
}

func (m *memService) Get(ctx context.Context, repo graveler.RepositoryID, ref graveler.Ref, key graveler.Key) (*graveler.Value, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.entries[string(repo)+"/"+string(key)]
	if !ok {
		return nil, fmt.Errorf("%w: %s", graveler.ErrEntryNotFound, key)
	}
	return &graveler.Value{Identity: []byte("i"), Data: d}, nil
}

func (m *memService) Commit(ctx context.Context, repo graveler.RepositoryID, b graveler.BranchID, p graveler.CommitParams) (graveler.CommitID, error) {
	select {
	case <-time.After(time.Duration(m.commitTime.Load())):
	case <-ctx.Done():
		return "", ctx.Err()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.commits++
	return graveler.CommitID(fmt.Sprintf("%064x", m.commits)), nil
}

func (m *memService) GetCommit(ctx context.Context, repo graveler.RepositoryID, ref graveler.Ref) (*graveler.CommitRecord, error) {
	return &graveler.CommitRecord{CommitID: graveler.CommitID(ref), Commit: &graveler.Commit{Committer: "x"}}, nil
}

func startMemServer(t *testing.T) (string, *memService) {
	t.Helper()
	m := &memService{repos: map[graveler.RepositoryID]bool{}, entries: map[string][]byte{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := server.NewGRPCServer(server.New(m, server.Config{StorageNamespaceRoot: "mem://bench"}), server.GRPCOptions{})
	go func() { _ = g.Server.Serve(lis) }()
	t.Cleanup(g.Server.Stop)
	return lis.Addr().String(), m
}

var rowRe = regexp.MustCompile(`(?m)^\s*(graveler\.\w+)\s+(\d+)\s+(\S+)\s`)

// rows returns op -> (ok count, errors column) of every table printed.
func rows(out string) map[string][2]string {
	m := map[string][2]string{}
	for _, r := range rowRe.FindAllStringSubmatch(out, -1) {
		m[r[1]] = [2]string{r[2], r[3]}
	}
	return m
}

func TestScenariosOverGRPC(t *testing.T) {
	addr, mem := startMemServer(t)
	for _, c := range []struct {
		scenario string
		ops      []string
		want     []string
	}{
		{"staged-writes", []string{"graveler.put"}, []string{"staged-writes: graveler, 2 writers"}},
		{"reads", []string{"graveler.get"}, []string{"reads (committed, 500 entries)"}},
		{"long-commit", []string{"graveler.put", "graveler.get"}, []string{"RATIO long-commit graveler.put during/without", "COMMIT entries=1500"}},
		{"small-commits-one-branch", []string{"graveler.put", "graveler.commit"}, []string{"small commits on one branch: 3 committers"}},
		{"small-commits-many-branches", []string{"graveler.put", "graveler.commit"}, []string{"small commits on 3 branches"}},
		{"commit-sizes", nil, []string{"COMMIT entries=10 ", "COMMIT entries=2000 "}},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			if c.scenario == "long-commit" {
				mem.commitTime.Store(int64(250 * time.Millisecond))
				defer mem.commitTime.Store(0)
			}
			cfg, err := parseFlags([]string{"--server", addr, "--scenario", c.scenario, "--writers", "2", "--readers", "2", "--committers", "3",
				"--duration", "200ms", "--preload", "500", "--stage", "1500", "--sizes", "10,2000"}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := run(context.Background(), cfg, &out); err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			s := out.String()
			r := rows(s)
			for _, op := range c.ops {
				if row, ok := r[op]; !ok || row[0] == "0" || row[1] != "0" {
					t.Errorf("%s: row %v (want successes and no errors)\n%s", op, row, s)
				}
			}
			for _, w := range c.want {
				if !strings.Contains(s, w) {
					t.Errorf("missing %q in\n%s", w, s)
				}
			}
		})
	}
	mem.mu.Lock()
	defer mem.mu.Unlock()
	if mem.commits == 0 || len(mem.entries) < 1500 {
		t.Fatalf("the service saw %d commits and %d entries", mem.commits, len(mem.entries))
	}
}

// The percentiles printed must come from the calls: a service that takes
// at least 5ms per write cannot show a p50 below 5ms.
func TestLatencyIsMeasured(t *testing.T) {
	addr, mem := startMemServer(t)
	mem.delay = 5 * time.Millisecond
	cfg, err := parseFlags([]string{"--server", addr, "--scenario", "staged-writes", "--writers", "1", "--duration", "300ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), cfg, &out); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`graveler\.put\s+(\d+)\s+0\s+\d+\s+(\S+)\s+\S+\s+\S+\s+(\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no measured put row:\n%s", out.String())
	}
	p50, err1 := time.ParseDuration(m[2])
	maxd, err2 := time.ParseDuration(m[3])
	if err1 != nil || err2 != nil || p50 < mem.delay || maxd < p50 {
		t.Fatalf("p50 %s max %s with a %s service:\n%s", m[2], m[3], mem.delay, out.String())
	}
	// At most one write per delay from one writer.
	if n := atoi(t, m[1]); n > int(300*time.Millisecond/mem.delay)+1 {
		t.Fatalf("%d writes in 300ms at %s each", n, mem.delay)
	}
}

func atoi(t *testing.T, s string) int {
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEveryCallFailedFailsTheRun: a run whose writes all fail (here the
// service refuses every key) prints its table and then fails naming the
// operation and the codes, instead of exiting 0 with figures of nothing.
func TestEveryCallFailedFailsTheRun(t *testing.T) {
	addr, mem := startMemServer(t)
	mem.refuseSets = true
	cfg, err := parseFlags([]string{"--server", addr, "--scenario", "staged-writes", "--writers", "2", "--duration", "200ms", "--pairs", "1", "--warmup", "0s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = run(context.Background(), cfg, &out)
	if err == nil || !strings.Contains(err.Error(), "every graveler.put call failed map[InvalidArgument:") {
		t.Fatalf("run: %v, want every graveler.put failed with InvalidArgument\n%s", err, out.String())
	}
	if row := rows(out.String())["graveler.put"]; row[0] != "0" {
		t.Fatalf("table row %v, want no successes printed before the error\n%s", row, out.String())
	}
}
