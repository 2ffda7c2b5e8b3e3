package blobtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"graveler/graveler"
	"graveler/graveler/committed"
)

// NewStoreFunc returns a fresh store and a namespace in it that holds no
// objects. The namespace with "-2" appended must also be valid, empty and
// disjoint from it; the suite uses it to check isolation. Run closes every
// store it gets.
type NewStoreFunc func(t *testing.T) (committed.BlobStore, graveler.StorageNamespace)

// Options adapt the suite to a backend.
type Options struct {
	// Age, if set, makes an object's modification time older by d as the
	// store sees it: by setting the time back, or by moving the store's
	// clock forward. The Touch test then checks that a touch brings an old
	// object's time up to the store's present; without Age it checks only
	// that the time does not go back.
	Age func(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace, name string, d time.Duration)
	// SlicesOutliveWrites: a slice GetRange returned may be served again
	// after the object is replaced or deleted through the store (a cache
	// of slices, each an object its reader checks against its ID). The
	// GetRange test then skips reading a slice it read before again after
	// a Put or a Delete.
	SlicesOutliveWrites bool
}

// Run runs the conformance suite against the stores newStore returns.
func Run(t *testing.T, newStore NewStoreFunc) { RunWithOptions(t, newStore, Options{}) }

// RunWithOptions is Run with backend-specific options.
func RunWithOptions(t *testing.T, newStore NewStoreFunc, opts Options) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace)
	}{
		{"RoundTrip", testRoundTrip},
		{"Overwrite", testOverwrite},
		{"GetMissing", testGetMissing},
		{"GetRange", func(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace) { testGetRange(t, s, ns, opts) }},
		{"Exists", testExists},
		{"DeleteIdempotent", testDelete},
		{"InvalidNames", testInvalidNames},
		{"NamespaceIsolation", testIsolation},
		{"Concurrent", testConcurrent},
		{"CancelledContext", testCancelled},
		{"List", testList},
		{"ListPages", testListPages},
		{"ListInvalidPrefixes", testListInvalidPrefixes},
		{"ListWhileWriting", testListWhileWriting},
		{"Stat", testStat},
		{"Sync", testSync},
		{"Touch", func(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace) { testTouch(t, s, ns, opts.Age) }},
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

// testGetRange reads slices of objects: every slice asked is the object's
// bytes there, a slice reaching past the end is ErrShortBlob, a missing
// object ErrBlobNotFound, and a negative offset or an empty slice
// ErrInvalidBlobRange. Slices of a pack are read this way, each a whole
// object that its reader checks against its ID.
func testGetRange(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace, opts Options) {
	ctx := context.Background()
	data := randomBytes(3, 1<<20+17)
	mustPut(t, s, ns, "packs/p", data)
	for _, c := range []struct{ off, n int64 }{{0, 1}, {0, int64(len(data))}, {5, 100}, {1 << 19, 1 << 18}, {int64(len(data)) - 1, 1}} {
		got, err := s.GetRange(ctx, ns, "packs/p", c.off, c.n)
		if err != nil {
			t.Fatalf("GetRange(%d, %d): %v", c.off, c.n, err)
		}
		if want := data[c.off : c.off+c.n]; !bytes.Equal(got, want) {
			t.Fatalf("GetRange(%d, %d) = %d bytes, want %d (first difference at %d)", c.off, c.n, len(got), len(want), firstDiff(got, want))
		}
		// Twice: a store that caches slices serves the same bytes, and
		// the first caller's slice is its own.
		got[0] ^= 0xff
		again, err := s.GetRange(ctx, ns, "packs/p", c.off, c.n)
		if err != nil || !bytes.Equal(again, data[c.off:c.off+c.n]) {
			t.Fatalf("GetRange(%d, %d) again: %v", c.off, c.n, err)
		}
	}
	for _, c := range []struct{ off, n int64 }{{int64(len(data)) - 1, 2}, {int64(len(data)), 1}, {int64(len(data)) + 100, 5}} {
		if _, err := s.GetRange(ctx, ns, "packs/p", c.off, c.n); !errors.Is(err, committed.ErrShortBlob) {
			t.Errorf("GetRange(%d, %d) past the end of %d bytes = %v, want ErrShortBlob", c.off, c.n, len(data), err)
		}
	}
	if _, err := s.GetRange(ctx, ns, "packs/absent", 0, 1); !errors.Is(err, committed.ErrBlobNotFound) {
		t.Errorf("GetRange of a missing object = %v, want ErrBlobNotFound", err)
	}
	// Read again after the object is replaced, and after it is deleted:
	// a store that keeps what it read (or the file open) serves neither
	// the old bytes nor a deleted object.
	newer := randomBytes(4, 4096)
	mustPut(t, s, ns, "packs/p", newer)
	if got, err := s.GetRange(ctx, ns, "packs/p", 100, 50); err != nil || !bytes.Equal(got, newer[100:150]) {
		t.Fatalf("GetRange after Put replaced the object: %v (first difference at %d)", err, firstDiff(got, newer[100:150]))
	}
	if err := s.Delete(ctx, ns, "packs/p"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetRange(ctx, ns, "packs/p", 200, 50); !errors.Is(err, committed.ErrBlobNotFound) {
		t.Errorf("GetRange of a slice not read before, after Delete = %v, want ErrBlobNotFound", err)
	}
	if opts.SlicesOutliveWrites {
		return
	}
	if _, err := s.GetRange(ctx, ns, "packs/p", 100, 50); !errors.Is(err, committed.ErrBlobNotFound) {
		t.Errorf("GetRange after Delete = %v, want ErrBlobNotFound", err)
	}
	for _, c := range []struct{ off, n int64 }{{-1, 1}, {0, 0}, {0, -5}, {math.MaxInt64, 1}} {
		if _, err := s.GetRange(ctx, ns, "packs/p", c.off, c.n); !errors.Is(err, committed.ErrInvalidBlobRange) {
			t.Errorf("GetRange(%d, %d) = %v, want ErrInvalidBlobRange", c.off, c.n, err)
		}
	}
	if _, err := s.GetRange(ctx, ns, "../escape", 0, 1); !errors.Is(err, committed.ErrInvalidBlobName) {
		t.Errorf("GetRange of an escaping name = %v, want ErrInvalidBlobName", err)
	}
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
		if _, err := s.Stat(ctx, ns, name); !errors.Is(err, committed.ErrInvalidBlobName) {
			t.Errorf("Stat(%q) = %v, want ErrInvalidBlobName", short, err)
		}
		if err := s.Touch(ctx, ns, name); !errors.Is(err, committed.ErrInvalidBlobName) {
			t.Errorf("Touch(%q) = %v, want ErrInvalidBlobName", short, err)
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
				// Touching while others read leaves the content whole.
				if err := s.Touch(ctx, ns, "shared"); err != nil {
					t.Errorf("Touch(shared): %v", err)
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
	if _, err := s.Stat(ctx, ns, "present"); !errors.Is(err, context.Canceled) {
		t.Errorf("Stat with a cancelled context = %v, want context.Canceled", err)
	}
	if err := s.Touch(ctx, ns, "present"); !errors.Is(err, context.Canceled) {
		t.Errorf("Touch with a cancelled context = %v, want context.Canceled", err)
	}
	called := false
	if err := s.List(ctx, ns, "", func([]committed.BlobInfo) error { called = true; return nil }); !errors.Is(err, context.Canceled) || called {
		t.Errorf("List with a cancelled context = %v (called back: %v), want context.Canceled", err, called)
	}
	// The cancelled calls changed nothing.
	mustExist(t, s, ns, "cancelled", false)
	mustGet(t, s, ns, "present", []byte("x"))
}

// listAll returns every object under prefix by name, failing the test on a
// name listed twice; pages counts the calls of fn.
func listAll(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace, prefix string) (objs map[string]committed.BlobInfo, pages int) {
	t.Helper()
	objs = map[string]committed.BlobInfo{}
	err := s.List(context.Background(), ns, prefix, func(page []committed.BlobInfo) error {
		pages++
		if len(page) == 0 {
			t.Errorf("List(%q) called back with an empty page", prefix)
		}
		for _, o := range page {
			if _, dup := objs[o.Name]; dup {
				t.Errorf("List(%q) listed %q twice", prefix, o.Name)
			}
			objs[o.Name] = o
		}
		return nil
	})
	if err != nil {
		t.Fatalf("List(%s, %q): %v", ns, prefix, err)
	}
	return objs, pages
}

func sortedNames(objs map[string]committed.BlobInfo) []string {
	names := make([]string, 0, len(objs))
	for n := range objs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// sameSecond: S3 reports times to the second in some answers and to the
// millisecond in others.
func sameSecond(a, b time.Time) bool {
	d := a.Sub(b)
	return d > -time.Second && d < time.Second
}

func testList(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace) {
	if objs, pages := listAll(t, s, ns, ""); len(objs) != 0 || pages != 0 {
		t.Fatalf("List of an empty namespace = %v in %d pages", sortedNames(objs), pages)
	}
	sizes := map[string]int{"l/a/1": 1, "l/a/2": 0, "l/b": 300, "l.x": 7, "lz": 2, "other/l/c": 5}
	for name, n := range sizes {
		mustPut(t, s, ns, name, randomBytes(uint64(n), n))
	}
	mustPut(t, s, ns+"-2", "l/elsewhere", []byte("x"))
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"l.x", "l/a/1", "l/a/2", "l/b", "lz", "other/l/c"}},
		{"l/", []string{"l/a/1", "l/a/2", "l/b"}},
		{"l/a", []string{"l/a/1", "l/a/2"}},
		{"l/a/", []string{"l/a/1", "l/a/2"}},
		{"l/a/1", []string{"l/a/1"}},
		{"l", []string{"l.x", "l/a/1", "l/a/2", "l/b", "lz"}},
		{"l/c", nil},
		{"nothing/", nil},
	} {
		objs, _ := listAll(t, s, ns, tc.prefix)
		if got := sortedNames(objs); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}
	objs, _ := listAll(t, s, ns, "")
	for name, o := range objs {
		if o.Size != int64(sizes[name]) {
			t.Errorf("List: %q has size %d, want %d", name, o.Size, sizes[name])
		}
		st, err := s.Stat(context.Background(), ns, name)
		if err != nil {
			t.Fatalf("Stat(%q): %v", name, err)
		}
		if o.ModTime.IsZero() || !sameSecond(o.ModTime, st.ModTime) {
			t.Errorf("List: %q modified at %v, Stat says %v", name, o.ModTime, st.ModTime)
		}
	}
	// Deleted objects are no longer listed.
	// A blob store's Delete under test, not a kv record.
	if err := s.Delete(context.Background(), ns, "l/a/1"); err != nil {
		t.Fatal(err)
	}
	if objs, _ := listAll(t, s, ns, "l/a"); !slices.Equal(sortedNames(objs), []string{"l/a/2"}) {
		t.Errorf("List after a delete = %q", sortedNames(objs))
	}
	// fn's error ends the listing and is returned as is.
	stop := errors.New("stop here")
	calls := 0
	err := s.List(context.Background(), ns, "", func([]committed.BlobInfo) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("List with a failing callback = %v after %d calls, want the callback's error after 1", err, calls)
	}
}

// testListPages lists more objects than one page of any backend holds.
func testListPages(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace) {
	const n = 1003
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := s.Put(ctx, ns, fmt.Sprintf("p/%04d", i), []byte{byte(i)}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	objs, pages := listAll(t, s, ns, "p/")
	if len(objs) != n {
		t.Fatalf("List = %d objects, want %d", len(objs), n)
	}
	if pages < 2 {
		t.Errorf("List gave %d objects in %d page; want pages of at most 1000", n, pages)
	}
	for i := range n {
		if o, ok := objs[fmt.Sprintf("p/%04d", i)]; !ok || o.Size != 1 {
			t.Fatalf("p/%04d listed %v as %+v", i, ok, o)
		}
	}
}

func testListInvalidPrefixes(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace) {
	mustPut(t, s, ns, "inside", []byte("x"))
	for _, prefix := range []string{"/", "../", "a//", "./", "a/../", "/abs", `a\b`, "a b", "a\x00"} {
		called := false
		err := s.List(context.Background(), ns, prefix, func([]committed.BlobInfo) error { called = true; return nil })
		if !errors.Is(err, committed.ErrInvalidBlobName) || called {
			t.Errorf("List(%q) = %v (called back: %v), want ErrInvalidBlobName", prefix, err, called)
		}
	}
}

func testStat(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace) {
	ctx := context.Background()
	if _, err := s.Stat(ctx, ns, "missing"); !errors.Is(err, committed.ErrBlobNotFound) {
		t.Fatalf("Stat of a missing object = %v, want ErrBlobNotFound", err)
	}
	data := randomBytes(7, 12345)
	mustPut(t, s, ns, "dir/obj", data)
	st, err := s.Stat(ctx, ns, "dir/obj")
	if err != nil {
		t.Fatal(err)
	}
	if st.Name != "dir/obj" || st.Size != int64(len(data)) || st.ModTime.IsZero() {
		t.Fatalf("Stat = %+v, want dir/obj of %d bytes with a modification time", st, len(data))
	}
	if _, err := s.Stat(ctx, ns+"-2", "dir/obj"); !errors.Is(err, committed.ErrBlobNotFound) {
		t.Fatalf("Stat in another namespace = %v, want ErrBlobNotFound", err)
	}
	if _, err := s.Stat(ctx, ns, "dir"); !errors.Is(err, committed.ErrBlobNotFound) {
		t.Fatalf("Stat of a name that only prefixes objects = %v, want ErrBlobNotFound", err)
	}
}

// testSync: a Syncer taken before writes syncs with and without objects
// written (and again), leaves them as they were, and honours a cancelled
// context; two Syncers of one namespace work side by side.
func testSync(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace) {
	ctx := context.Background()
	sy, err := s.BeginWrites(ctx, ns)
	if err != nil {
		t.Fatalf("BeginWrites: %v", err)
	}
	defer sy.Close()
	other, err := s.BeginWrites(ctx, ns)
	if err != nil {
		t.Fatalf("a second BeginWrites: %v", err)
	}
	if err := other.Sync(ctx); err != nil {
		t.Fatalf("Sync with nothing written: %v", err)
	}
	if err := other.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	data := randomBytes(11, 5000)
	mustPut(t, s, ns, "ranges/synced", data)
	if err := s.Touch(ctx, ns, "ranges/synced"); err != nil {
		t.Fatal(err)
	}
	if err := sy.Sync(ctx); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	mustPut(t, s, ns, "ranges/synced", data) // stored again, as writers do
	if err := sy.Sync(ctx); err != nil {
		t.Fatalf("Sync again: %v", err)
	}
	mustGet(t, s, ns, "ranges/synced", data)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := sy.Sync(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sync with a cancelled context = %v, want context.Canceled", err)
	}
	if _, err := s.BeginWrites(cctx, ns); !errors.Is(err, context.Canceled) {
		t.Fatalf("BeginWrites with a cancelled context = %v, want context.Canceled", err)
	}
}

func testTouch(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace, age func(*testing.T, committed.BlobStore, graveler.StorageNamespace, string, time.Duration)) {
	ctx := context.Background()
	if err := s.Touch(ctx, ns, "never/written"); !errors.Is(err, committed.ErrBlobNotFound) {
		t.Fatalf("Touch of a missing object = %v, want ErrBlobNotFound", err)
	}
	// Touch never creates.
	mustExist(t, s, ns, "never/written", false)
	data := randomBytes(11, 70000)
	mustPut(t, s, ns, "t/obj", data)
	mustPut(t, s, ns, "t/other", []byte("other"))
	stat := func(name string) committed.BlobInfo {
		t.Helper()
		st, err := s.Stat(ctx, ns, name)
		if err != nil {
			t.Fatalf("Stat(%q): %v", name, err)
		}
		return st
	}
	before := stat("t/obj")
	const aged = 10 * time.Hour
	if age != nil {
		age(t, s, ns, "t/obj", aged)
		before = stat("t/obj")
	}
	otherBefore := stat("t/other")
	if err := s.Touch(ctx, ns, "t/obj"); err != nil {
		t.Fatalf("Touch: %v", err)
	}
	after := stat("t/obj")
	if after.ModTime.Before(before.ModTime.Add(-time.Second)) {
		t.Errorf("Touch moved the modification time back: %v -> %v", before.ModTime, after.ModTime)
	}
	if age != nil && after.ModTime.Sub(before.ModTime) < aged-time.Hour {
		t.Errorf("Touch of an object %v old moved its time from %v only to %v", aged, before.ModTime, after.ModTime)
	}
	if after.Size != int64(len(data)) {
		t.Errorf("Touch changed the size: %d -> %d", len(data), after.Size)
	}
	mustGet(t, s, ns, "t/obj", data)
	if o := stat("t/other"); !o.ModTime.Equal(otherBefore.ModTime) {
		t.Errorf("Touch of t/obj changed t/other's time: %v -> %v", otherBefore.ModTime, o.ModTime)
	}
	objs, _ := listAll(t, s, ns, "t/")
	if got := sortedNames(objs); !slices.Equal(got, []string{"t/obj", "t/other"}) {
		t.Errorf("List after Touch = %q", got)
	}
	if l := objs["t/obj"]; !sameSecond(l.ModTime, after.ModTime) {
		t.Errorf("List after Touch: modified at %v, Stat says %v", l.ModTime, after.ModTime)
	}
}

// testListWhileWriting lists while other goroutines write and delete
// objects next to those listed: every listing succeeds and holds every
// object that stayed put throughout.
func testListWhileWriting(t *testing.T, s committed.BlobStore, ns graveler.StorageNamespace) {
	ctx := context.Background()
	const stable = 50
	for i := range stable {
		mustPut(t, s, ns, fmt.Sprintf("w/stable-%03d", i), []byte("s"))
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				name := fmt.Sprintf("w/busy-%d-%d", g, i%8)
				if err := s.Put(ctx, ns, name, randomBytes(uint64(i), 512)); err != nil {
					t.Errorf("Put(%q): %v", name, err)
					return
				}
				// A blob store's Delete under test, not a kv record.
				if err := s.Delete(ctx, ns, fmt.Sprintf("w/busy-%d-%d", g, (i+4)%8)); err != nil {
					t.Errorf("Delete: %v", err)
					return
				}
			}
		}()
	}
	for range 30 {
		seen := 0
		err := s.List(ctx, ns, "w/", func(page []committed.BlobInfo) error {
			for _, o := range page {
				if strings.HasPrefix(o.Name, "w/stable-") {
					seen++
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("List while writing: %v", err)
			break
		}
		if seen != stable {
			t.Errorf("List while writing saw %d of the %d objects nobody touched", seen, stable)
			break
		}
	}
	close(done)
	wg.Wait()
}
