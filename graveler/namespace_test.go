package graveler_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/committed/blobtest"
	"graveler/graveler/gravelertest"
	"graveler/graveler/ref"
	"graveler/kv"
)

func fileNS(dir string) graveler.StorageNamespace {
	return graveler.StorageNamespace((&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String())
}

// wantNothingCreated asserts that a failed create left no repository and
// no namespace claim behind.
func wantNothingCreated(t *testing.T, g *graveler.Graveler, store kv.Store, id graveler.RepositoryID) {
	t.Helper()
	if _, err := g.GetRepository(context.Background(), id); !errors.Is(err, graveler.ErrRepositoryNotFound) {
		t.Fatalf("%s after a failed create: %v", id, err)
	}
	for c, err := range ref.New(store, ref.Config{}).NamespaceClaims(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		if c.Repository == id {
			t.Fatalf("%s: claim left by a failed create: %+v", id, c)
		}
	}
}

// wantMarker asserts that the namespace holds the marker naming rec.
func wantMarker(t *testing.T, blobs committed.BlobStore, rec *graveler.RepositoryRecord) {
	t.Helper()
	data, err := blobs.Get(context.Background(), rec.StorageNamespace, graveler.NamespaceMarker)
	if err != nil {
		t.Fatalf("marker in %s: %v", rec.StorageNamespace, err)
	}
	var m struct {
		Repository string `json:"repository"`
		UniqueID   string `json:"unique_id"`
	}
	if err := json.Unmarshal(data, &m); err != nil || m.Repository != string(rec.RepositoryID) || m.UniqueID != string(rec.UniqueID) {
		t.Fatalf("marker %s: %+v, %v", data, m, err)
	}
}

// TestCreateRepositoryChecksNamespace: a create writes the namespace
// marker and reads it back once the namespace is claimed. A namespace that
// cannot be written (a file:// directory that cannot be made, an S3
// bucket that does not exist) fails with ErrNamespaceUnwritable naming it
// and its cause, and leaves neither the repository nor its claim.
func TestCreateRepositoryChecksNamespace(t *testing.T) {
	s3 := blobtest.StartFakeS3(t, "present")
	blobs := committed.NewBucketStore(s3.Config)
	t.Cleanup(func() { blobs.Close() })
	store := kv.NewMemoryStore()
	t.Cleanup(func() { store.Close() })
	g := gravelertest.New(t, store, gravelertest.Options{Blobs: blobs})
	ctx := context.Background()

	dir := t.TempDir()
	notDir := filepath.Join(dir, "a-file")
	if err := os.WriteFile(notDir, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ns    graveler.StorageNamespace
		cause string
	}{
		{fileNS(filepath.Join(notDir, "repo")), "not a directory"},
		{"s3://missing-bucket/repo", "NoSuchBucket"},
	} {
		for _, bare := range []bool{false, true} {
			create := g.CreateRepository
			if bare {
				create = g.CreateBareRepository
			}
			_, err := create(ctx, "unwritable", c.ns, "main")
			if !errors.Is(err, graveler.ErrNamespaceUnwritable) || !errors.Is(err, graveler.ErrFailedPrecondition) || errors.Is(err, graveler.ErrNotFound) {
				t.Fatalf("create on %s: %v, want only %v", c.ns, err, graveler.ErrNamespaceUnwritable)
			}
			if msg := err.Error(); !strings.Contains(msg, string(c.ns)) || !strings.Contains(msg, c.cause) {
				t.Fatalf("create on %s: message %q names no namespace or cause (%s)", c.ns, msg, c.cause)
			}
			wantNothingCreated(t, g, store, "unwritable")
		}
	}

	for _, ns := range []graveler.StorageNamespace{fileNS(filepath.Join(dir, "lake", "repo")), "s3://present/lake/repo"} {
		rec, err := g.CreateRepository(ctx, "unwritable", ns, "main")
		if err != nil {
			t.Fatalf("create on %s: %v", ns, err)
		}
		wantMarker(t, blobs, rec)
		if err := g.Set(ctx, "unwritable", "main", graveler.Key("k"), graveler.Value{Identity: []byte("i"), Data: []byte("d")}, graveler.SetOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Commit(ctx, "unwritable", "main", graveler.CommitParams{Committer: "t", Message: "m"}); err != nil {
			t.Fatal(err)
		}
		_, err = g.CreateRepository(ctx, "other", ns, "main")
		if !errors.Is(err, graveler.ErrNamespaceInUse) || !strings.Contains(err.Error(), string(ns)) {
			t.Fatalf("second repository on %s: %v", ns, err)
		}
		if err := g.DeleteRepository(ctx, "unwritable"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNormalizeStorageNamespace: the spellings of one location normalize
// alike; what the blob store cannot open is refused.
func TestNormalizeStorageNamespace(t *testing.T) {
	for in, want := range map[graveler.StorageNamespace]graveler.StorageNamespace{
		"s3://bucket/a/b":           "s3://bucket/a/b",
		"s3://Bucket/a/b/":          "s3://bucket/a/b",
		"s3://bucket//a/b//":        "s3://bucket/a/b",
		"s3://bucket/a/%62":         "s3://bucket/a/b",
		"s3://bucket/A/b":           "s3://bucket/A/b",
		"s3://bucket":               "s3://bucket",
		"s3://bucket/":              "s3://bucket",
		"file:///srv/lake":          "file:///srv/lake",
		"file://localhost/srv/lake": "file:///srv/lake",
		"file:///srv//lake/./":      "file:///srv/lake",
		"file:///srv/x/../lake":     "file:///srv/lake",
		"file:///Srv/Lake":          "file:///Srv/Lake",
		"mem://Pool":                "mem://pool",
		"mem://pool/x/":             "mem://pool/x",
	} {
		got, err := graveler.NormalizeStorageNamespace(in)
		if err != nil || got != want {
			t.Errorf("NormalizeStorageNamespace(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []graveler.StorageNamespace{
		"", "S3://bucket", "gs://bucket", "s3://", "s3:///p", "s3://user@bucket/p", "s3://bucket:9000/p", "s3://bucket/p?x=1",
		"s3://bucket/p#f", "s3://bucket/a//b", "s3://bucket/a/../b", "s3://bucket/a b", "file://host/dir", "file://relative",
		"file:///", "file:///..", "mem://", "%zz://x", graveler.StorageNamespace("s3://b/" + strings.Repeat("x", graveler.MaxStorageNamespaceLen)),
	} {
		if got, err := graveler.NormalizeStorageNamespace(in); !errors.Is(err, graveler.ErrInvalidStorageNamespace) {
			t.Errorf("NormalizeStorageNamespace(%q) = %q, %v; want %v", in, got, err, graveler.ErrInvalidStorageNamespace)
		}
	}
}
