package committed

import (
	"container/list"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// A file:// namespace's Put and Get bypass fileblob's writer and reader:
// per object, fileblob stats the directory, creates a named temporary file
// and renames it, then tries to remove the temporary name again; a read
// stats the file and looks for an attributes sidecar before opening it.
// A commit writes and reads hundreds of small objects, and on a local file
// system the system calls of those writes were about half of its CPU
// time, the extra ones each a path lookup in a directory of many
// thousands of files. The files written are the ones fileblob writes
// (same paths, same bytes, no sidecar), so either reads what the other
// wrote.

// fileDirMode is fileblob's default mode for the directories it creates.
const fileDirMode = 0o777

// filePut stores data at p (a path under the namespace's directory)
// atomically: a reader sees the previous object or this one, whole.
func filePut(p string, data []byte) error {
	err := fileWrite(p, data)
	if errors.Is(err, fs.ErrNotExist) {
		// The object's directory does not exist yet: the first object
		// under a prefix.
		if err := os.MkdirAll(filepath.Dir(p), fileDirMode); err != nil {
			return err
		}
		err = fileWrite(p, data)
	}
	return err
}

// noTmpfile is set once the file system or kernel has refused an unnamed
// file (where fileWrite tries one), so later writes go straight to the
// rename.
var noTmpfile atomic.Bool

var fileTempSeq atomic.Uint64

// fileWriteRenamed writes data to a new temporary file next to p and
// renames it onto p, replacing any file there. A file it replaces may be
// durable already and named by a recorded commit (objects are content
// addressed, so a writer often stores an object again: a revert, the same
// commit on two branches), and renaming unsynced data over it can leave
// an empty file there after a crash on some file systems. So when p
// exists the new file is fsynced before it replaces p; a new name needs
// no fsync here, the writer's Syncer covers it.
func fileWriteRenamed(p string, data []byte) error {
	tmp := p + "." + strconv.FormatInt(time.Now().UnixNano(), 16) + "-" + strconv.FormatUint(fileTempSeq.Add(1), 16) + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = renameNoReplace(tmp, p)
		if errors.Is(err, fs.ErrExist) {
			if err = syncBeforeReplace(f); err == nil {
				err = os.Rename(tmp, p)
			}
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// syncBeforeReplace fsyncs a file about to replace an object; a variable
// so that a test can tell it ran.
var syncBeforeReplace = (*os.File).Sync

// fileNotFound reports whether err from reading a path means no object is
// stored there: nothing at the path, a directory, or a path through a file.
func fileNotFound(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR)
}

// packFiles keeps the files of recently read packs open, so that reading
// one object of a pack costs one pread, not an open, a stat, a pread and
// a close (a cold listing of a packed 1M-entry tree reads ~40,000 objects
// that way). A pack's name is never stored again with other bytes, so an
// open file stays good; Put and Delete through the store drop it anyway,
// so that what the store itself replaced or removed is not read. A pack
// another process deletes is read from the open file until it is evicted:
// its objects are what their IDs say, and only dead packs are deleted.
type packFiles struct {
	mu    sync.Mutex
	max   int
	order *list.List // of *packFile, most recently used first
	files map[string]*list.Element
	// gen counts forgets: a file opened across one is used for the read
	// it was opened for and not kept, as it may be the file replaced or
	// removed. closed: no file is kept any more (Close).
	gen    uint64
	closed bool
}

type packFile struct {
	path string
	f    *os.File
	size int64
	refs int
	gone bool // evicted: closed by the last reader
}

const packFilesOpen = 64

func newPackFiles() *packFiles {
	return &packFiles{max: packFilesOpen, order: list.New(), files: map[string]*list.Element{}}
}

// readAt reads length bytes at offset of the file at p through an open
// file, opening it if needed. An error is the open's, or a *fs.PathError
// wrapping io.ErrUnexpectedEOF when the file ends before those bytes.
func (c *packFiles) readAt(p string, offset, length int64) ([]byte, error) {
	pf, err := c.acquire(p)
	if err != nil {
		return nil, err
	}
	defer c.release(pf)
	// The length comes from a reference, which may be damaged: nothing
	// is allocated for bytes the file does not hold.
	if offset > pf.size || length > pf.size-offset {
		return nil, &fs.PathError{Op: "read", Path: p, Err: io.ErrUnexpectedEOF}
	}
	buf := make([]byte, length)
	if _, err := pf.f.ReadAt(buf, offset); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, &fs.PathError{Op: "read", Path: p, Err: err}
	}
	return buf, nil
}

func (c *packFiles) acquire(p string) (*packFile, error) {
	c.mu.Lock()
	if el, ok := c.files[p]; ok {
		c.order.MoveToFront(el)
		pf := el.Value.(*packFile)
		pf.refs++
		c.mu.Unlock()
		return pf, nil
	}
	gen := c.gen
	c.mu.Unlock()
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	pf := &packFile{path: p, f: f, size: st.Size(), refs: 1}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen || c.closed {
		// A Put or Delete may have replaced or removed what was opened,
		// or the store closed: read once, keep nothing.
		pf.gone = true
		return pf, nil
	}
	if el, ok := c.files[p]; ok {
		// Opened meanwhile by another reader: use that one.
		f.Close()
		c.order.MoveToFront(el)
		other := el.Value.(*packFile)
		other.refs++
		return other, nil
	}
	c.files[p] = c.order.PushFront(pf)
	for c.order.Len() > c.max {
		c.evictLocked(c.order.Back())
	}
	return pf, nil
}

func (c *packFiles) release(pf *packFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pf.refs--
	if pf.gone && pf.refs == 0 {
		pf.f.Close()
	}
}

// forget drops the open file of p, if any, and keeps files being opened
// meanwhile from staying (Put, Delete: called once the file is replaced
// or removed).
func (c *packFiles) forget(p string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if el, ok := c.files[p]; ok {
		c.evictLocked(el)
	}
}

func (c *packFiles) evictLocked(el *list.Element) {
	pf := el.Value.(*packFile)
	c.order.Remove(el)
	delete(c.files, pf.path)
	pf.gone = true
	if pf.refs == 0 {
		pf.f.Close()
	}
}

// closeAll closes every open file no reader holds, and keeps none opened
// after (Close).
func (c *packFiles) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for c.order.Len() > 0 {
		c.evictLocked(c.order.Back())
	}
}
