package committed_test

import (
	"context"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/committed/blobtest"
)

func TestBucketStoreFile(t *testing.T) {
	blobtest.RunWithOptions(t, func(t *testing.T) (committed.BlobStore, graveler.StorageNamespace) {
		// A directory that does not exist yet: the store creates it.
		dir := filepath.Join(t.TempDir(), "repo", "data")
		return committed.NewBucketStore(committed.BucketConfig{}), blobFileNS(dir)
	}, blobtest.Options{Age: blobAgeFile})
}

// blobAgeFile sets a file:// object's modification time back by d.
func blobAgeFile(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace, name string, d time.Duration) {
	t.Helper()
	u, err := url.Parse(string(ns))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(filepath.FromSlash(u.Path), filepath.FromSlash(name))
	info, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	old := info.ModTime().Add(-d)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
}

func blobFileNS(dir string) graveler.StorageNamespace {
	return graveler.StorageNamespace((&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String())
}

var blobMemSeq atomic.Int64

func TestBucketStoreMem(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) (committed.BlobStore, graveler.StorageNamespace) {
		return committed.NewBucketStore(committed.BucketConfig{}), graveler.StorageNamespace("mem://suite-" + strings.Repeat("x", int(blobMemSeq.Add(1))))
	})
}

// TestBucketStoreS3 runs the suite against a real S3 client talking HTTP to
// an in-process S3-compatible server.
func TestBucketStoreS3(t *testing.T) {
	fake := blobtest.StartFakeS3(t, "graveler-test")
	var seq atomic.Int64
	blobtest.RunWithOptions(t, func(t *testing.T) (committed.BlobStore, graveler.StorageNamespace) {
		seq.Add(1)
		return committed.NewBucketStore(fake.Config), graveler.StorageNamespace("s3://graveler-test/repos/r" + strings.Repeat("0", int(seq.Load())))
	}, blobtest.Options{Age: func(t *testing.T, _ committed.BlobStore, _ graveler.StorageNamespace, _ string, d time.Duration) {
		// Every object ages at once: the server's clock moves on.
		fake.Clock.Advance(d)
	}})
}

// blobFakeS3 starts an S3-compatible server on 127.0.0.1 holding bucket and
// points the AWS configuration chain at static test credentials.
func blobFakeS3(t *testing.T, bucket string) committed.BucketConfig {
	t.Helper()
	return blobtest.StartFakeS3(t, bucket).Config
}

func TestBucketStoreS3Errors(t *testing.T) {
	cfg := blobFakeS3(t, "present")
	ctx := context.Background()
	s := committed.NewBucketStore(cfg)
	defer s.Close()
	// A namespace at the bucket's root works too.
	if err := s.Put(ctx, "s3://present", "root-object", []byte("r")); err != nil {
		t.Fatal(err)
	}
	// The prefix is part of the object's key: a prefixed namespace does not
	// see the root's objects.
	if ok, err := s.Exists(ctx, "s3://present/p", "root-object"); err != nil || ok {
		t.Fatalf("Exists under a prefix = %v, %v", ok, err)
	}
	if err := s.Put(ctx, "s3://missing-bucket/p", "x", []byte("x")); err == nil {
		t.Fatal("Put into a missing bucket succeeded")
	}
	for _, ns := range []graveler.StorageNamespace{"s3:///nobucket", "s3://b/../up", "s3://b/a//c"} {
		if _, err := s.Get(ctx, ns, "x"); !errors.Is(err, graveler.ErrInvalidStorageNamespace) {
			t.Errorf("Get in %q = %v, want ErrInvalidStorageNamespace", ns, err)
		}
	}
}

func TestBucketStoreBadNamespaces(t *testing.T) {
	ctx := context.Background()
	s := committed.NewBucketStore(committed.BucketConfig{})
	defer s.Close()
	for _, ns := range []graveler.StorageNamespace{
		"", "ftp://x/y", "gs://bucket", "relative/dir", "file://relative", "file://host/dir",
		"file:///", "mem://", "%zz://x",
	} {
		if err := s.Put(ctx, ns, "a", []byte("x")); !errors.Is(err, graveler.ErrInvalidStorageNamespace) {
			t.Errorf("Put in %q = %v, want ErrInvalidStorageNamespace", ns, err)
		}
	}
}

// TestBucketStoreFileConfinement: objects land under the namespace's
// directory, and names that would escape it write nothing anywhere.
func TestBucketStoreFileConfinement(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	dir := filepath.Join(root, "a", "ns")
	s := committed.NewBucketStore(committed.BucketConfig{})
	defer s.Close()
	ns := blobFileNS(dir)
	for _, name := range []string{"../x", "../../x", "/abs", "a//b", "", "a/./b", "..", "a/../../../x"} {
		if err := s.Put(ctx, ns, name, []byte("escape")); !errors.Is(err, committed.ErrInvalidBlobName) {
			t.Errorf("Put(%q) = %v", name, err)
		}
	}
	if err := s.Put(ctx, ns, "ranges/r1", []byte("in")); err != nil {
		t.Fatal(err)
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0] != "a/ns/ranges/r1" {
		t.Fatalf("files under the root = %q, want just a/ns/ranges/r1", files)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "ranges", "r1")); err != nil || string(b) != "in" {
		t.Fatalf("object file = %q, %v", b, err)
	}
}

func TestBucketStoreMemSharedAcrossCalls(t *testing.T) {
	ctx := context.Background()
	s := committed.NewBucketStore(committed.BucketConfig{})
	if err := s.Put(ctx, "mem://shared", "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, "mem://shared", "k"); err != nil || string(got) != "v" {
		t.Fatalf("Get = %q, %v", got, err)
	}
	// A different store has its own memory.
	other := committed.NewBucketStore(committed.BucketConfig{})
	defer other.Close()
	if ok, err := other.Exists(ctx, "mem://shared", "k"); err != nil || ok {
		t.Fatalf("other store Exists = %v, %v", ok, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.Get(ctx, "mem://shared", "k"); !errors.Is(err, committed.ErrBlobStoreClosed) {
		t.Fatalf("Get after Close = %v", err)
	}
}
