package committed

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"gocloud.dev/blob/fileblob"

	"graveler/graveler"
)

func fileTestNS(dir string) graveler.StorageNamespace {
	return graveler.StorageNamespace((&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String())
}

// forEachFileWrite runs fn with the unnamed-file write where the system
// has it and with the temporary-file-and-rename fallback.
func forEachFileWrite(t *testing.T, fn func(t *testing.T)) {
	for _, fallback := range []bool{false, true} {
		t.Run(fmt.Sprintf("rename=%v", fallback), func(t *testing.T) {
			if fallback {
				was := noTmpfile.Load()
				noTmpfile.Store(true)
				t.Cleanup(func() { noTmpfile.Store(was) })
			}
			fn(t)
		})
	}
}

// TestFileStoreInterop checks that the direct file path and fileblob read
// each other's objects: a namespace written before stays readable.
func TestFileStoreInterop(t *testing.T) {
	forEachFileWrite(t, func(t *testing.T) {
		ctx := context.Background()
		dir := filepath.Join(t.TempDir(), "ns")
		s := NewBucketStore(BucketConfig{})
		defer s.Close()
		ns := fileTestNS(dir)
		if err := s.Put(ctx, ns, "_graveler/ranges/new", []byte("written directly")); err != nil {
			t.Fatal(err)
		}
		b, err := fileblob.OpenBucket(dir, &fileblob.Options{Metadata: fileblob.MetadataDontWrite, NoTempDir: true})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if got, err := b.ReadAll(ctx, "_graveler/ranges/new"); err != nil || string(got) != "written directly" {
			t.Fatalf("fileblob read %q, %v", got, err)
		}
		if err := b.WriteAll(ctx, "_graveler/metaranges/old", []byte("written by fileblob"), nil); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Get(ctx, ns, "_graveler/metaranges/old"); err != nil || string(got) != "written by fileblob" {
			t.Fatalf("Get = %q, %v", got, err)
		}
	})
}

// TestFilePutLeavesOnlyObjects checks that concurrent writes, new and
// replacing, leave exactly the objects (no temporary files), each whole,
// replaced ones with their last content.
func TestFilePutLeavesOnlyObjects(t *testing.T) {
	forEachFileWrite(t, func(t *testing.T) {
		ctx := context.Background()
		dir := filepath.Join(t.TempDir(), "ns")
		s := NewBucketStore(BucketConfig{})
		defer s.Close()
		ns := fileTestNS(dir)
		content := func(i, round int) []byte {
			return bytes.Repeat([]byte{byte(i), byte(round)}, 1000+i)
		}
		const objects = 40
		for round := range 2 {
			var wg sync.WaitGroup
			for i := range objects {
				wg.Go(func() {
					if err := s.Put(ctx, ns, fmt.Sprintf("p%d/obj-%02d", i%3, i), content(i, round)); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
		}
		var names []string
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(dir, p)
				names = append(names, filepath.ToSlash(rel))
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != objects {
			t.Fatalf("%d files after writing %d objects: %v", len(names), objects, names)
		}
		for i := range objects {
			name := fmt.Sprintf("p%d/obj-%02d", i%3, i)
			got, err := s.Get(ctx, ns, name)
			if err != nil || !bytes.Equal(got, content(i, 1)) {
				t.Fatalf("Get(%s) = %d bytes, %v; want the second write", name, len(got), err)
			}
		}
	})
}

// TestFileGetNotFound: nothing, a directory, or a path through a file is
// no object.
func TestFileGetNotFound(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := NewBucketStore(BucketConfig{})
	defer s.Close()
	ns := fileTestNS(dir)
	if err := s.Put(ctx, ns, "d/file", []byte("x")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"missing", "d", "d/file/below", "e/missing"} {
		if _, err := s.Get(ctx, ns, name); !errors.Is(err, ErrBlobNotFound) {
			t.Errorf("Get(%q) = %v, want ErrBlobNotFound", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "e")); err == nil {
		t.Error("a Get created a directory")
	}
}

// keepingStore keeps every slice Put hands it, uncopied, as a store that
// holds on to them (an upload in flight) would.
type keepingStore struct {
	BlobStore
	mu   sync.Mutex
	kept map[string][]byte
}

func (s *keepingStore) Put(ctx context.Context, ns graveler.StorageNamespace, name string, data []byte) error {
	s.mu.Lock()
	s.kept[name] = data
	s.mu.Unlock()
	return s.BlobStore.Put(ctx, ns, name, data)
}

// TestWrittenBuffersStayUnchanged checks that the writer never reuses a
// buffer it handed to the store: every object Put received still hashes
// to its name once later ranges and nodes were built, and every object of
// every pack still hashes to the ID its index gives.
func TestWrittenBuffersStayUnchanged(t *testing.T) {
	for _, unpacked := range []bool{false, true} {
		t.Run(fmt.Sprintf("unpacked=%v", unpacked), func(t *testing.T) {
			ctx := context.Background()
			store := &keepingStore{BlobStore: NewBucketStore(BucketConfig{}), kept: map[string][]byte{}}
			defer store.Close()
			// Small packs, so that many are sealed while later ones fill.
			m := NewManager(store, Config{MinRangeSize: 256, BoundaryMask: 3, MinNodeSize: 256, NodeMask: 3, PackBytes: 4 << 10, Unpacked: unpacked})
			ns := testNS()
			base, err := m.WriteMetaRangeByIterator(ctx, ns, newSliceIter(numbered(3000, "a")))
			if err != nil {
				t.Fatal(err)
			}
			var changes []graveler.ValueRecord
			for i := 0; i < 3000; i += 7 {
				changes = append(changes, rec(fmt.Sprintf("key-%06d", i), "b", "changed"))
			}
			if _, _, err := m.Apply(ctx, ns, base, newSliceIter(changes), graveler.ApplyOptions{}); err != nil {
				t.Fatal(err)
			}
			objects := 0
			for name, data := range store.kept {
				if !strings.HasPrefix(name, packsPrefix) {
					objects++
					if _, body := splitTrailerForTest(data); !strings.HasSuffix(name, contentID(body)) {
						t.Fatalf("%s changed after it was handed to the store", name)
					}
					continue
				}
				footer := data[len(data)-packFooterLen:]
				off, n, err := parsePackFooter(footer, int64(len(data)))
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				entries, err := parsePackIndex(data[off:off+n], off)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for _, e := range entries {
					objects++
					_, body := splitTrailerForTest(data[e.offset : e.offset+e.length])
					if contentID(body) != hex.EncodeToString(e.id[:]) {
						t.Fatalf("an object of %s changed after it was handed to the store", name)
					}
				}
			}
			if objects < 50 {
				t.Fatalf("only %d objects written: the tree is too small to test", objects)
			}
		})
	}
}

// splitTrailerForTest returns an object's bytes without a locations
// trailer (what its ID hashes).
func splitTrailerForTest(data []byte) (trailer, body []byte) {
	body, trailer, err := splitLocations(data)
	if err != nil {
		return nil, data
	}
	return trailer, body
}

// BenchmarkCommitObjectsFilesVsPack writes what a commit of 1,000 random
// keys into 10M entries writes (about 1,760 objects of 8.4 KB on average)
// to a file:// namespace as the store does, one file per object with the
// tree writer's parallelism, and, as a baseline in the same run, appended
// to one file; both end with the one syncfs a tree write makes. Its
// ratio is what packing a commit's objects into one could save
// (performance.md, "What the open goals need").
func BenchmarkCommitObjectsFilesVsPack(b *testing.B) {
	const objects, size = 1760, 8400
	data := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	ctx := context.Background()
	// rounds runs write once per iteration, between BeginWrites and the
	// Sync a tree write ends with.
	rounds := func(b *testing.B, write func(s BlobStore, ns graveler.StorageNamespace, dir string, round int)) {
		s := NewBucketStore(BucketConfig{})
		defer s.Close()
		dir := b.TempDir()
		ns := fileTestNS(dir)
		round := 0
		for b.Loop() {
			round++
			syncer, err := s.BeginWrites(ctx, ns)
			if err != nil {
				b.Fatal(err)
			}
			write(s, ns, dir, round)
			if err := syncer.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			syncer.Close()
		}
	}
	b.Run("layout=files", func(b *testing.B) {
		rounds(b, func(s BlobStore, ns graveler.StorageNamespace, _ string, round int) {
			var wg sync.WaitGroup
			sem := make(chan struct{}, DefaultWriteParallelism)
			for i := range objects {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					if err := s.Put(ctx, ns, fmt.Sprintf("ranges/%d-%d", round, i), data); err != nil {
						b.Error(err)
					}
				})
			}
			wg.Wait()
		})
	})
	b.Run("layout=pack", func(b *testing.B) {
		rounds(b, func(_ BlobStore, _ graveler.StorageNamespace, dir string, round int) {
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("pack-%d", round)))
			if err != nil {
				b.Fatal(err)
			}
			for range objects {
				if _, err := f.Write(data); err != nil {
					b.Fatal(err)
				}
			}
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
		})
	})
}
