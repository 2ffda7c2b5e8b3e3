//go:build linux && (amd64 || arm64)

package committed

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestRenameNoReplace: a temporary file takes a free name without an
// fsync, and is refused a name already taken, which is how
// fileWriteRenamed knows to fsync an object before it replaces one that
// may be durable already; the replacement then lands whole.
func TestRenameNoReplace(t *testing.T) {
	syncs := 0
	defer func(f func(*os.File) error) { syncBeforeReplace = f }(syncBeforeReplace)
	syncBeforeReplace = func(f *os.File) error { syncs++; return f.Sync() }
	dir := t.TempDir()
	tmp, p := filepath.Join(dir, "tmp"), filepath.Join(dir, "obj")
	if err := fileWriteRenamed(filepath.Join(dir, "new"), []byte("new")); err != nil {
		t.Fatal(err)
	}
	if syncs != 0 {
		t.Fatal("an object stored under a free name was fsynced: the writer's Syncer covers it")
	}
	if err := os.WriteFile(tmp, []byte("first"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := renameNoReplace(tmp, p); err != nil {
		t.Fatalf("rename to a free name: %v", err)
	}
	if err := os.WriteFile(tmp, []byte("second"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := renameNoReplace(tmp, p); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("rename onto a taken name = %v, want fs.ErrExist", err)
	}
	if got, _ := os.ReadFile(p); string(got) != "first" {
		t.Fatalf("the taken name now holds %q", got)
	}
	if err := fileWriteRenamed(p, []byte("third")); err != nil {
		t.Fatalf("replacing an object: %v", err)
	}
	if got, _ := os.ReadFile(p); string(got) != "third" {
		t.Fatalf("after replacing: %q", got)
	}
	if syncs != 1 {
		t.Fatalf("replacing an object fsynced the new file %d times, want once before the rename", syncs)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 { // new, obj and the refused tmp
		t.Fatalf("directory holds %d entries, want new, obj and the refused temporary file", len(entries))
	}
}

// TestFileSyncErrors: a file:// namespace whose directory cannot be
// opened cannot begin writes, and says so.
func TestFileSyncErrors(t *testing.T) {
	ns, dir := fileNS(t)
	blobs := NewBucketStore(BucketConfig{})
	t.Cleanup(func() { blobs.Close() })
	ctx := context.Background()
	sy, err := blobs.BeginWrites(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := blobs.Put(ctx, ns, "ranges/a", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := sy.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sy.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := blobs.BeginWrites(ctx, ns); err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("BeginWrites on a namespace whose directory is gone = %v, want an error", err)
	}
}
