package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"graveler/cleaner"
	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/gravelertest"
)

// TestOnceGC: --once --gc deletes a failed commit's old objects from a
// file:// namespace, keeps the committed ones, and reports the collection
// in the JSON summary; with --dry-run it deletes nothing and reports the
// same.
func TestOnceGC(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	store := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	ctx := t.Context()
	blobs := committed.NewBucketStore(committed.BucketConfig{})
	t.Cleanup(func() { blobs.Close() })
	dir := filepath.Join(t.TempDir(), "repo")
	ns := graveler.StorageNamespace((&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String())
	g := gravelertest.New(t, store, gravelertest.Options{Blobs: blobs})
	if _, err := g.CreateRepository(ctx, "repo", ns, "main"); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := g.Set(ctx, "repo", "main", graveler.Key(fmt.Sprintf("k%03d", i)), graveler.Value{Identity: []byte("v"), Data: []byte("d")}, graveler.SetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.Commit(ctx, "repo", "main", graveler.CommitParams{Committer: "t", Message: "m"}); err != nil {
		t.Fatal(err)
	}
	// A failed commit's objects, 10h old.
	m := committed.NewManager(blobs, committed.Config{})
	failed, err := m.WriteMetaRangeByIterator(ctx, ns, &oneEntry{})
	if err != nil {
		t.Fatal(err)
	}
	// Its root and its pack.
	var garbage []string
	if err := committed.TreeObjects(ctx, blobs, ns, failed, func(o committed.TreeObject) error {
		if !slices.Contains(garbage, o.Blob) {
			garbage = append(garbage, o.Blob)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(garbage) != 2 {
		t.Fatalf("the failed commit's tree is stored in %v, want a root and a pack", garbage)
	}
	old := time.Now().Add(-10 * time.Hour)
	for _, n := range garbage {
		if err := os.Chtimes(filepath.Join(dir, filepath.FromSlash(n)), old, old); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(name string) bool {
		_, err := os.Stat(filepath.Join(dir, filepath.FromSlash(name)))
		return err == nil
	}
	base := []string{"--once", "--etcd-endpoints=" + strings.Join(srv.Endpoints(), ","), "--gc", "--gc-grace=1h"}
	for _, dry := range []bool{true, false} {
		args := base
		if dry {
			args = append(args, "--dry-run")
		}
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, noEnv, &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d\nstdout: %s\nstderr: %s", args, code, out.String(), errOut.String())
		}
		var sum cleaner.Summary
		if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
			t.Fatalf("summary %q: %v", out.String(), err)
		}
		if sum.GC == nil || sum.GC.Deleted != 2 || sum.GC.Marked < 2 || sum.GC.Namespaces != 1 || sum.GC.Revision == 0 {
			t.Fatalf("dry run %v: gc summary %+v", dry, sum.GC)
		}
		for _, n := range garbage {
			if exists(n) != dry {
				t.Errorf("dry run %v: %s present %v", dry, n, exists(n))
			}
		}
		for _, key := range []string{`"gc":{`, `"marked":`, `"listed":`, `"deleted":`, `"kept_young":`, `"bytes_deleted":`} {
			if !strings.Contains(out.String(), key) {
				t.Errorf("summary lacks %s: %s", key, out.String())
			}
		}
	}
	// A fresh service, which caches nothing, reads the commit back.
	if _, err := gravelertest.New(t, store, gravelertest.Options{}).Get(ctx, "repo", "main", graveler.Key("k007")); err != nil {
		t.Fatalf("committed entry after the collection: %v", err)
	}
}

// oneEntry is an iterator over one entry no commit holds.
type oneEntry struct{ done bool }

func (o *oneEntry) Next() bool {
	ok := !o.done
	o.done = true
	return ok
}
func (o *oneEntry) Value() *graveler.ValueRecord {
	return &graveler.ValueRecord{Key: graveler.Key("lost"), Value: &graveler.Value{Identity: []byte("lost"), Data: []byte("lost")}}
}
func (o *oneEntry) SeekGE(graveler.Key) {}
func (o *oneEntry) Err() error          { return nil }
func (o *oneEntry) Close()              {}
