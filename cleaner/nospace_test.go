package cleaner_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/cleaner"
	"graveler/etcdkv"
	"graveler/etcdkv/embedded"
	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/gravelertest"
	"graveler/keys"
	"graveler/kv"
)

// countPrefix counts the keys under an etcd prefix.
func countPrefix(t *testing.T, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// TestNoSpaceCleanerFreesSpace: with etcd in NOSPACE, a cleaner daemon
// (Run with the etcd election, which needs a lease etcd refuses then)
// still drops what deleted repositories and commits left behind and
// removes the token work items; a deleted repository's claim and work
// item wait, with a failure that says why. After compaction,
// defragmentation and disarming the alarm the database is smaller, and
// the next pass finishes the repository.
func TestNoSpaceCleanerFreesSpace(t *testing.T) {
	srv := etcdkvtest.NewServerConfig(t, embedded.Config{QuotaBackendBytes: 4 << 20})
	store := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	blobs := committed.NewBucketStore(committed.BucketConfig{})
	t.Cleanup(func() { blobs.Close() })
	g := gravelertest.New(t, store, gravelertest.Options{Blobs: blobs})
	ctx := context.Background()
	val := func(n int, s string) graveler.Value {
		return graveler.Value{Identity: []byte(s), Data: []byte(strings.Repeat("d", n) + s)}
	}
	stage := func(repo graveler.RepositoryID, n int) {
		t.Helper()
		for i := range n {
			if err := g.Set(ctx, repo, "main", graveler.Key(fmt.Sprintf("k%04d", i)), val(16<<10, fmt.Sprint(i)), graveler.SetOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A deleted repository with 1.6 MB staged, and a commit that leaves
	// 0.8 MB in its consumed staging token.
	if _, err := g.CreateRepository(ctx, "gone", gravelertest.Namespace(), "main"); err != nil {
		t.Fatal(err)
	}
	stage("gone", 100)
	if err := g.DeleteRepository(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.CreateRepository(ctx, "kept", gravelertest.Namespace(), "main"); err != nil {
		t.Fatal(err)
	}
	stage("kept", 50)
	if _, err := g.Commit(ctx, "kept", "main", graveler.CommitParams{Committer: "c", Message: "m"}); err != nil {
		t.Fatal(err)
	}
	// Fill the rest with history: one key overwritten.
	for i := 0; ; i++ {
		err := g.Set(ctx, "kept", "main", graveler.Key("fill"), val(256<<10, fmt.Sprint(i)), graveler.SetOptions{})
		if errors.Is(err, kv.ErrQuotaExceeded) {
			break
		}
		if err != nil {
			t.Fatalf("fill write %d: %v", i, err)
		}
		if i > 64 {
			t.Fatal("no NOSPACE under a 4 MiB quota")
		}
	}
	if !srv.NoSpaceAlarm(t) {
		t.Fatal("no NOSPACE alarm")
	}
	staging := "/graveler/" + etcdkv.PartitionElement(keys.StagingPartition("x"))[:len("staging:")]
	deleted := "/graveler/" + etcdkv.PartitionElement(keys.Deleted()) + "/"
	tokenItems := deleted + keys.TokensPrefix
	stagedBefore := countPrefix(t, srv.Client, staging)
	if n := countPrefix(t, srv.Client, tokenItems); n != 1 {
		t.Fatalf("%d token work items queued, want 1 (the commit's)", n)
	}

	// The election cannot take place: etcd grants no lease under NOSPACE.
	el := cleaner.NewEtcdElector(srv.Client, cleaner.ElectionKey("/graveler"), "c1", 5)
	if _, _, err := el.Campaign(ctx); !errors.Is(err, kv.ErrQuotaExceeded) {
		t.Fatalf("campaign under NOSPACE: %v, want kv.ErrQuotaExceeded", err)
	}

	// A cleaner daemon frees space anyway.
	c := cleaner.New(store, cleaner.Config{Blobs: blobs, Elector: el, Interval: time.Hour})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(runCtx)
	}()
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for countPrefix(t, srv.Client, tokenItems) != 0 {
		select {
		case <-waitCtx.Done():
			stop()
			<-done
			t.Fatal("the cleaner daemon reclaimed nothing while etcd is out of space")
		case <-time.After(20 * time.Millisecond):
		}
	}
	stop()
	<-done
	// Only the live token's keys stay staged: the fill key.
	if n := countPrefix(t, srv.Client, staging); n != 1 {
		t.Fatalf("%d staged keys left of %d, want 1 (the live branch's)", n, stagedBefore)
	}

	// One more pass says why the repository is not finished.
	sum, err := cleaner.New(store, cleaner.Config{Blobs: blobs}).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Errors != 1 || len(sum.Failures) != 1 || !strings.Contains(sum.Failures[0], "etcd is out of space") ||
		!strings.Contains(sum.Failures[0], "partitions are dropped") || sum.RepositoriesReclaimed != 0 {
		t.Fatalf("pass under NOSPACE: %+v", sum)
	}
	if n := countPrefix(t, srv.Client, deleted+keys.ReposPrefix); n != 1 {
		t.Fatalf("%d repository work items, want 1 waiting for writes", n)
	}

	// The runbook, then a pass finishes.
	st, err := srv.Client.Status(ctx, srv.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	if after := srv.FreeSpace(t); after >= st.DbSize/2 {
		t.Fatalf("database %d bytes after the runbook, was %d", after, st.DbSize)
	}
	sum, err = cleaner.New(store, cleaner.Config{Blobs: blobs}).RunOnce(ctx)
	if err != nil || sum.Errors != 0 || sum.RepositoriesReclaimed != 1 {
		t.Fatalf("pass after the runbook: %+v, %v", sum, err)
	}
	if n := countPrefix(t, srv.Client, deleted); n != 0 {
		t.Fatalf("%d work items left after the runbook", n)
	}
	if err := g.Set(ctx, "kept", "main", graveler.Key("after"), val(1, "a"), graveler.SetOptions{}); err != nil {
		t.Fatalf("write after the runbook: %v", err)
	}
}
