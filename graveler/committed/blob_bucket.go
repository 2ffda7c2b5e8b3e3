package committed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/gcerrors"

	"graveler/graveler"
)

// BucketConfig tunes how NewBucketStore reaches its backends. The zero value
// serves file:// and mem:// and reaches S3 the way the AWS SDK does by
// default (environment, shared config and credentials files).
type BucketConfig struct {
	// S3Endpoint points s3:// namespaces at an S3-compatible server
	// (for example "http://127.0.0.1:9000"); empty means AWS.
	S3Endpoint string
	// S3Region overrides the region from the AWS configuration chain.
	S3Region string
	// S3ForcePathStyle addresses buckets as endpoint/bucket instead of
	// bucket.endpoint, which most S3-compatible servers need.
	S3ForcePathStyle bool
}

// ErrBlobStoreClosed: the store was used after Close.
var ErrBlobStoreClosed = errors.New("committed: blob store closed")

// NewBucketStore returns a BlobStore backed by gocloud.dev buckets: file:///abs/dir
// keeps objects under dir (created if missing), mem://name keeps them in
// memory for the store's lifetime (every use of the same name sees the same
// objects) and s3://bucket/prefix keeps them under prefix in an S3 bucket.
// Each namespace's bucket is opened once and reused; Close closes them all.
//
// A file:// namespace is a directory tree, so it cannot hold both "a" and
// "a/b", and fileblob reserves names ending in ".attrs"; callers' names
// (hash-named ranges under fixed prefixes) avoid both. Its Put and Get
// reach the files directly (filePut, fileRead) rather than through
// fileblob, writing the same files fileblob reads.
func NewBucketStore(cfg BucketConfig) BlobStore {
	return &blobBucketStore{cfg: cfg, buckets: map[graveler.StorageNamespace]*blob.Bucket{}, packs: newPackFiles()}
}

type blobBucketStore struct {
	cfg BucketConfig

	// s3 holds the lazily built S3 client shared by every s3:// namespace.
	s3 blobS3Client

	mu      sync.Mutex
	closed  bool
	buckets map[graveler.StorageNamespace]*blob.Bucket

	// fileDirs maps a file:// namespace to its directory (filePath).
	fileDirs sync.Map
	// packs keeps recently read packs of file:// namespaces open.
	packs *packFiles
}

// bucket returns the open bucket for ns, opening it on first use. Opening is
// cheap (no network round trip), so it happens under the lock; a failed open
// is not remembered, so a transient failure (say, a directory that could not
// yet be created) is retried by the next call.
func (s *blobBucketStore) bucket(ctx context.Context, ns graveler.StorageNamespace) (*blob.Bucket, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrBlobStoreClosed
	}
	if b, ok := s.buckets[ns]; ok {
		return b, nil
	}
	b, err := s.open(ctx, ns)
	if err != nil {
		return nil, err
	}
	s.buckets[ns] = b
	return b, nil
}

func (s *blobBucketStore) open(ctx context.Context, ns graveler.StorageNamespace) (*blob.Bucket, error) {
	u, err := url.Parse(string(ns))
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", graveler.ErrInvalidStorageNamespace, ns, err)
	}
	switch u.Scheme {
	case "mem":
		if u.Host == "" && u.Path == "" {
			return nil, fmt.Errorf("%w: %q has no name", graveler.ErrInvalidStorageNamespace, ns)
		}
		// No MD5 attribute: nothing reads it, and it costs a hash of
		// every range written.
		return memblob.OpenBucket(&memblob.Options{NoMD5: true}), nil
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("%w: %q names a host", graveler.ErrInvalidStorageNamespace, ns)
		}
		dir := filepath.FromSlash(u.Path)
		if !filepath.IsAbs(dir) || filepath.Clean(dir) == string(filepath.Separator) {
			return nil, fmt.Errorf("%w: %q needs an absolute directory other than the root", graveler.ErrInvalidStorageNamespace, ns)
		}
		// Temporary files go next to their targets so the final rename never
		// crosses file systems; no attribute sidecars, as callers keep none.
		b, err := fileblob.OpenBucket(filepath.Clean(dir), &fileblob.Options{
			CreateDir: true,
			NoTempDir: true,
			Metadata:  fileblob.MetadataDontWrite,
		})
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", ns, err)
		}
		return b, nil
	case "s3":
		return s.openS3(ctx, ns, u)
	}
	return nil, fmt.Errorf("%w: %q: unsupported scheme %q", graveler.ErrInvalidStorageNamespace, ns, u.Scheme)
}

func (s *blobBucketStore) Put(ctx context.Context, ns graveler.StorageNamespace, name string, data []byte) error {
	if err := ValidateBlobName(name); err != nil {
		return err
	}
	b, err := s.bucket(ctx, ns)
	if err != nil {
		return err
	}
	if p, ok := s.filePath(ns, name); ok {
		err := filePut(p, data)
		// After the file is replaced: a read between would open the old.
		s.packs.forget(p)
		if err != nil {
			return fmt.Errorf("put %s %q: %w", ns, name, err)
		}
		return nil
	}
	// A fixed content type keeps the writer from sniffing the first bytes.
	opts := &blob.WriterOptions{ContentType: "application/octet-stream"}
	if u, _ := url.Parse(string(ns)); u != nil && u.Scheme == "s3" {
		// WriteAll sends the data's MD5 as Content-MD5, which S3 checks.
		err = b.WriteAll(ctx, name, data, opts)
	} else {
		// In memory and on local disk an MD5 would only check data
		// against itself, at two hashes of every range written.
		err = writeBlob(ctx, b, name, data, opts)
	}
	if err != nil {
		return fmt.Errorf("put %s %q: %w", ns, name, err)
	}
	return nil
}

// writeBlob is WriteAll without the MD5 it computes and checks.
func writeBlob(ctx context.Context, b *blob.Bucket, name string, data []byte, opts *blob.WriterOptions) error {
	w, err := b.NewWriter(ctx, name, opts)
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		_ = w.Close()
		return err
	}
	return w.Close()
}

func (s *blobBucketStore) Get(ctx context.Context, ns graveler.StorageNamespace, name string) ([]byte, error) {
	if err := ValidateBlobName(name); err != nil {
		return nil, err
	}
	b, err := s.bucket(ctx, ns)
	if err != nil {
		return nil, err
	}
	if p, ok := s.filePath(ns, name); ok {
		data, err := fileRead(p)
		if err != nil {
			if fileNotFound(err) {
				return nil, fmt.Errorf("get %s %q: %w", ns, name, ErrBlobNotFound)
			}
			return nil, fmt.Errorf("get %s %q: %w", ns, name, err)
		}
		return data, nil
	}
	data, err := b.ReadAll(ctx, name)
	if err != nil {
		return nil, blobMapErr("get", ns, name, err)
	}
	return data, nil
}

func (s *blobBucketStore) GetRange(ctx context.Context, ns graveler.StorageNamespace, name string, offset, length int64) ([]byte, error) {
	if err := checkBlobRange(name, offset, length); err != nil {
		return nil, err
	}
	b, err := s.bucket(ctx, ns)
	if err != nil {
		return nil, err
	}
	if p, ok := s.filePath(ns, name); ok {
		data, err := s.packs.readAt(p, offset, length)
		switch {
		case err == nil:
			return data, nil
		case fileNotFound(err):
			return nil, fmt.Errorf("get %s %q: %w", ns, name, ErrBlobNotFound)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, fmt.Errorf("get %s %q at %d+%d: %w", ns, name, offset, length, ErrShortBlob)
		}
		return nil, fmt.Errorf("get %s %q: %w", ns, name, err)
	}
	r, err := b.NewRangeReader(ctx, name, offset, length, nil)
	if err != nil {
		if rangeNotSatisfiable(err) {
			return nil, fmt.Errorf("get %s %q at %d+%d: %w", ns, name, offset, length, ErrShortBlob)
		}
		return nil, blobMapErr("get", ns, name, err)
	}
	defer r.Close()
	// The length comes from a reference, which may be damaged: nothing
	// is allocated for bytes the object does not hold.
	if size := r.Size(); offset > size || length > size-offset {
		return nil, fmt.Errorf("get %s %q at %d+%d of %d bytes: %w", ns, name, offset, length, size, ErrShortBlob)
	}
	data := make([]byte, length)
	if _, err := io.ReadFull(r, data); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("get %s %q at %d+%d: %w", ns, name, offset, length, ErrShortBlob)
		}
		return nil, blobMapErr("get", ns, name, err)
	}
	return data, nil
}

// rangeNotSatisfiable reports an HTTP store's answer to a range that
// starts past the object's end (416).
func rangeNotSatisfiable(err error) bool {
	var status interface{ HTTPStatusCode() int }
	return errors.As(err, &status) && status.HTTPStatusCode() == http.StatusRequestedRangeNotSatisfiable
}

// fileDir returns a file:// namespace's directory. It is remembered:
// parsing the URL cost about 8% of a Put's CPU, and a large commit makes
// thousands of Puts, Stats and Touches.
func (s *blobBucketStore) fileDir(ns graveler.StorageNamespace) (string, bool) {
	if !fileNamespace(ns) {
		return "", false
	}
	dir, ok := s.fileDirs.Load(ns)
	if !ok {
		u, err := url.Parse(string(ns))
		if err != nil || u.Scheme != "file" {
			return "", false
		}
		dir, _ = s.fileDirs.LoadOrStore(ns, filepath.Clean(filepath.FromSlash(u.Path)))
	}
	return dir.(string), true
}

// filePath returns the path of a file:// namespace's object, which Put
// and Get reach directly (see filePut). Valid names are the files'
// relative paths: fileblob escapes nothing a valid name can hold. Names
// fileblob reserves for its sidecars are left for it to refuse.
func (s *blobBucketStore) filePath(ns graveler.StorageNamespace, name string) (string, bool) {
	if strings.HasSuffix(name, ".attrs") {
		return "", false
	}
	dir, ok := s.fileDir(ns)
	if !ok {
		return "", false
	}
	return filepath.Join(dir, filepath.FromSlash(name)), true
}

func (s *blobBucketStore) Exists(ctx context.Context, ns graveler.StorageNamespace, name string) (bool, error) {
	if err := ValidateBlobName(name); err != nil {
		return false, err
	}
	b, err := s.bucket(ctx, ns)
	if err != nil {
		return false, err
	}
	ok, err := b.Exists(ctx, name)
	if err != nil {
		return false, fmt.Errorf("exists %s %q: %w", ns, name, err)
	}
	return ok, nil
}

func (s *blobBucketStore) Delete(ctx context.Context, ns graveler.StorageNamespace, name string) error {
	if err := ValidateBlobName(name); err != nil {
		return err
	}
	b, err := s.bucket(ctx, ns)
	if err != nil {
		return err
	}
	// A blob, not a kv record: content-addressed and immutable, so a re-created object has the same content.
	err = b.Delete(ctx, name)
	if p, ok := s.filePath(ns, name); ok {
		// Once it is gone: a read before would open it again.
		s.packs.forget(p)
	}
	if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return fmt.Errorf("delete %s %q: %w", ns, name, err)
	}
	return nil
}

// blobListPage is how many objects List asks a backend for at a time
// (S3's own limit per request).
const blobListPage = 1000

func (s *blobBucketStore) List(ctx context.Context, ns graveler.StorageNamespace, prefix string, fn func([]BlobInfo) error) error {
	if err := ValidateBlobPrefix(prefix); err != nil {
		return err
	}
	b, err := s.bucket(ctx, ns)
	if err != nil {
		return err
	}
	if dir, ok := s.fileDir(ns); ok {
		return fileList(ctx, ns, dir, prefix, fn)
	}
	opts := &blob.ListOptions{Prefix: prefix}
	token := blob.FirstPageToken
	page := make([]BlobInfo, 0, blobListPage)
	for {
		objs, next, err := b.ListPage(ctx, token, blobListPage, opts)
		if err != nil {
			return fmt.Errorf("list %s %q: %w", ns, prefix, err)
		}
		page = page[:0]
		for _, o := range objs {
			if o.IsDir {
				continue
			}
			page = append(page, BlobInfo{Name: o.Key, Size: o.Size, ModTime: o.ModTime})
		}
		if len(page) > 0 {
			if err := fn(page); err != nil {
				return err
			}
		}
		if len(next) == 0 {
			return nil
		}
		token = next
	}
}

// fileList walks a file:// namespace itself: fileblob's listing fails
// when a file vanishes between reading its directory and its attributes
// (a write's temporary file renamed into place, a delete), which a store
// in use does all the time, and it skips directories it cannot read, which
// would make an unreadable tree look empty. Here a file that vanished is
// not listed, and any other error ends the listing.
func fileList(ctx context.Context, ns graveler.StorageNamespace, dir, prefix string, fn func([]BlobInfo) error) error {
	// Only the directory holding the prefix's last complete segment can
	// hold matches.
	root := dir
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		root = filepath.Join(dir, filepath.FromSlash(prefix[:i]))
	}
	page := make([]BlobInfo, 0, blobListPage)
	var fnErr error
	flush := func() error {
		if len(page) == 0 {
			return nil
		}
		fnErr = fn(page)
		page = page[:0]
		return fnErr
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // gone meanwhile, or never written
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if d.IsDir() {
			// Skip a directory no name under which can match.
			if p != root && !strings.HasPrefix(name+"/", prefix) && !strings.HasPrefix(prefix, name+"/") {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasPrefix(name, prefix) {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		page = append(page, BlobInfo{Name: name, Size: info.Size(), ModTime: info.ModTime()})
		if len(page) == blobListPage {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil && err != fnErr && ctx.Err() == nil {
		return fmt.Errorf("list %s %q: %w", ns, prefix, err)
	}
	return err
}

func (s *blobBucketStore) Stat(ctx context.Context, ns graveler.StorageNamespace, name string) (BlobInfo, error) {
	if err := ValidateBlobName(name); err != nil {
		return BlobInfo{}, err
	}
	b, err := s.bucket(ctx, ns)
	if err != nil {
		return BlobInfo{}, err
	}
	if p, ok := s.filePath(ns, name); ok {
		// fileblob's Attributes also looks for a sidecar and opens the
		// file for its content type; a tree write asks this of every
		// child its new nodes name (tens of thousands in a large tree).
		fi, err := os.Stat(p)
		if err == nil && !fi.Mode().IsRegular() {
			err = &fs.PathError{Op: "stat", Path: p, Err: syscall.EISDIR}
		}
		if err != nil {
			if fileNotFound(err) {
				return BlobInfo{}, fmt.Errorf("stat %s %q: %w", ns, name, ErrBlobNotFound)
			}
			return BlobInfo{}, fmt.Errorf("stat %s %q: %w", ns, name, err)
		}
		return BlobInfo{Name: name, Size: fi.Size(), ModTime: fi.ModTime()}, nil
	}
	a, err := b.Attributes(ctx, name)
	if err != nil {
		return BlobInfo{}, blobMapErr("stat", ns, name, err)
	}
	return BlobInfo{Name: name, Size: a.Size, ModTime: a.ModTime}, nil
}

// BeginWrites returns, for a file:// namespace, a Syncer that flushes the
// namespace's file system (see fileSyncer); the other backends have
// nothing to flush.
func (s *blobBucketStore) BeginWrites(ctx context.Context, ns graveler.StorageNamespace) (Syncer, error) {
	if _, err := s.bucket(ctx, ns); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dir, ok := s.fileDir(ns)
	if !ok {
		return noSync{}, nil
	}
	fs, err := newFileSyncer(dir)
	if err != nil {
		return nil, fmt.Errorf("begin writes to %s: %w", ns, err)
	}
	return &namedSyncer{Syncer: fs, ns: ns}, nil
}

// namedSyncer names the namespace in its errors.
type namedSyncer struct {
	Syncer
	ns graveler.StorageNamespace
}

func (n *namedSyncer) Sync(ctx context.Context) error {
	if err := n.Syncer.Sync(ctx); err != nil {
		return fmt.Errorf("sync %s: %w", n.ns, err)
	}
	return nil
}

// Touch refreshes an object's modification time the cheapest way each
// backend allows: a file's times are set in place; an S3 object is copied
// onto itself, which S3 accepts only when the copy replaces the metadata;
// an in-memory object is written again.
func (s *blobBucketStore) Touch(ctx context.Context, ns graveler.StorageNamespace, name string) error {
	if err := ValidateBlobName(name); err != nil {
		return err
	}
	b, err := s.bucket(ctx, ns)
	if err != nil {
		return err
	}
	if dir, ok := s.fileDir(ns); ok {
		// Valid names are the files' relative paths: fileblob escapes
		// nothing a valid name can hold.
		p := filepath.Join(dir, filepath.FromSlash(name))
		now := time.Now()
		if err := os.Chtimes(p, now, now); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("touch %s %q: %w", ns, name, ErrBlobNotFound)
			}
			return fmt.Errorf("touch %s %q: %w", ns, name, err)
		}
		return nil
	}
	if u, _ := url.Parse(string(ns)); u.Scheme == "s3" { // bucket() parsed it already
		err = b.Copy(ctx, name, name, &blob.CopyOptions{BeforeCopy: s3ReplaceMetadata})
	} else {
		var data []byte
		if data, err = b.ReadAll(ctx, name); err == nil {
			err = writeBlob(ctx, b, name, data, &blob.WriterOptions{ContentType: "application/octet-stream"})
		}
	}
	if err != nil {
		return blobMapErr("touch", ns, name, err)
	}
	return nil
}

// Close closes every open bucket; later calls fail with ErrBlobStoreClosed.
// Closing twice is not an error.
func (s *blobBucketStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.packs.closeAll()
	var errs []error
	for ns, b := range s.buckets {
		if err := b.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", ns, err))
		}
	}
	s.buckets = nil
	return errors.Join(errs...)
}

// blobMapErr turns a driver's not-found into ErrBlobNotFound, keeping the
// namespace and name in the message.
func blobMapErr(op string, ns graveler.StorageNamespace, name string, err error) error {
	if gcerrors.Code(err) == gcerrors.NotFound {
		return fmt.Errorf("%s %s %q: %w", op, ns, name, ErrBlobNotFound)
	}
	return fmt.Errorf("%s %s %q: %w", op, ns, name, err)
}

// blobTrimSlashes drops leading and trailing slashes from a URL path.
func blobTrimSlashes(p string) string { return strings.Trim(p, "/") }
