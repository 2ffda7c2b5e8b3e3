package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	pb "graveler/api/graveler/v1"
	"graveler/client"
	"graveler/etcdkv/embedded"
	"graveler/server/daemon"
)

// gravelerdEtcdConns is the etcd clients one gravelerd holds: its one
// etcdkv store (the change feed shares it), one gRPC connection per etcd
// endpoint. The raw baseline takes as many by default (--etcd-conns), so
// neither side gains from more connections, each with its own HTTP/2
// stream limit and flow-control window.
const gravelerdEtcdConns = 1

// rawEtcd is the baseline: the same keys and values as plain etcd puts and
// gets, through the official client, against the same cluster.
type rawEtcd struct {
	clients []*clientv3.Client
	prefix  string
}

func dialEtcd(endpoints []string, conns int) (*rawEtcd, error) {
	r := &rawEtcd{prefix: fmt.Sprintf("/gravelerbench-raw/%d/", time.Now().UnixNano())}
	for range conns {
		c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("gravelerbench: etcd %v: %w", endpoints, err)
		}
		r.clients = append(r.clients, c)
	}
	return r, nil
}

func (r *rawEtcd) client(worker int) *clientv3.Client { return r.clients[worker%len(r.clients)] }

func (r *rawEtcd) put(ctx context.Context, worker int, key, value []byte) error {
	_, err := r.client(worker).Put(ctx, r.prefix+string(key), string(value))
	return err
}

func (r *rawEtcd) get(ctx context.Context, worker int, key []byte) error {
	resp, err := r.client(worker).Get(ctx, r.prefix+string(key))
	if err == nil && len(resp.Kvs) == 0 {
		err = fmt.Errorf("gravelerbench: raw key %q missing", key)
	}
	return err
}

// cleanup deletes every key this run wrote.
func (r *rawEtcd) cleanup(ctx context.Context) error {
	// The run's own prefix, after its writers stopped: nobody re-creates these keys.
	_, err := r.clients[0].Delete(ctx, r.prefix, clientv3.WithPrefix())
	return err
}

func (r *rawEtcd) Close() {
	for _, c := range r.clients {
		_ = c.Close()
	}
}

// grav is the system under test: gravelerd over gRPC.
type grav struct {
	clients []*client.Client
}

func dialGraveler(ctx context.Context, addr string, conns int) (*grav, error) {
	g := &grav{}
	for range conns {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := client.Dial(dctx, addr)
		cancel()
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("gravelerbench: gravelerd %s: %w", addr, err)
		}
		g.clients = append(g.clients, c)
	}
	return g, nil
}

func (g *grav) c(worker int) *client.Client { return g.clients[worker%len(g.clients)] }

func (g *grav) Close() {
	for _, c := range g.clients {
		_ = c.Close()
	}
}

func (g *grav) createRepository(ctx context.Context, repo string) error {
	_, err := g.c(0).CreateRepository(ctx, &pb.CreateRepositoryRequest{
		RepositoryId: repo,
		Repository:   &pb.Repository{DefaultBranch: "main"},
	})
	return err
}

func (g *grav) deleteRepository(ctx context.Context, repo string) error {
	_, err := g.c(0).DeleteRepository(ctx, &pb.DeleteRepositoryRequest{Name: client.Repository(repo)})
	return err
}

func (g *grav) createBranch(ctx context.Context, repo, branch string) error {
	_, err := g.c(0).CreateBranch(ctx, &pb.CreateBranchRequest{Parent: client.Repository(repo), BranchId: branch, SourceRef: "main"})
	return err
}

func (g *grav) put(ctx context.Context, worker int, repo, branch string, key, id, data []byte) error {
	_, err := g.c(worker).PutEntry(ctx, &pb.PutEntryRequest{
		Branch: client.Branch(repo, branch),
		Entry:  &pb.Entry{Key: key, Value: &pb.Value{Identity: id, Data: data}},
	})
	return err
}

func (g *grav) get(ctx context.Context, worker int, repo, ref string, key []byte) error {
	_, err := g.c(worker).GetEntry(ctx, &pb.GetEntryRequest{Repository: client.Repository(repo), Ref: ref, Key: key})
	return err
}

func (g *grav) commit(ctx context.Context, worker int, repo, branch string) error {
	_, err := g.c(worker).Commit(ctx, &pb.CommitRequest{
		Branch:  client.Branch(repo, branch),
		Options: &pb.CommitOptions{Message: "gravelerbench", Committer: "gravelerbench"},
	})
	return err
}

// stage writes n entries (keys from w.key("s", worker, i)) with
// BatchPutEntries on par workers.
func (g *grav) stage(ctx context.Context, w workload, repo, branch string, n, par int) error {
	const batch = 1000
	data := w.data()
	errc := make(chan error, par)
	for p := range par {
		go func() {
			var err error
			for start := p * batch; start < n && err == nil; start += par * batch {
				req := &pb.BatchPutEntriesRequest{Branch: client.Branch(repo, branch)}
				for i := start; i < min(start+batch, n); i++ {
					req.Entries = append(req.Entries, &pb.Entry{Key: w.key("s", 0, i), Value: &pb.Value{Identity: identity(-1, i), Data: data}})
				}
				_, err = g.c(p).BatchPutEntries(ctx, req)
			}
			errc <- err
		}()
	}
	var errs []error
	for range par {
		errs = append(errs, <-errc)
	}
	return errors.Join(errs...)
}

// embeddedStack is an embedded etcd and an in-process gravelerd on it.
type embeddedStack struct {
	etcd      *embedded.Server
	endpoints []string
	addr      string
	stop      context.CancelFunc
	done      chan error
	dir       string
}

func startEmbedded(ctx context.Context, noFsync, withGraveler bool, commitReadRate float64, log *zap.Logger) (*embeddedStack, error) {
	dir, err := os.MkdirTemp("", "gravelerbench-")
	if err != nil {
		return nil, err
	}
	s := &embeddedStack{dir: dir}
	s.etcd, err = embedded.Start(embedded.Config{Dir: filepath.Join(dir, "etcd"), UnsafeNoFsync: noFsync})
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("gravelerbench: embedded etcd: %w", err)
	}
	s.endpoints = s.etcd.Endpoints()
	if !withGraveler {
		return s, nil
	}
	ready := make(chan string, 1)
	rctx, cancel := context.WithCancel(ctx)
	s.stop, s.done = cancel, make(chan error, 1)
	cfg := daemon.Config{
		ListenAddr: "127.0.0.1:0",
		DataDir:    filepath.Join(dir, "gravelerd"),
		Etcd:       daemon.EtcdConfig{Endpoints: s.endpoints},
		// The pacing to compare: gravelerd --commit-read-rate.
		CommitReadRate: commitReadRate,
		Logger:         log,
		Ready:          func(addr string) { ready <- addr },
	}
	go func() { s.done <- daemon.Run(rctx, cfg) }()
	select {
	case s.addr = <-ready:
		return s, nil
	case err := <-s.done:
		s.stop = nil
		s.Close()
		return nil, fmt.Errorf("gravelerbench: in-process gravelerd: %w", err)
	}
}

func (s *embeddedStack) Close() {
	if s.stop != nil {
		s.stop()
		<-s.done
	}
	s.etcd.Close()
	os.RemoveAll(s.dir)
}

func randomKey(w workload, worker, n int) []byte {
	return w.key("s", 0, rand.IntN(n))
}
