package feed_test

import (
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/etcdkv/embedded"
	"graveler/etcdkv/etcdkvtest"
	"graveler/feed"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// etcd stopping and starting again under the feed (the hub's connection
// breaks, its watch resumes) is invisible to subscribers: they get every
// change once.
func TestWatchEtcdRestartIsInvisible(t *testing.T) {
	cfg := embedded.Config{Dir: t.TempDir(), ClientAddr: freeAddr(t), PeerAddr: freeAddr(t), UnsafeNoFsync: true, Fast: true, AutoCompactionRetention: -1}
	first, err := embedded.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: first.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var current *embedded.Server
	current = first
	t.Cleanup(func() {
		cli.Close()
		current.Close()
	})
	e := newEnvOn(t, &etcdkvtest.Server{Server: first, Client: cli}, feed.Config{})
	e.createRepo("rep")
	from := e.rev()
	s := e.subscribe(feed.Request{StartRevision: from})
	c := e.churner("rep", 9)
	c.steps(5)
	got := e.until(s, e.rev()) // the hub is live on the first server

	first.Close()
	second, err := embedded.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	current = second
	// The service's first calls may meet the connection still down: retry
	// a step that failed before reaching etcd.
	deadline := time.Now().Add(waitBound)
	for done := 0; done < 5; {
		if err := c.step(); err != nil {
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		done++
	}
	to := e.rev()
	s2 := e.subscribe(feed.Request{StartRevision: from})
	sameLines(t, project(append(got, e.until(s, to)...)), e.rawChanges(from, to))
	sameLines(t, project(e.until(s2, to)), e.rawChanges(from, to))
}
