//go:build linux && (amd64 || arm64)

package committed

import (
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
	dir := t.TempDir()
	tmp, p := filepath.Join(dir, "tmp"), filepath.Join(dir, "obj")
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
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 { // obj and the refused tmp
		t.Fatalf("directory holds %d entries, want obj and the refused temporary file", len(entries))
	}
}
