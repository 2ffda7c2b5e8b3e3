package blobtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"graveler/graveler"
	"graveler/graveler/committed"
)

// NewStoreFunc returns a fresh store and a namespace in it that holds no
// objects. The namespace with "-2" appended must also be valid, empty and
// disjoint from it; the suite uses it to check isolation. Run closes every
// store it gets.
type NewStoreFunc func(t *testing.T) (committed.BlobStore, graveler.StorageNamespace)

// Run runs the conformance suite against the stores newStore returns.
func Run(t *testing.T, newStore NewStoreFunc) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace)
	}{
		{"RoundTrip", testRoundTrip},
		{"Overwrite", testOverwrite},
		{"GetMissing", testGetMissing},
		{"Exists", testExists},
		{"DeleteIdempotent", testDelete},
		{"InvalidNames", testInvalidNames},
		{"NamespaceIsolation", testIsolation},
		{"Concurrent", testConcurrent},
		{"CancelledContext", testCancelled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, ns := newStore(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, s, ns)
		})
	}
}

// randomBytes is deterministic per seed so a failure reproduces.
func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func mustPut(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace, name string, data []byte) {
	t.Helper()
	if err := s.Put(context.Background(), ns, name, data); err != nil {
		t.Fatalf("Put(%s, %q): %v", ns, name, err)
	}
}

func mustGet(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace, name string, want []byte) {
	t.Helper()
	got, err := s.Get(context.Background(), ns, name)
	if err != nil {
		t.Fatalf("Get(%s, %q): %v", ns, name, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%s, %q) = %d bytes, want %d bytes (first difference at %d)", ns, name, len(got), len(want), firstDiff(got, want))
	}
}

func mustExist(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace, name string, want bool) {
	t.Helper()
	ok, err := s.Exists(context.Background(), ns, name)
	if err != nil {
		t.Fatalf("Exists(%s, %q): %v", ns, name, err)
	}
	if ok != want {
		t.Fatalf("Exists(%s, %q) = %v, want %v", ns, name, ok, want)
	}
}

func mustBeMissing(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace, name string) {
	t.Helper()
	got, err := s.Get(context.Background(), ns, name)
	if !errors.Is(err, committed.ErrBlobNotFound) {
		t.Fatalf("Get(%s, %q) = %d bytes, %v; want ErrBlobNotFound", ns, name, len(got), err)
	}
	if !errors.Is(err, graveler.ErrNotFound) {
		t.Fatalf("Get(%s, %q) error %v does not wrap graveler.ErrNotFound", ns, name, err)
	}
}

func firstDiff(a, b []byte) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func testRoundTrip(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace) {
	allBytes := make([]byte, 256)
	for i := range allBytes {
		allBytes[i] = byte(i)
	}
	objects := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"small.txt", []byte("hello")},
		{"bin/all-bytes", allBytes},
		{"ranges/0f/0f1e2d3c4b5a.range", randomBytes(1, 4096)},
		{"meta_ranges/big-5MiB", randomBytes(2, 5<<20)},
		{"deep/a/b/c/d/e/f.g", []byte{0, 0, 0}},
	}
	for _, o := range objects {
		mustPut(t, s, ns, o.name, o.data)
	}
	for _, o := range objects {
		mustGet(t, s, ns, o.name, o.data)
		mustExist(t, s, ns, o.name, true)
	}
	// A returned slice is the caller's: changing it must not change the object.
	got, err := s.Get(context.Background(), ns, "small.txt")
	if err != nil {
		t.Fatal(err)
	}
	got[0] = 'J'
	mustGet(t, s, ns, "small.txt", []byte("hello"))
}

func testOverwrite(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace) {
	mustPut(t, s, ns, "obj", []byte("first version, longer"))
	mustPut(t, s, ns, "obj", []byte("second"))
	mustGet(t, s, ns, "obj", []byte("second"))
	mustPut(t, s, ns, "obj", nil)
	mustGet(t, s, ns, "obj", nil)
	// Same content again: harmless, as callers address objects by content.
	mustPut(t, s, ns, "obj", nil)
	mustGet(t, s, ns, "obj", nil)
}

func testGetMissing(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace) {
	mustBeMissing(t, s, ns, "never-written")
	mustBeMissing(t, s, ns, "no/such/dir/object")
	mustPut(t, s, ns, "dir/present", []byte("x"))
	mustBeMissing(t, s, ns, "dir/absent")
}

func testExists(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace) {
	mustExist(t, s, ns, "e", false)
	mustPut(t, s, ns, "e", []byte("x"))
	mustExist(t, s, ns, "e", true)
	mustExist(t, s, ns, "e.other", false)
	mustExist(t, s, ns, "E", false)
}

func testDelete(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace) {
	ctx := context.Background()
	mustPut(t, s, ns, "d/1", []byte("one"))
	mustPut(t, s, ns, "d/2", []byte("two"))
	for range 2 {
		// A blob store's Delete under test, not a kv record.
		if err := s.Delete(ctx, ns, "d/1"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		mustExist(t, s, ns, "d/1", false)
		mustBeMissing(t, s, ns, "d/1")
	}
	// A blob store's Delete under test, not a kv record.
	if err := s.Delete(ctx, ns, "never/written"); err != nil {
		t.Fatalf("Delete of a missing object: %v", err)
	}
	mustGet(t, s, ns, "d/2", []byte("two"))
	// A deleted name can be written again.
	mustPut(t, s, ns, "d/1", []byte("again"))
	mustGet(t, s, ns, "d/1", []byte("again"))
}

// invalidNames could leave the namespace or are ambiguous once joined to it.
var invalidNames = []string{
	"", "..", ".", "../x", "a/../../x", "/abs", "/", "a//b", "a/./b", "a/..",
	"a/", "./a", `a\b`, `..\x`, "a b", "a\x00b", "a:b", "~/x",
	string(bytes.Repeat([]byte("a"), 1025)),
}

func testInvalidNames(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace) {
	ctx := context.Background()
	for _, name := range invalidNames {
		short := name
		if len(short) > 20 {
			short = short[:20] + "..."
		}
		if err := s.Put(ctx, ns, name, []byte("escape")); !errors.Is(err, committed.ErrInvalidBlobName) {
			t.Errorf("Put(%q) = %v, want ErrInvalidBlobName", short, err)
		}
		if _, err := s.Get(ctx, ns, name); !errors.Is(err, committed.ErrInvalidBlobName) {
			t.Errorf("Get(%q) = %v, want ErrInvalidBlobName", short, err)
		}
		if _, err := s.Exists(ctx, ns, name); !errors.Is(err, committed.ErrInvalidBlobName) {
			t.Errorf("Exists(%q) = %v, want ErrInvalidBlobName", short, err)
		}
		// A blob store's Delete under test, not a kv record.
		if err := s.Delete(ctx, ns, name); !errors.Is(err, committed.ErrInvalidBlobName) {
			t.Errorf("Delete(%q) = %v, want ErrInvalidBlobName", short, err)
		}
	}
	// Nothing landed under the names the invalid ones would clean up to.
	for _, name := range []string{"x", "abs", "a/b", "a", "b", "escape"} {
		mustExist(t, s, ns, name, false)
		mustExist(t, s, ns+"-2", name, false)
	}
	// A long, deep valid name still works. (Backends bound a segment by the
	// file system's 255 bytes and a whole key, prefix included, by S3's 1024.)
	long := strings.Repeat(strings.Repeat("a", 99)+"/", 6) + "z"
	mustPut(t, s, ns, long, []byte("long"))
	mustGet(t, s, ns, long, []byte("long"))
}

func testIsolation(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace) {
	ctx := context.Background()
	other := ns + "-2"
	mustPut(t, s, ns, "shared/name", []byte("in first"))
	mustExist(t, s, other, "shared/name", false)
	mustBeMissing(t, s, other, "shared/name")
	mustPut(t, s, other, "shared/name", []byte("in second"))
	mustGet(t, s, ns, "shared/name", []byte("in first"))
	mustGet(t, s, other, "shared/name", []byte("in second"))
	// A blob store's Delete under test, not a kv record.
	if err := s.Delete(ctx, other, "shared/name"); err != nil {
		t.Fatal(err)
	}
	mustGet(t, s, ns, "shared/name", []byte("in first"))
	mustPut(t, s, other, "only-second", []byte("2"))
	mustExist(t, s, ns, "only-second", false)
}

func testConcurrent(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace) {
	const workers, perWorker = 16, 8
	ctx := context.Background()
	shared := randomBytes(99, 64<<10)
	mustPut(t, s, ns, "shared", shared)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				name := fmt.Sprintf("w%02d/obj-%d", w, i)
				data := randomBytes(uint64(w*1000+i), 1000+w*97+i)
				if err := s.Put(ctx, ns, name, data); err != nil {
					t.Errorf("Put(%q): %v", name, err)
					return
				}
				// Every worker also writes the same content under one name.
				if err := s.Put(ctx, ns, "same", []byte("identical")); err != nil {
					t.Errorf("Put(same): %v", err)
					return
				}
				got, err := s.Get(ctx, ns, name)
				if err != nil || !bytes.Equal(got, data) {
					t.Errorf("Get(%q) = %d bytes, %v; want %d bytes", name, len(got), err, len(data))
					return
				}
				got, err = s.Get(ctx, ns, "shared")
				if err != nil || !bytes.Equal(got, shared) {
					t.Errorf("Get(shared) = %d bytes, %v", len(got), err)
					return
				}
				if _, err := s.Get(ctx, ns, fmt.Sprintf("w%02d/missing-%d", w, i)); !errors.Is(err, committed.ErrBlobNotFound) {
					t.Errorf("Get(missing) = %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for w := range workers {
		for i := range perWorker {
			mustGet(t, s, ns, fmt.Sprintf("w%02d/obj-%d", w, i), randomBytes(uint64(w*1000+i), 1000+w*97+i))
		}
	}
	mustGet(t, s, ns, "same", []byte("identical"))
}

func testCancelled(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace) {
	mustPut(t, s, ns, "present", []byte("x"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Put(ctx, ns, "cancelled", []byte("y")); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with a cancelled context = %v, want context.Canceled", err)
	}
	if got, err := s.Get(ctx, ns, "present"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a cancelled context = %q, %v; want context.Canceled", got, err)
	}
	if _, err := s.Exists(ctx, ns, "present"); !errors.Is(err, context.Canceled) {
		t.Errorf("Exists with a cancelled context = %v, want context.Canceled", err)
	}
	// A blob store's Delete under test, not a kv record.
	if err := s.Delete(ctx, ns, "present"); !errors.Is(err, context.Canceled) {
		t.Errorf("Delete with a cancelled context = %v, want context.Canceled", err)
	}
	// The cancelled calls changed nothing.
	mustExist(t, s, ns, "cancelled", false)
	mustGet(t, s, ns, "present", []byte("x"))
}
